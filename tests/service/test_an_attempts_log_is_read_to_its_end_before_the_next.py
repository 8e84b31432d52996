"""A job stopped and run again (suspended and resumed, preempted and requeued) has one log per
attempt. What an attempt wrote last, often why it stopped ("checkpoint saved" on SIGTERM),
stays readable once the job is back in the queue and its next attempt runs: the API reads any
attempt's log (`attempt=`), its `eof` is the job's end (`attempt_eof` the attempt's), and
`gpuq logs -f` and the job page read an attempt to its end before the next. On the local
backend's real processes and the embedded loop. Alice and Bob are teammates in vision (Alice
owns the jobs)."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from queue_service.jobs.dispatch import request_stop, run_once
from queue_service.jobs.models import Job
from queue_service.jobs.services import resume_job, submit_job, suspend_job, transition
from tests.conftest import spec
from tests.service.test_cli import Gpuq, gpuq  # noqa: F401
from tests.service.test_cli_follow_attempt import moving_proxy
from tests.ui.test_ui_edges import client_of, log_text, poll

pytestmark = pytest.mark.django_db(transaction=True)


def run_until(job_id: Any, *states: str, attempts: int = 0) -> Job:
    """The embedded loop's steps (sync, cycle, dispatch) until the job is in one of `states`
    (and has had at least `attempts`)."""
    deadline = time.monotonic() + 60
    while (job := Job.objects.get(pk=job_id)).state not in states or job.attempts < attempts:
        assert time.monotonic() < deadline, f"job stuck in {job.state}"
        run_once(notifications=False)
        time.sleep(0.1)
    return job


def runs_twice(people: dict[str, Any], marker: Path) -> Job:
    """Alice's job whose first attempt prints "first", waits, and on SIGTERM (a suspend, a
    preemption) prints "checkpoint saved"; its second attempt prints "second attempt"."""
    command = (
        "trap 'echo checkpoint saved; exit 143' TERM;"
        f" if [ -e {marker} ]; then echo second attempt; else touch {marker}; echo first;"
        " sleep 60 & wait; fi"
    )
    job = submit_job(people["alice"], spec(name="twice", command=["/bin/sh", "-c", command])).job
    job = run_until(job.pk, "running")
    out = Path(job.cluster.settings["workdir"]) / job.external_id / "stdout"
    deadline = time.monotonic() + 30
    while not (out.exists() and b"first\n" in out.read_bytes()):
        assert time.monotonic() < deadline, "the job never printed its first line"
        time.sleep(0.1)
    return job


def suspended_and_resumed(people: dict[str, Any], job_id: Any) -> None:
    suspend_job(people["alice"], Job.objects.get(pk=job_id))
    run_until(job_id, "suspended")
    resume_job(people["alice"], Job.objects.get(pk=job_id))
    run_until(job_id, "succeeded")


def preempted(job: Job) -> None:
    """As the cycle marks a victim: preempting, and its stop sent after commit."""
    why = "reclaimed: team language needs its nominal quota back"
    with transaction.atomic():
        transition(
            job,
            Job.State.PREEMPTING,
            code="preempting_reclaim",
            message=why,
            reason={"code": "preempting", "message": why, "details": {}},
        )
        request_stop(job)


def test_a_log_chunk_says_eof_only_once_the_job_has_ended(
    people: dict[str, Any], local_cluster: Any, client_for: Any, tmp_path: Path
) -> None:
    """A suspended job's attempt has ended, not the job: a client reading until `eof` would
    stop following and miss the output of the attempt that runs once it is resumed."""
    job = runs_twice(people, tmp_path / "ran-once")
    suspend_job(people["alice"], Job.objects.get(pk=job.pk))
    run_until(job.pk, "suspended")

    chunk = client_for("bob").get(f"/api/v1/jobs/{job.pk}/logs/").json()

    assert chunk["text"] == "first\ncheckpoint saved\n"
    assert (chunk["attempt"], chunk["attempt_eof"], chunk["eof"]) == (1, True, False)

    resume_job(people["alice"], Job.objects.get(pk=job.pk))
    run_until(job.pk, "succeeded")
    chunk = client_for("bob").get(f"/api/v1/jobs/{job.pk}/logs/").json()
    assert chunk["text"] == "second attempt\n"
    assert (chunk["attempt"], chunk["attempt_eof"], chunk["eof"]) == (2, True, True)


def test_a_requeued_attempts_log_is_read_to_its_end_after_the_next_attempt_began(
    people: dict[str, Any], local_cluster: Any, client_for: Any, tmp_path: Path
) -> None:
    """The sync that sees a preempted attempt end requeues the job (its external id cleared),
    and the embedded loop dispatches the next attempt in the same round: attempt 1's last
    words are read by the id its run kept."""
    job = runs_twice(people, tmp_path / "ran-once")
    preempted(job)
    run_until(job.pk, "running", "succeeded", attempts=2)
    api = client_for("bob")

    first = api.get(f"/api/v1/jobs/{job.pk}/logs/", {"attempt": 1}).json()
    latest = api.get(f"/api/v1/jobs/{job.pk}/logs/").json()

    assert (first["attempt"], first["text"]) == (1, "first\ncheckpoint saved\n")
    assert (first["attempt_eof"], first["eof"], first["gone"]) == (True, False, False)
    assert (latest["attempt"], latest["text"]) == (2, "second attempt\n")
    unknown = api.get(f"/api/v1/jobs/{job.pk}/logs/", {"attempt": 3})
    assert unknown.status_code == 400
    assert unknown.json() == {"attempt": ["the job has had 2 attempts so far"]}
    download = client_of(people["bob"]).get(f"/jobs/{job.pk}/log/download/?attempt=1")
    assert b"".join(download.streaming_content) == b"first\ncheckpoint saved\n"  # type: ignore[attr-defined]
    assert "attempt1-stdout.log" in download["Content-Disposition"]


def test_logs_follow_prints_what_an_attempt_wrote_last_before_the_next_attempt_began(
    gpuq: Gpuq, local_cluster: Any, live_server: Any, people: dict[str, Any], tmp_path: Path
) -> None:
    job = runs_twice(people, tmp_path / "ran-once")
    job_id = str(job.pk)

    # The first log read gets "first\n"; before the second, the attempt is stopped (printing
    # "checkpoint saved") and the next one runs to its end.
    moves = {("logs", 1): lambda: suspended_and_resumed(people, job_id)}
    with moving_proxy(live_server.url, moves) as url:
        result = gpuq("alice", "logs", "-f", "--interval", "0.1", job_id, url=url)

    written = (Path(local_cluster.settings["workdir"]) / job_id / "1" / "stdout").read_bytes()
    assert written == b"first\ncheckpoint saved\n"  # the attempt did write it
    assert (result.code, result.out) == (0, "first\ncheckpoint saved\nsecond attempt\n")


def test_the_job_page_shows_what_an_attempt_wrote_last_before_the_next_attempts_output(
    people: dict[str, Any], local_cluster: Any, tmp_path: Path
) -> None:
    job = runs_twice(people, tmp_path / "ran-once")
    alice = client_of(people["alice"])
    first, url = poll(alice, f"/jobs/{job.pk}/log/?stream=stdout&offset=0")
    assert log_text([first]) == "first\n"

    suspended_and_resumed(people, job.pk)
    pieces = [first]
    while url and len(pieces) < 10:
        piece, url = poll(alice, url)
        pieces.append(piece)

    assert log_text(pieces) == "first\ncheckpoint saved\n— attempt 2 —second attempt\n"
    assert not url  # the end of the job's log: the poller stops
