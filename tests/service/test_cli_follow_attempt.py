"""`gpuq logs` reads one attempt's log at a time: a log chunk says which attempt it was read
from, and the command counts its offsets in that attempt's log, not in the one a job read
just before it named (a requeue or restart can come between the two). Against the live test
server as tests/service/test_cli.py runs it, through a proxy that lets the job move on (with
the real services and the embedded loop's run_once) just before it forwards a chosen
request. Alice and Bob are teammates in vision, Charlie is in language."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

import contextlib
import http.client
import json
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from queue_service.jobs.dispatch import run_once
from queue_service.jobs.models import Job
from queue_service.jobs.services import resume_job, submit_job, suspend_job
from tests.conftest import spec
from tests.service.test_cli import Gpuq, gpuq, serving  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

Moves = dict[tuple[str, int], Callable[[], None]]


@contextlib.contextmanager
def moving_proxy(upstream: str, moves: Moves, *, old_server: bool = False) -> Iterator[str]:
    """The live server behind a proxy that runs `moves[(kind, n)]` before it forwards the n-th
    request (from 0) of its kind: "job" (GET jobs/<id>/) or "logs". As an `old_server`, its
    log chunks do not say their attempt (the field is taken out)."""
    seen = {"job": 0, "logs": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            kind = "logs" if "/logs/" in self.path else "job"
            move = moves.get((kind, seen[kind]))
            seen[kind] += 1
            if move is not None:
                try:
                    move()
                finally:
                    connection.close()  # this request's thread's own connection
            target = http.client.HTTPConnection(urllib.parse.urlsplit(upstream).netloc, timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            target.request("GET", self.path, headers=headers)
            answer = target.getresponse()
            data = answer.read()
            if old_server and kind == "logs" and answer.status == 200:
                chunk = json.loads(data)
                chunk.pop("attempt", None)
                data = json.dumps(chunk).encode()
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.getheader("Content-Type", ""))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        yield url


def run_until(job_id: str, *states: str) -> None:
    """The embedded loop's steps (sync, cycle, dispatch) until the job is in one of `states`."""
    deadline = time.monotonic() + 30
    while Job.objects.get(pk=job_id).state not in states:
        assert time.monotonic() < deadline, f"job stuck in {Job.objects.get(pk=job_id).state}"
        run_once(notifications=False)
        time.sleep(0.1)


def restarted(people: dict[str, Any], job_id: str) -> Callable[[], None]:
    """A move: the job's attempt is suspended, resumed and its next attempt runs to its end."""

    def move() -> None:
        suspend_job(people["alice"], Job.objects.get(pk=job_id))
        run_until(job_id, "suspended")
        resume_job(people["alice"], Job.objects.get(pk=job_id))
        run_until(job_id, "succeeded")

    return move


def twice(people: dict[str, Any], marker: Path) -> str:
    """A job whose first attempt prints "first" and waits; its second, a longer line."""
    command = (
        f"if [ -e {marker} ]; then echo second attempt; else touch {marker}; echo first;"
        " sleep 60; fi"
    )
    job = submit_job(people["alice"], spec(name="twice", command=["/bin/sh", "-c", command])).job
    run_until(str(job.pk), "running")
    deadline = time.monotonic() + 30
    out = Path(local_dir(job.pk)) / "stdout"
    while not (out.exists() and out.read_bytes() == b"first\n"):
        assert time.monotonic() < deadline, "the first attempt printed nothing"
        time.sleep(0.1)
    return str(job.pk)


def local_dir(job_id: Any) -> str:
    job = Job.objects.select_related("cluster").get(pk=job_id)
    return str(Path(job.cluster.settings["workdir"]) / job.external_id)


def test_logs_follow_prints_a_first_attempt_once_when_it_starts_between_the_job_and_log_reads(
    gpuq: Gpuq, local_cluster: Any, live_server: Any, people: dict[str, Any]
) -> None:
    job = submit_job(
        people["alice"], spec(name="quick", command=["/bin/sh", "-c", "echo one; echo two"])
    ).job
    job_id = str(job.pk)
    # The job read says "pending, attempt 0"; by the log read, attempt 1 has run to its end.
    moves: Moves = {("logs", 0): lambda: run_until(job_id, "succeeded")}
    with moving_proxy(live_server.url, moves) as url:
        result = gpuq("alice", "logs", "-f", "--interval", "0.1", job_id, url=url)
    assert (result.code, result.out) == (0, "one\ntwo\n"), result.err


def test_logs_follow_reads_a_new_attempt_from_its_start_when_it_comes_between_the_reads(
    gpuq: Gpuq, local_cluster: Any, live_server: Any, people: dict[str, Any], tmp_path: Path
) -> None:
    job_id = twice(people, tmp_path / "ran-once")
    # The first log read gets "first\n"; the second is asked at offset 6 after a job read
    # that said attempt 1, and answered from attempt 2's log.
    moves: Moves = {("logs", 1): restarted(people, job_id)}
    with moving_proxy(live_server.url, moves) as url:
        result = gpuq("alice", "logs", "-f", "--interval", "0.1", job_id, url=url)
    assert (result.code, result.out) == (0, "first\nsecond attempt\n"), result.err


@pytest.mark.parametrize("json_output", [False, True], ids=["text", "json"])
def test_logs_reads_an_attempt_to_its_end_then_the_next_when_it_comes_between_two_chunks(
    gpuq: Gpuq,
    local_cluster: Any,
    live_server: Any,
    people: dict[str, Any],
    tmp_path: Path,
    monkeypatch: Any,
    json_output: bool,
) -> None:
    monkeypatch.setattr("queue_service.cli.LOG_CHUNK", 3)
    job_id = twice(people, tmp_path / "ran-once")
    # "fir" from attempt 1; before the read at offset 3, attempt 2 runs: attempt 1 is read to
    # its end, then attempt 2 from its start.
    moves: Moves = {("logs", 1): restarted(people, job_id)}
    with moving_proxy(live_server.url, moves) as url:
        result = gpuq("alice", "logs", *(["--json"] if json_output else []), job_id, url=url)
    assert result.code == 0, result.err
    if not json_output:
        assert result.out == "first\nsecond attempt\n"
        return
    chunks = json.loads(result.out)
    # --json is the same reading: the chunks as read, each naming its attempt.
    assert [(c["attempt"], c["offset"], c["text"]) for c in chunks] == [
        (1, 0, "fir"),
        (1, 3, "st\n"),
        (2, 0, "sec"),
        (2, 3, "ond"),
        (2, 6, " at"),
        (2, 9, "tem"),
        (2, 12, "pt\n"),
    ]


def test_logs_follow_against_a_server_whose_chunks_do_not_say_their_attempt_still_restarts(
    gpuq: Gpuq, local_cluster: Any, live_server: Any, people: dict[str, Any], tmp_path: Path
) -> None:
    job_id = twice(people, tmp_path / "ran-once")
    # The new attempt comes before a job read (not between a job read and a log read): an
    # older server's follower sees it there, as it always did.
    moves: Moves = {("job", 1): restarted(people, job_id)}
    with moving_proxy(live_server.url, moves, old_server=True) as url:
        result = gpuq("alice", "logs", "-f", "--interval", "0.1", job_id, url=url)
    assert (result.code, result.out) == (0, "first\nsecond attempt\n"), result.err


@pytest.mark.parametrize(("who", "status"), [("alice", 200), ("bob", 200), ("charlie", 404)])
def test_a_log_chunk_says_which_attempt_it_was_read_from_to_the_team_only(
    client_for: Any, people: dict[str, Any], who: str, status: int
) -> None:
    job = submit_job(people["alice"], spec(name="counted")).job
    Job.objects.filter(pk=job.pk).update(attempts=3)
    response = client_for(who).get(f"/api/v1/jobs/{job.pk}/logs/")
    assert response.status_code == status, response.content
    if status == 200:
        assert response.json()["attempt"] == 3
    else:
        assert "attempt" not in response.json()


def test_a_chunk_of_another_log_of_the_same_attempt_is_read_from_its_start() -> None:
    """A gang the cluster recreated in place (Volcano) or a restarted container keeps the
    attempt but starts a new log, which the chunk names (`log_id`): read from its start, as a
    new attempt is, not at the offset counted in the old log."""
    from queue_service.cli import _chunk_of_one_attempt

    logs = {"pod-a/0": b"first run, all of it\n", "pod-b/0": b"second\n"}
    now = ["pod-a/0"]
    reads: list[int] = []

    def read_at(offset: int, attempt: int | None) -> dict[str, Any]:
        reads.append(offset)
        data = logs[now[0]][offset:]
        return {"attempt": 2, "log_id": now[0], "offset": offset, "data": data}

    chunk, log = _chunk_of_one_attempt(read_at, 0, None, 2)
    assert (chunk["data"], log) == (logs["pod-a/0"], (2, "pod-a/0"))
    now[0] = "pod-b/0"
    chunk, log = _chunk_of_one_attempt(read_at, len(logs["pod-a/0"]), log, 2)
    assert (chunk["data"], log) == (b"second\n", (2, "pod-b/0"))
    assert reads == [0, len(logs["pod-a/0"]), 0]
