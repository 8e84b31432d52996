"""Suspend and resume (as Kueue's suspend, or Slurm's hold and release): a suspended job
leaves the queue, or is stopped (TERM first, so it can checkpoint) and kept out; it holds no
GPUs; resumed, it goes back to where its submit time places it and runs again as a new
attempt. On the local backend with real processes, without Celery (the embedded loop)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from queue_service.backends.base import JobStatus, RemoteState
from queue_service.jobs.dispatch import _apply_status, run_once
from queue_service.jobs.models import Job, JobRun
from queue_service.jobs.services import (
    JobConflict,
    cancel_job,
    resume_job,
    submit_job,
    suspend_job,
    transition,
)
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import spec
from tests.service.test_job_flow import events, run_until

S = Job.State
pytestmark = pytest.mark.django_db(transaction=True)


def positions() -> list[tuple[str, int | None]]:
    return list(
        Job.objects.filter(state=S.PENDING)
        .order_by("submitted_at")
        .values_list("name", "queue_position")
    )


def test_a_suspended_pending_job_leaves_the_queue_and_resumes_in_its_place(
    people: Any, local_cluster: Any
) -> None:
    # 3 nodes x 4 GPUs never fit on this 2-node cluster: both wait.
    first = submit_job(people["alice"], spec(name="first", nodes=3, gpus_per_node=4)).job
    submit_job(people["alice"], spec(name="second", nodes=3, gpus_per_node=4))
    run_cycle()
    assert positions() == [("first", 1), ("second", 2)]

    suspend_job(people["alice"], first)
    run_cycle()

    first.refresh_from_db()
    assert (first.state, first.queue_position) == (S.SUSPENDED, None)
    assert first.reason["message"] == "suspended by alice: resume it to queue it again"
    assert positions() == [("second", 1)]

    resume_job(people["alice"], first)
    run_cycle()

    assert positions() == [("first", 1), ("second", 2)]
    assert events(first) == ["pending", "suspended", "pending"]


def test_a_running_job_is_stopped_with_term_and_runs_again_when_resumed(
    people: Any, local_cluster: Any, tmp_path: Path, client_for: Any
) -> None:
    # It saves on TERM and exits 0; its second run finds what it saved and finishes.
    saved = tmp_path / "saved"
    script = (
        f"if [ -e {saved} ]; then echo resumed from $(cat {saved}); exit 0; fi;"
        f" trap 'echo step-1 > {saved}; echo saved; exit 0' TERM; echo serving;"
        " while true; do sleep 0.05; done"
    )
    job = submit_job(people["alice"], spec(command=["/bin/sh", "-c", script], gpus_per_node=4)).job
    job = run_until(job, lambda j: j.state == S.RUNNING)

    suspend_job(people["alice"], job)
    job = run_until(job, lambda j: j.state == S.SUSPENDED)

    assert (job.exit_code, job.placement, job.cluster) == (0, [], local_cluster)
    assert saved.read_text() == "step-1\n"
    # Its last run's output stays readable while it is suspended: that attempt's log has
    # ended, not the job's.
    logs = client_for("alice").get(f"/api/v1/jobs/{job.pk}/logs/").json()
    assert (logs["text"], logs["attempt_eof"], logs["eof"]) == ("serving\nsaved\n", True, False)
    assert [e.to_state for e in job.events.all() if e.to_state][-2:] == ["suspending", "suspended"]
    (run,) = JobRun.objects.filter(job=job)
    assert run.ended_by == S.SUSPENDED and run.ended_at is not None
    # Its GPUs are free: a job that needs all 8 starts while it is suspended.
    other = submit_job(
        people["bob"], spec(name="all", nodes=2, gpus_per_node=4, command=["sleep", "30"])
    ).job
    other = run_until(other, lambda j: j.state == S.RUNNING)
    cancel_job(people["bob"], other)
    run_until(other, lambda j: j.is_terminal)

    resume_job(people["alice"], job)
    job = run_until(job, lambda j: j.is_terminal)

    assert (job.state, job.exit_code, job.attempts) == (S.SUCCEEDED, 0, 2)
    logs = client_for("alice").get(f"/api/v1/jobs/{job.pk}/logs/").json()
    assert logs["text"] == "resumed from step-1\n"
    assert JobRun.objects.filter(job=job).count() == 2


@pytest.mark.parametrize("state", list(S))
def test_which_states_a_job_can_be_suspended_in(people: Any, state: str) -> None:
    job = submit_job(people["alice"], spec()).job
    Job.objects.filter(pk=job.pk).update(state=state)  # no external id: nothing to stop

    if state in Job.SUSPENDABLE | {S.SUSPENDED, S.SUSPENDING}:
        after = suspend_job(people["alice"], job).state
        # A dispatching job may be on the cluster already: it is stopped once named.
        on_cluster = state in (S.DISPATCHING, S.QUEUED, S.RUNNING, S.PREEMPTING, S.SUSPENDING)
        assert after == (S.SUSPENDING if on_cluster else S.SUSPENDED)
    else:
        with pytest.raises(JobConflict):
            suspend_job(people["alice"], job)
        job.refresh_from_db()
        assert job.state == state


def test_only_a_suspended_job_resumes_and_a_suspended_job_cancels_at_once(people: Any) -> None:
    job = submit_job(people["alice"], spec()).job
    with pytest.raises(JobConflict, match="only a suspended job can be resumed; this one is"):
        resume_job(people["alice"], job)
    suspend_job(people["alice"], job)

    cancel_job(people["alice"], job)

    job.refresh_from_db()
    assert job.state == S.CANCELLED
    with pytest.raises(JobConflict):
        resume_job(people["alice"], job)


@pytest.mark.parametrize(("requeues", "expected"), [(0, S.PENDING), (1, S.FAILED)])
def test_suspends_do_not_use_up_the_retries(
    people: Any, local_cluster: Any, requeues: int, expected: str
) -> None:
    job = submit_job(people["alice"], spec(retries={"max": 1, "on": ["node_failure"]})).job
    # Its fourth run (three suspends before), with `requeues` retries already used.
    Job.objects.filter(pk=job.pk).update(
        state=S.RUNNING, attempts=4, cluster=local_cluster, external_id="x"
    )
    job.refresh_from_db()
    for _ in range(requeues):
        job.events.create(code="requeued_node_failure", message="earlier")

    _apply_status(job, JobStatus("x", RemoteState.NODE_FAILURE, native_state="NODE_FAIL"))

    job.refresh_from_db()
    assert job.state == expected


def test_a_job_that_ends_on_its_own_while_suspending_keeps_its_end(people: Any) -> None:
    job = submit_job(people["alice"], spec()).job
    Job.objects.filter(pk=job.pk).update(state=S.RUNNING, external_id="x")
    job.refresh_from_db()
    transition(job, S.SUSPENDING, code="suspend_requested")

    _apply_status(job, JobStatus("x", RemoteState.SUCCEEDED, exit_code=0), stopped=False)

    job.refresh_from_db()
    assert (job.state, job.exit_code) == (S.SUCCEEDED, 0)


def test_run_once_leaves_a_suspended_job_alone(people: Any, local_cluster: Any) -> None:
    job = submit_job(people["alice"], spec(command="echo hi")).job
    suspend_job(people["alice"], job)
    for _ in range(3):
        run_once()
    job.refresh_from_db()
    assert (job.state, job.external_id, job.attempts) == (S.SUSPENDED, "", 0)


@pytest.mark.parametrize("state", [S.RUNNING, S.PREEMPTING, S.CANCELLING, S.SUSPENDING])
def test_the_scheduler_plans_a_job_being_stopped_as_leaving(
    people: Any, local_cluster: Any, state: str
) -> None:
    from django.utils import timezone

    from queue_service.jobs.snapshot import build_snapshot

    job = submit_job(people["alice"], spec()).job
    Job.objects.filter(pk=job.pk).update(
        state=state, cluster=local_cluster, placement=[{"node": "n1", "gpus": [0]}]
    )

    snap, _, _ = build_snapshot(timezone.now())

    (running,) = snap.running
    assert (running.preempting_since is not None) == (state in Job.STOPPING)


def test_a_job_suspended_while_being_preempted_is_not_stopped_twice(
    people: Any, local_cluster: Any
) -> None:
    import time

    from django.db import transaction

    from queue_service.jobs.dispatch import request_stop

    job = submit_job(people["alice"], spec(command=["sleep", "30"])).job
    job = run_until(job, lambda j: j.state == S.RUNNING)
    with transaction.atomic():  # as the cycle marks a victim
        transition(job, S.PREEMPTING, code="preempting_priority", message="preempted by job X")
        request_stop(job)
    # The preemption's stop has ended it; gpuq's next sync has not seen that yet.
    result = Path(local_cluster.settings["workdir"]) / job.external_id / "result.json"
    deadline = time.monotonic() + 30
    while not result.exists():
        assert time.monotonic() < deadline, "the stop did not end it"
        time.sleep(0.05)

    suspend_job(people["alice"], job)
    job = run_until(job, lambda j: j.state not in (S.SUSPENDING, S.PREEMPTING))

    # A second stop would have found it ended and recorded that as its own end (cancelled).
    assert job.state == S.SUSPENDED
    assert "ended_before_stop" not in [e.code for e in job.events.all()]


def test_a_job_submitted_on_hold_waits_until_resumed(
    people: Any, local_cluster: Any, client_for: Any
) -> None:
    preview = client_for("alice").post("/api/v1/jobs/preview/", spec(hold=True), format="json")
    job = submit_job(people["alice"], spec(name="staged", hold=True)).job
    run_cycle()

    job.refresh_from_db()
    assert (job.state, job.queue_position) == (S.SUSPENDED, None)
    assert job.reason["message"] == "held at submit by alice: resume it to queue it"
    assert job.spec["hold"] is True
    assert preview.json()["reason"]["message"] == "held at submit: it waits until resumed"

    resume_job(people["alice"], job)
    job = run_until(job, lambda j: j.is_terminal)

    assert job.state == S.SUCCEEDED
    assert events(job)[:3] == ["suspended", "pending", "admitted"]
    assert "hold" not in submit_job(people["alice"], spec()).job.spec  # stored only when asked
