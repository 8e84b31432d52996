"""The job lifecycle at its edges: a stop that runs twice or goes astray, a cluster disabled
under running jobs, a sync that reads the cluster before a stop lands, a job that starts and
ends between two syncs, what a cancelled job still says, and email asked of one task of an
array. Each case is what a user or the accounting would see."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from queue_service.backends.base import JobStatus, RemoteState
from queue_service.clusters.models import Cluster
from queue_service.jobs import tasks
from queue_service.jobs.dispatch import (
    _apply_status,
    request_stop,
    run_once,
    stop_job,
    sync_cluster,
)
from queue_service.jobs.models import Job, JobRun, Notification
from queue_service.jobs.services import (
    cancel_job,
    submit_job,
    suspend_job,
    transition,
    update_job,
)
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import spec
from tests.service.test_job_flow import run_until

S = Job.State
WHY_PREEMPTED = "reclaimed: team language needs its nominal quota back"


def wait_for_verdict(cluster: Any, job: Job) -> None:
    """Until the local backend's supervisor has written the job's end (result.json): the
    cluster has ended it, and gpuq's next sync has not seen that yet."""
    result = Path(cluster.settings["workdir"]) / job.external_id / "result.json"
    deadline = time.monotonic() + 30
    while not result.exists():
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.05)


def moves(job: Job) -> list[tuple[str, str]]:
    return [(e.code, e.to_state) for e in job.events.all()]


def suspend(people: Any, job: Job) -> None:
    suspend_job(people["alice"], job)  # its stop runs after commit (embedded mode)


def preempt(people: Any, job: Job) -> None:
    with transaction.atomic():  # as the cycle marks a victim
        transition(
            job,
            S.PREEMPTING,
            code="preempting_reclaim",
            message=WHY_PREEMPTED,
            reason={"code": "preempting", "message": WHY_PREEMPTED, "details": {}},
        )
        request_stop(job)


# --- a stop task run twice -------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("stop", "ends"),
    [
        (suspend, S.SUSPENDED),  # not cancelled: it can still be resumed
        (preempt, S.PENDING),  # requeued, as its retry policy says
    ],
)
def test_a_stop_task_run_twice_records_the_end_the_stop_caused(
    people: Any, local_cluster: Any, stop: Any, ends: str
) -> None:
    """Celery delivers at least once, and cancel_job retries after a transient error that
    may come after the stop went through: the second run finds the job ended by the first
    stop, which is not an end of the job's own."""
    job = submit_job(
        people["alice"], spec(command=["sleep", "30"], retries={"max": 2, "on": ["preemption"]})
    ).job
    job = run_until(job, lambda j: j.state == S.RUNNING)
    stop(people, job)
    job.refresh_from_db()
    wait_for_verdict(local_cluster, job)

    stop_job(str(job.pk))  # the same task again
    sync_cluster(local_cluster.pk)

    job.refresh_from_db()
    assert job.state == ends, moves(job)
    assert "ended_before_stop" not in [code for code, _ in moves(job)]


@pytest.mark.django_db(transaction=True)
def test_a_lost_stop_is_sent_again_by_a_task_of_its_own_once_per_grace(
    people: Any, local_cluster: Any, settings: Any, monkeypatch: Any
) -> None:
    """The sync sends again a stop that was lost (or did not take), but not itself: a stop
    may wait out the grace on the cluster (Slurm), and several would hold up the sync of
    every job of the cluster past its time limit. Nor on every sync while the stop works."""
    job = submit_job(people["alice"], spec(command="trap '' TERM; sleep 30")).job
    job = run_until(job, lambda j: j.state == S.RUNNING)
    transition(job, S.CANCELLING, code="cancel_requested", message="its stop task was lost")
    long_ago = timezone.now() - timedelta(seconds=settings.GPUQ_PREEMPTION_GRACE_S + 60)
    Job.objects.filter(pk=job.pk).update(updated_at=long_ago, stopping_since=long_ago)
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"  # stops go as tasks
    sent: list[str] = []
    monkeypatch.setattr(tasks.cancel_job, "delay", sent.append)

    sync_cluster(local_cluster.pk)
    assert sent == [str(job.pk)]
    assert "stop_sent" not in [code for code, _ in moves(job)]  # the sync stopped nothing

    stop_job(str(job.pk))  # the task; the job ignores TERM, so it runs on for the grace
    sync_cluster(local_cluster.pk)
    assert sent == [str(job.pk)]
    assert Job.objects.get(pk=job.pk).state == S.CANCELLING


# --- a cluster disabled with jobs on it ---------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_job_on_a_cluster_disabled_while_it_runs_still_has_its_end_recorded(
    people: Any, local_cluster: Any
) -> None:
    """Disabling a cluster stops new work going there (submit and the cycle skip it), but
    what already runs there must still be followed: otherwise it stays running forever,
    holding its team's quota, with a run that fair share charges without end."""
    job = submit_job(people["alice"], spec(command=["sleep", "1"], gpus_per_node=4)).job
    job = run_until(job, lambda j: j.state == S.RUNNING)
    Cluster.objects.filter(pk=local_cluster.pk).update(enabled=False)
    wait_for_verdict(local_cluster, job)

    for _ in range(3):
        run_once()

    job.refresh_from_db()
    assert job.state == S.SUCCEEDED
    assert not JobRun.objects.filter(job=job, ended_at__isnull=True).exists()


# --- reasons shown to users ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop", "ends", "says"),
    [
        (
            lambda people, job: suspend_job(people["alice"], job),
            S.SUSPENDED,
            "suspended by alice: resume it to queue it again",
        ),
        (preempt, S.PENDING, f"{WHY_PREEMPTED}; requeued (attempt 2)"),
    ],
    ids=["suspended", "preempted"],
)
def test_a_stopped_job_says_why_though_the_cluster_had_it_pending_meanwhile(
    people: Any, stop: Any, ends: str, says: str
) -> None:
    """A sync that runs before the stop lands finds the job still pending on the cluster
    (Slurm's PD "Priority", a pod Pending): the cluster's words must not replace why it is
    being stopped, which the user reads, and the requeue tells, once it ended."""
    job = submit_job(people["alice"], spec()).job
    Job.objects.filter(pk=job.pk).update(state=S.QUEUED, external_id="x", attempts=1)
    job.refresh_from_db()
    stop(people, job)
    job.refresh_from_db()

    _apply_status(job, JobStatus("x", RemoteState.QUEUED, reason="Priority", native_state="PD"))
    job.refresh_from_db()
    _apply_status(job, JobStatus("x", RemoteState.CANCELLED, native_state="CANCELLED"))

    job.refresh_from_db()
    assert job.state == ends
    told = job.reason["message"] if ends == S.SUSPENDED else job.events.last().message
    assert told == says


def test_a_stale_read_of_an_earlier_attempt_leaves_the_reason_alone(people: Any) -> None:
    job = submit_job(people["alice"], spec()).job
    Job.objects.filter(pk=job.pk).update(state=S.QUEUED, external_id="x", attempts=1)
    job.refresh_from_db()
    now = {"code": "dispatched", "message": "accepted by the cluster", "details": {}}
    Job.objects.filter(pk=job.pk).update(external_id="y", attempts=2, reason=now)

    _apply_status(job, JobStatus("x", RemoteState.QUEUED, reason="Priority", native_state="PD"))

    job.refresh_from_db()
    assert job.reason == now


@pytest.mark.parametrize("how", ["waiting", "held", "admitted"])
def test_a_cancelled_job_no_longer_says_why_it_waits_or_when_it_starts(
    people: Any, local_cluster: Any, client_for: Any, how: str
) -> None:
    """cancel_job moves a job that is not on a cluster straight to cancelled: the API (and
    the job page's reason box) must then not tell of a cancelled job "resume it to queue it",
    "dispatching to the cluster", or when it will start."""
    if how == "waiting":
        submit_job(people["bob"], spec(name="all", nodes=2, gpus_per_node=4, time_limit=3600))
        run_cycle()
        job = submit_job(people["alice"], spec(name="w", gpus_per_node=4, time_limit=60)).job
        run_cycle()
        job.refresh_from_db()
        assert job.estimated_start is not None and job.reason["code"] == "no_capacity"
    elif how == "held":
        job = submit_job(people["alice"], spec(name="h", hold=True)).job
    else:
        job = submit_job(people["alice"], spec(name="a")).job
        run_cycle()  # admitted; its dispatch has not run
        job.refresh_from_db()
        assert job.state == S.ADMITTED

    cancel_job(people["alice"], job)

    shown = client_for("alice").get(f"/api/v1/jobs/{job.pk}/").json()
    assert (shown["state"], shown["estimated_start"], shown["queue_position"]) == (
        "cancelled",
        None,
        None,
    )
    assert shown["reason"] == {"code": "cancelled", "message": "cancelled by alice", "details": {}}


# --- notify on one task of an array -------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("asked", "changed", "told"),
    [
        # asked on task 0 alone (the job page: "for this task of the array only"), which
        # ends first: its own end is told
        ([], {0: ["end"]}, [(0, "end", "task")]),
        # the array asked; the task that ends last turned it off for itself: the array's
        # end is still told (by the array's setting, not the last task's)
        (["end"], {1: []}, [(1, "end", "array")]),
        # the array asked, and one task asked for more: that task's end, and the array's
        (["end"], {0: ["start", "end"]}, [(0, "end", "task"), (1, "end", "array")]),
        # as the array asked: the array's end only, once
        (["end"], {}, [(1, "end", "array")]),
    ],
    ids=["one-task-only", "off-on-the-last", "more-on-one", "unchanged"],
)
def test_email_asked_for_on_one_task_of_an_array_is_for_that_task(
    people: Any, asked: list[str], changed: dict[int, list[str]], told: list[Any]
) -> None:
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    first = submit_job(people["alice"], spec(name="sweep", array="0-1", notify=asked)).job
    tasks_ = list(Job.objects.filter(array=first.array).order_by("array_index"))
    for index, notify in changed.items():
        update_job(people["alice"], tasks_[index], {"notify": notify})

    for task in tasks_:  # task 0 ends first
        cancel_job(people["alice"], task)

    stored = Notification.objects.filter(job__array=first.array).order_by("created_at", "id")
    assert [
        (n.job.array_index, n.event, "task" if n.dedupe_key is None else "array") for n in stored
    ] == told


# --- usage of a job that started and ended between two polls --------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_job_that_ran_between_two_syncs_is_charged_for_its_run(
    people: Any, local_cluster: Any
) -> None:
    """With one sync every GPUQ_SYNC_INTERVAL_S (5 s by default), or none while a cluster is
    unreachable, a job may start and end unseen: its run counts from when it was handed to
    the cluster, not from when its end was seen (0 s: an array of short tasks, or every job
    ended during an outage, would run free)."""
    job = submit_job(people["alice"], spec(command=["sleep", "2"], gpus_per_node=4)).job
    run_once()  # admitted and handed to the cluster
    job.refresh_from_db()
    assert job.state == S.QUEUED
    wait_for_verdict(local_cluster, job)  # it ran 2 s on 4 GPUs before any sync saw it

    run_once()

    job.refresh_from_db()
    assert job.state == S.SUCCEEDED
    (run,) = JobRun.objects.filter(job=job)
    assert run.ended_at is not None
    assert (run.ended_at - run.started_at).total_seconds() >= 1.5
    assert run.started_at == job.started_at


def test_a_run_never_seen_starting_counts_from_the_last_sync_that_saw_it_wait(
    people: Any, local_cluster: Any
) -> None:
    """A job that waited long in the cluster's own queue (Slurm PD) is not charged for the
    wait: its run starts no earlier than the last sync, which saw it pending."""
    job = submit_job(people["alice"], spec()).job
    Job.objects.filter(pk=job.pk).update(
        state=S.QUEUED, external_id="x", attempts=1, cluster=local_cluster
    )
    job.events.create(from_state=S.DISPATCHING, to_state=S.QUEUED, code="dispatched")
    job.events.filter(code="dispatched").update(at=timezone.now() - timedelta(hours=3))
    synced = timezone.now() - timedelta(seconds=5)
    Cluster.objects.filter(pk=local_cluster.pk).update(last_sync_at=synced)
    job = Job.objects.select_related("cluster").get(pk=job.pk)

    _apply_status(job, JobStatus("x", RemoteState.SUCCEEDED, exit_code=0))

    (run,) = JobRun.objects.filter(job=job)
    assert run.started_at == synced
