"""The whole flow on the local backend, without Celery (the embedded mode's loop):
submit -> cycle admits -> dispatch -> running -> succeeded, and the ways it can end otherwise."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from queue_service.jobs.dispatch import run_once
from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, submit_job
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import spec

S = Job.State
# Real commits: dispatch and stop happen on commit, as in production.
pytestmark = pytest.mark.django_db(transaction=True)


def run_until(job: Job, done: Callable[[Job], bool], timeout: float = 30) -> Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run_once()
        job.refresh_from_db()
        if done(job):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job stuck in {job.state}: {job.reason}")


def events(job: Job) -> list[str]:
    return [e.to_state for e in job.events.all() if e.to_state]


@pytest.fixture
def submit(people: Any, local_cluster: Any) -> Callable[..., Job]:
    def make(who: str = "alice", **overrides: Any) -> Job:
        return submit_job(people[who], spec(**overrides)).job

    return make


def test_a_job_runs_to_success_and_its_output_is_readable(submit: Any, client_for: Any) -> None:
    job = submit(command=["/bin/sh", "-c", "echo hello from $CUDA_VISIBLE_DEVICES"])
    job = run_until(job, lambda j: j.is_terminal)
    assert (job.state, job.exit_code) == (S.SUCCEEDED, 0)
    assert events(job) == ["pending", "admitted", "dispatching", "queued", "running", "succeeded"]
    logs = client_for("alice").get(f"/api/v1/jobs/{job.pk}/logs/").json()
    assert logs["text"] == "hello from 0\n" and logs["eof"] is True


def test_a_failing_job_records_its_exit_code(submit: Any) -> None:
    job = run_until(submit(command="exit 7"), lambda j: j.is_terminal)
    assert (job.state, job.exit_code) == (S.FAILED, 7)


def test_a_job_over_its_time_limit_times_out(submit: Any) -> None:
    job = run_until(submit(command=["sleep", "30"], time_limit=1), lambda j: j.is_terminal)
    assert job.state == S.TIMEOUT


def test_cancelling_a_running_job_stops_its_process(submit: Any, people: Any) -> None:
    job = run_until(submit(command=["sleep", "30"]), lambda j: j.state == S.RUNNING)
    cancel_job(people["alice"], job)
    job = run_until(job, lambda j: j.is_terminal)
    assert job.state == S.CANCELLED
    assert events(job)[-2:] == ["cancelling", "cancelled"]


def test_a_job_that_ended_before_its_cancel_reached_the_cluster_keeps_its_own_end(
    submit: Any, people: Any, local_cluster: Any
) -> None:
    from pathlib import Path

    # The job runs and ends; gpuq's next sync has not seen it yet when alice cancels.
    job = run_until(submit(command="sleep 0.5; echo done"), lambda j: j.state == S.RUNNING)
    result = Path(local_cluster.settings["workdir"]) / job.external_id / "result.json"
    deadline = time.monotonic() + 30
    while not result.exists():
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.05)

    cancel_job(people["alice"], job)  # stops it after the commit, as in production

    job.refresh_from_db()
    assert (job.state, job.exit_code) == (S.SUCCEEDED, 0)
    assert events(job)[-2:] == ["cancelling", "succeeded"]
    assert "ended_before_stop" in [e.code for e in job.events.all()]


def test_a_pending_job_cancelled_never_starts(submit: Any, people: Any) -> None:
    job = submit(command=["sleep", "30"])
    cancel_job(people["alice"], job)
    run_once()
    job.refresh_from_db()
    assert job.state == S.CANCELLED and job.external_id == ""


def test_a_gang_gets_all_its_nodes_at_once(submit: Any) -> None:
    job = submit(nodes=2, gpus_per_node=4, command="echo $GPUQ_NODE_RANK")
    job = run_until(job, lambda j: j.is_terminal)
    assert job.state == S.SUCCEEDED
    assert sorted(a["node"] for a in job.placement) == ["n1", "n2"]
    assert all(len(a["gpus"]) == 4 for a in job.placement)


def test_a_job_that_does_not_fit_waits_with_a_reason(submit: Any) -> None:
    job = submit(nodes=3, gpus_per_node=4)  # the cluster has 2 nodes
    run_cycle()
    job.refresh_from_db()
    assert job.state == S.PENDING
    assert job.reason["code"] and job.reason["message"]
    assert job.queue_position == 1


def test_a_lost_supervisor_is_requeued_per_the_retry_policy(
    submit: Any, local_cluster: Any
) -> None:
    import json
    import os
    import signal
    from pathlib import Path

    job = run_until(submit(command=["sleep", "30"]), lambda j: j.state == S.RUNNING)
    job_dir = Path(local_cluster.settings["workdir"]) / job.external_id
    os.kill(int((job_dir / "supervisor.pid").read_text()), signal.SIGKILL)
    for pid in json.loads((job_dir / "started.json").read_text())["pids"]:
        os.killpg(pid, signal.SIGKILL)
    job = run_until(job, lambda j: j.is_terminal)
    # A vanished supervisor is "lost": gpuq cannot tell a crash from a node failure here.
    assert job.state == S.LOST


def test_a_transient_dispatch_error_is_retried_until_it_works(
    submit: Any, local_cluster: Any
) -> None:
    from pathlib import Path

    workdir = Path(local_cluster.settings["workdir"])
    workdir.mkdir(parents=True, exist_ok=True)
    blocker = workdir / "tmp-blocker"
    blocker.write_text("a file where the job directories should go")
    local_cluster.settings = {**local_cluster.settings, "workdir": str(blocker)}
    local_cluster.save()
    job = submit(command=["true"])
    run_once()
    job.refresh_from_db()
    # The cluster may have it (only a submit of the same attempt can tell): not admitted again.
    assert (job.state, job.reason["code"]) == (S.DISPATCHING, "dispatch_retry")
    assert "dispatch_retry" in [e.code for e in job.events.all()]
    blocker.unlink()
    job = run_until(job, lambda j: j.is_terminal)
    assert job.state == S.SUCCEEDED and job.attempts == 1


def test_preview_says_whether_a_job_would_wait_and_why(client_for: Any, local_cluster: Any) -> None:
    client = client_for("alice")
    fits = client.post("/api/v1/jobs/preview/", spec(gpus_per_node=2), format="json").json()
    too_big = client.post("/api/v1/jobs/preview/", spec(nodes=3, gpus_per_node=4), format="json")
    assert fits["starts_now"] is True
    assert too_big.status_code == 200
    assert too_big.json()["starts_now"] is False and too_big.json()["reason"]["message"]
    assert Job.objects.count() == 0


def test_dispatch_twice_submits_once(submit: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    from queue_service.jobs.dispatch import dispatch_job

    job = submit(command=["sleep", "1"])
    run_cycle()

    def go(_: int) -> None:
        try:
            dispatch_job(str(job.pk))
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(go, range(3)))
    dispatch_job(str(job.pk))
    job.refresh_from_db()
    assert job.state == S.QUEUED and job.attempts == 1
    assert [e.code for e in job.events.all()].count("dispatched") == 1


def test_the_tasks_run_from_manage_py(submit: Any) -> None:
    from io import StringIO

    from django.core.management import call_command

    job = submit(command=["true"])
    call_command("gpuq_task", "schedule_cycle", stdout=StringIO())
    call_command("gpuq_task", "dispatch_job", str(job.pk), stdout=StringIO())
    job.refresh_from_db()
    assert job.state in (S.QUEUED, S.RUNNING)


def test_a_job_that_exits_cleanly_on_sigterm_is_still_cancelled(submit: Any, people: Any) -> None:
    script = "trap 'echo saving; exit 0' TERM; echo up; while true; do sleep 0.05; done"
    job = run_until(submit(command=["/bin/sh", "-c", script]), lambda j: j.state == S.RUNNING)
    cancel_job(people["alice"], job)
    job = run_until(job, lambda j: j.is_terminal)
    assert job.state == S.CANCELLED
