"""What a stop leaves behind: a job that ran on its cluster before any sync saw it running,
then was stopped, is charged for its run like any other; a job the user cancelled says so
when it ends, in gpuq's own words, whatever the cluster called the end; and in the embedded
mode, a stop the sync sends again does not hold up the sync while the cluster answers it.

Alice owns the jobs; the local cluster runs them as real processes."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from queue_service.backends.base import JobStatus, RemoteState
from queue_service.backends.local import LocalBackend
from queue_service.backends.slurm.parsers import job_status, parse_squeue
from queue_service.jobs import tasks
from queue_service.jobs.dispatch import _apply_status, run_once, stop_job, sync_cluster
from queue_service.jobs.models import Job, JobRun
from queue_service.jobs.reports import usage_report
from queue_service.jobs.services import cancel_job, submit_job, suspend_job, transition
from tests.conftest import spec
from tests.service.test_job_flow import run_until
from tests.service.test_lifecycle_edges import moves, wait_for_verdict

S = Job.State
GPUS = 4


def started_on_cluster(cluster: Any, job: Job) -> datetime:
    """Once the local cluster has started the job's processes (started.json), when it did:
    gpuq's syncs have not seen it yet."""
    path = Path(cluster.settings["workdir"]) / job.external_id / "started.json"
    deadline = time.monotonic() + 30
    while not path.exists():
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.05)
    return datetime.fromtimestamp(json.loads(path.read_text())["at"], UTC)


def handed_over(people: Any, **overrides: Any) -> Job:
    """A job gpuq handed to the local cluster (queued); no sync has looked at it since."""
    job = submit_job(people["alice"], spec(gpus_per_node=GPUS, **overrides)).job
    run_once()  # sync, then the cycle admits it, then its dispatch hands it over
    job.refresh_from_db()
    assert job.state == S.QUEUED
    return job


def charged_gpu_hours(job: Job) -> float:
    today = timezone.now().date()
    return usage_report(job.team, today, today, timezone.now()).total("alice")


def only_run(job: Job) -> JobRun:
    (run,) = JobRun.objects.filter(job=job)
    return run


# --- a job that ran unseen, then was stopped, is charged ------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_job_cancelled_while_gpuq_thought_it_queued_is_charged_for_what_it_ran(
    people: Any, local_cluster: Any
) -> None:
    """The cluster started the job between two syncs; Alice cancels it before any sync saw it
    running. It held 4 GPUs for over a second: its run counts from when it was handed over
    (at the latest, its real start) to its end, as for a job seen running."""
    job = handed_over(people, command=["sleep", "30"])
    began = started_on_cluster(local_cluster, job)
    time.sleep(1.0)

    cancel_job(people["alice"], job)  # its stop runs after commit (embedded mode)
    wait_for_verdict(local_cluster, job)
    sync_cluster(local_cluster.pk)

    job.refresh_from_db()
    assert job.state == S.CANCELLED, moves(job)
    run = only_run(job)
    assert run.ended_by == S.CANCELLED and run.ended_at is not None
    assert run.started_at <= began and run.started_at == job.started_at
    assert (run.ended_at - run.started_at).total_seconds() >= 1.0
    assert charged_gpu_hours(job) >= GPUS * 1.0 / 3600


@pytest.mark.django_db(transaction=True)
def test_a_job_that_had_already_succeeded_unseen_when_cancelled_is_charged_for_its_run(
    people: Any, local_cluster: Any
) -> None:
    """It ran and succeeded between two syncs; the cancel finds it ended and it keeps its own
    end (succeeded), and its run is charged like that of a job whose end a sync saw."""
    job = handed_over(people, command=["sleep", "1.5"])
    wait_for_verdict(local_cluster, job)

    cancel_job(people["alice"], job)

    job.refresh_from_db()
    assert (job.state, job.exit_code) == (S.SUCCEEDED, 0), moves(job)
    run = only_run(job)
    assert run.ended_by == S.SUCCEEDED
    assert (run.ended_at - run.started_at).total_seconds() >= 1.5
    assert charged_gpu_hours(job) >= GPUS * 1.5 / 3600


@pytest.mark.django_db(transaction=True)
def test_a_sync_that_sees_a_cancelling_job_running_opens_its_run(
    people: Any, local_cluster: Any, settings: Any, monkeypatch: Any
) -> None:
    """The cancel's stop is still on its way (a task in the queue; production mode) when the
    next sync finds the job running on the cluster: it is charged from then on, so the
    usage page counts it while it is being cancelled, and its run ends with the stop."""
    job = handed_over(people, command=["sleep", "30"])
    began = started_on_cluster(local_cluster, job)
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"  # stops go as tasks
    queued: list[str] = []
    monkeypatch.setattr(tasks.cancel_job, "delay", queued.append)
    cancel_job(people["alice"], job)
    assert queued == [str(job.pk)]

    sync_cluster(local_cluster.pk)

    run = only_run(job)
    assert run.ended_at is None and run.started_at <= began
    assert Job.objects.get(pk=job.pk).state == S.CANCELLING

    stop_job(str(job.pk))  # the task
    wait_for_verdict(local_cluster, job)
    sync_cluster(local_cluster.pk)

    job.refresh_from_db()
    assert job.state == S.CANCELLED
    assert only_run(job).ended_by == S.CANCELLED


@pytest.mark.django_db(transaction=True)
def test_a_job_suspended_while_gpuq_thought_it_queued_is_charged_for_what_it_ran(
    people: Any, local_cluster: Any
) -> None:
    """As for a cancel: a suspend stops the job the same way."""
    job = handed_over(people, command=["sleep", "30"])
    began = started_on_cluster(local_cluster, job)
    time.sleep(1.0)

    suspend_job(people["alice"], job)
    wait_for_verdict(local_cluster, job)
    sync_cluster(local_cluster.pk)

    job.refresh_from_db()
    assert job.state == S.SUSPENDED, moves(job)
    run = only_run(job)
    assert run.ended_by == S.SUSPENDED and run.started_at <= began
    assert (run.ended_at - run.started_at).total_seconds() >= 1.0


def cancelled_while_queued(people: Any, cluster: Any) -> Job:
    """A job on a cluster, seen queued there, whose owner cancelled it (the stop itself is
    left out: outside a committed transaction it never runs)."""
    job = submit_job(people["alice"], spec(gpus_per_node=GPUS)).job
    Job.objects.filter(pk=job.pk).update(
        state=S.QUEUED, external_id="4651", attempts=1, cluster=cluster
    )
    job.refresh_from_db()
    job.events.create(from_state=S.DISPATCHING, to_state=S.QUEUED, code="dispatched")
    cancel_job(people["alice"], job)
    return Job.objects.select_related("cluster").get(pk=job.pk)


@pytest.mark.parametrize(
    ("status", "charged"),
    [
        # squeue of a job scancelled while it ran: the wait status of its SIGTERM
        (parse_squeue("4651|CANCELLED|15|/home/u/.gpuq/jobs/j.1|None")["4651"], True),
        # it had failed on its own before the stop came (exit 3)
        (JobStatus("4651", RemoteState.FAILED, exit_code=3, reason="exit code 3"), True),
        # scancelled while it waited for resources: it never ran
        (parse_squeue("4651|CANCELLED|0|/home/u/.gpuq/jobs/j.1|Resources")["4651"], False),
        # the local cluster's "cancelled before it started"
        (
            JobStatus(
                "4651",
                RemoteState.CANCELLED,
                reason="cancelled before it started",
                started=False,
            ),
            False,
        ),
        # the cluster forgot it: nothing says it ran
        (JobStatus("4651", RemoteState.LOST, reason="Slurm no longer knows this job"), False),
    ],
    ids=["killed-running", "failed-first", "cancelled-pending", "cancelled-unstarted", "lost"],
)
def test_a_stopped_job_is_charged_when_its_end_says_it_ran(
    people: Any, local_cluster: Any, status: JobStatus, charged: bool
) -> None:
    job = cancelled_while_queued(people, local_cluster)

    _apply_status(job, status)

    job.refresh_from_db()
    assert job.is_terminal
    runs = list(JobRun.objects.filter(job=job))
    assert bool(runs) == charged
    if charged:
        (run,) = runs
        assert run.ended_at is not None and run.ended_by == job.state


# --- the reason of a job the user cancelled -----------------------------------------------


@pytest.mark.parametrize(
    "status",
    [
        job_status("4651", "CANCELLED by 0", "None", 143),  # sacct, as the scancel left it
        JobStatus("4651", RemoteState.FAILED, exit_code=143, reason="Error", native_state="Error"),
        JobStatus("4651", RemoteState.CANCELLED, reason="deleted", native_state="Terminating"),
        JobStatus("4651", RemoteState.NODE_FAILURE, reason="node n1 failed"),
    ],
    ids=["slurm", "k8s-error", "k8s-deleted", "node-failure-meanwhile"],
)
def test_a_job_ended_by_the_cancel_of_its_owner_says_so_in_gpuqs_words(
    people: Any, local_cluster: Any, status: JobStatus
) -> None:
    """Whatever the cluster called the end of the job its stop ended (Slurm's `CANCELLED by
    0`, a pod's Error), the job is cancelled, and its reason is gpuq's: cancelled by Alice, as
    for a job cancelled before it reached a cluster. The cluster's words are kept in the
    reason's details."""
    job = cancelled_while_queued(people, local_cluster)

    _apply_status(job, status)

    job.refresh_from_db()
    assert job.state == S.CANCELLED
    assert (job.reason["code"], job.reason["message"]) == ("cancelled", "cancelled by alice")
    said = job.reason["details"]["cluster"]
    assert (said["state"], said["reason"]) == (status.state, status.reason)


@pytest.mark.django_db(transaction=True)
def test_a_running_job_cancelled_by_its_owner_says_who_cancelled_it(
    people: Any, local_cluster: Any
) -> None:
    job = submit_job(people["alice"], spec(command=["sleep", "30"])).job
    job = run_until(job, lambda j: j.state == S.RUNNING)

    cancel_job(people["alice"], job)
    wait_for_verdict(local_cluster, job)
    sync_cluster(local_cluster.pk)

    job.refresh_from_db()
    assert job.state == S.CANCELLED
    assert (job.reason["code"], job.reason["message"]) == ("cancelled", "cancelled by alice")


def test_a_job_that_timed_out_while_being_cancelled_keeps_its_own_reason(
    people: Any, local_cluster: Any
) -> None:
    """A time limit reached before the stop landed is the job's own end, as before."""
    job = cancelled_while_queued(people, local_cluster)

    _apply_status(job, JobStatus("4651", RemoteState.TIMEOUT, reason="time limit 60s reached"))

    job.refresh_from_db()
    assert job.state == S.TIMEOUT
    assert job.reason["code"] == "timeout"


# --- the embedded mode: a stop sent again by the sync ---------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_stop_sent_again_by_the_sync_does_not_hold_up_the_sync_in_the_embedded_mode(
    people: Any, local_cluster: Any, settings: Any, monkeypatch: Any
) -> None:
    """Without Celery the sync used to send a lost stop again inline, and a cluster's stop
    may take the whole grace to answer (Slurm's: TERM, then a wait for the job to end, then
    scancel): every other job of the cluster (here, one that succeeded), every other
    cluster, the cycle and dispatch waited for it. The stop goes on in a thread of its own."""
    settings.GPUQ_PREEMPTION_GRACE_S = 1
    stuck = submit_job(people["alice"], spec(name="stuck", command=["sleep", "60"])).job
    quick = submit_job(people["alice"], spec(name="quick", command=["sleep", "1"])).job
    stuck = run_until(stuck, lambda j: j.state == S.RUNNING)
    transition(stuck, S.CANCELLING, code="cancel_requested", message="its stop was lost")
    long_ago = timezone.now() - timedelta(seconds=120)
    Job.objects.filter(pk=stuck.pk).update(updated_at=long_ago, stopping_since=long_ago)
    quick.refresh_from_db()
    wait_for_verdict(local_cluster, quick)

    answer = threading.Event()
    asked = threading.Event()
    real_cancel = LocalBackend.cancel

    def slow_cancel(self: Any, external_id: str, grace_s: float = 30.0) -> bool:
        asked.set()
        answer.wait(20)  # the cluster takes its time to answer
        return real_cancel(self, external_id, grace_s=grace_s)

    monkeypatch.setattr(LocalBackend, "cancel", slow_cancel)

    began = time.monotonic()
    sync_cluster(local_cluster.pk)
    took = time.monotonic() - began

    assert Job.objects.get(pk=quick.pk).state == S.SUCCEEDED
    assert took < 10, f"the sync waited {took:.1f} s for a stop"
    assert asked.wait(10), "the stop was not sent again"

    answer.set()
    deadline = time.monotonic() + 30
    while Job.objects.get(pk=stuck.pk).state != S.CANCELLED:
        assert time.monotonic() < deadline, moves(stuck)
        time.sleep(0.2)
        sync_cluster(local_cluster.pk)


def queued_on_cluster(people: Any, cluster: Any) -> Job:
    """A job gpuq handed to a cluster, seen queued there; nobody in gpuq asked it to stop."""
    job = submit_job(people["alice"], spec(gpus_per_node=GPUS)).job
    Job.objects.filter(pk=job.pk).update(
        state=S.QUEUED, external_id="4652", attempts=1, cluster=cluster
    )
    job.events.create(from_state=S.DISPATCHING, to_state=S.QUEUED, code="dispatched")
    return Job.objects.select_related("cluster").get(pk=job.pk)


@pytest.mark.parametrize(
    ("status", "charged"),
    [
        # an admin's scancel while it waited for resources: it never ran
        (parse_squeue("4652|CANCELLED|0|/home/u/.gpuq/jobs/j.1|Resources")["4652"], False),
        # scancelled while it ran, between two syncs
        (parse_squeue("4652|CANCELLED|15|/home/u/.gpuq/jobs/j.1|None")["4652"], True),
        # it ran and failed between two syncs
        (JobStatus("4652", RemoteState.FAILED, exit_code=3, reason="exit code 3"), True),
    ],
    ids=["cancelled-waiting", "cancelled-running", "failed"],
)
def test_a_queued_job_ended_on_its_cluster_is_charged_only_when_its_end_says_it_ran(
    people: Any, local_cluster: Any, status: JobStatus, charged: bool
) -> None:
    job = queued_on_cluster(people, local_cluster)

    _apply_status(job, status)

    job.refresh_from_db()
    assert job.state == (S.CANCELLED if status.state == RemoteState.CANCELLED else S.FAILED)
    assert JobRun.objects.filter(job=job).exists() == charged
    assert job.started_at is not None if charged else job.started_at is None
