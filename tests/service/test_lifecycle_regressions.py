"""A second look at stops, syncs and array email: a job that ended on its own after a stop
that never reached its cluster keeps its own end; one broken (disabled) cluster does not stop
the embedded loop; `gpuq update --array --notify` changes the array's one notice, not each
task's; a job handed over during a sync that never saw it is still charged for its run."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from queue_service.backends import BackendError
from queue_service.backends.local import LocalBackend
from queue_service.jobs.dispatch import stop_job
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job, transition
from tests.conftest import spec
from tests.service.test_job_flow import run_until
from tests.service.test_lifecycle_edges import moves, wait_for_verdict

S = Job.State


def _fail_first_cancel(monkeypatch: Any) -> list[str]:
    """The first cancel never reaches the cluster (the SSH connection is refused, the API
    server unreachable): a transient error, retried by Celery's autoretry."""
    real = LocalBackend.cancel
    calls: list[str] = []

    def cancel(self: Any, external_id: str, grace_s: float = 0) -> Any:
        calls.append(external_id)
        if len(calls) == 1:
            raise BackendError("connection refused", permanent=False)
        return real(self, external_id, grace_s=grace_s)

    monkeypatch.setattr(LocalBackend, "cancel", cancel)
    return calls


def _cancel(job: Job) -> None:
    transition(job, S.CANCELLING, code="cancel_requested", message="cancel requested by alice")


def _preempt(job: Job) -> None:
    transition(job, S.PREEMPTING, code="preempting_reclaim", message="reclaimed")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("stop", [_cancel, _preempt], ids=["cancel", "preempt"])
def test_a_job_that_ended_on_its_own_after_a_stop_that_never_reached_the_cluster_keeps_its_end(
    people: Any, local_cluster: Any, monkeypatch: Any, stop: Any
) -> None:
    """stop_sent is written before the backend is called. When that first call fails
    before reaching the cluster (a refused connection) and the job then ends by itself,
    the retry counts as a repeat and records the job's own success as the stop's end:
    a successful job shows cancelled, or (preempted, with retries on preemption) is
    requeued and runs again from scratch."""
    calls = _fail_first_cancel(monkeypatch)
    job = submit_job(
        people["alice"],
        spec(command=["sleep", "1"], retries={"max": 2, "on": ["preemption"]}),
    ).job
    job = run_until(job, lambda j: j.state == S.RUNNING)
    with transaction.atomic():
        stop(job)
    with pytest.raises(BackendError):
        stop_job(str(job.pk))  # the task's first run: nothing reached the cluster
    wait_for_verdict(local_cluster, job)  # the job ends by itself, exit 0

    stop_job(str(job.pk))  # Celery's retry

    job.refresh_from_db()
    assert len(calls) == 2
    assert (job.state, job.exit_code) == (S.SUCCEEDED, 0), moves(job)


# --- a disabled cluster whose backend is broken ---------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_disabled_broken_cluster_with_a_job_left_on_it_does_not_stop_the_embedded_loop(
    people: Any, local_cluster: Any, tmp_path: Any
) -> None:
    """Disabling a cluster was how an admin took a broken one out of the loop. Since
    clusters_to_sync() syncs disabled clusters that still hold jobs, a disabled cluster
    whose sync raises anything but BackendError (here: settings being reworked, a node
    without a GPU count) aborts run_once before run_cycle: nothing is scheduled anywhere,
    on every round, until the left-over job row is cleaned up by hand."""
    from queue_service.clusters.models import Cluster
    from queue_service.jobs.dispatch import run_once

    broken = Cluster.objects.create(
        name="old",
        kind="local",
        enabled=False,
        settings={"workdir": str(tmp_path / "old-jobs"), "nodes": [{"name": "o1", "gpus": "4x"}]},
    )
    stranded = submit_job(people["alice"], spec(name="stranded")).job
    Job.objects.filter(pk=stranded.pk).update(
        state=S.RUNNING, cluster=broken, external_id=f"{stranded.pk}/1", attempts=1
    )
    job = submit_job(people["bob"], spec(name="elsewhere")).job

    run_once()  # raises ValueError from the disabled cluster's sync

    job.refresh_from_db()
    assert job.state in (S.ADMITTED, S.QUEUED, S.RUNNING, S.SUCCEEDED)


# --- email of an array changed the only way the CLI and API offer: task by task -------------


def _array_changed_everywhere(people: Any, asked: list[str], now: list[str]) -> Any:
    from queue_service.jobs.services import update_job

    people["alice"].email = "alice@example.org"
    people["alice"].save()
    first = submit_job(people["alice"], spec(name="sweep", array="0-3", notify=asked)).job
    tasks_ = list(Job.objects.filter(array=first.array).order_by("array_index"))
    for task in tasks_:  # `gpuq update --array <id> --notify ...`: one PATCH per task
        update_job(people["alice"], task, {"notify": now})
    return first.array, tasks_


@pytest.mark.django_db(transaction=True)
def test_notify_end_set_on_a_whole_array_is_one_email_not_one_per_task(people: Any) -> None:
    """`gpuq update --array A --notify end` (there is no array-wide notify in the API) on an
    array submitted without email: before today the array's end was told once; now every
    task counts as 'changed alone' and is told as a lone job: a 1000-task sweep sends 1000
    emails."""
    from queue_service.jobs.models import Notification
    from queue_service.jobs.services import cancel_job

    array, tasks_ = _array_changed_everywhere(people, [], ["end"])
    for task in tasks_:
        cancel_job(people["alice"], task)

    sent = Notification.objects.filter(job__array=array)
    assert sent.count() == 1, [(n.job.array_index, n.event, n.dedupe_key) for n in sent]


@pytest.mark.django_db(transaction=True)
def test_notify_none_set_on_every_task_of_an_array_silences_the_array(people: Any) -> None:
    """`gpuq update --array A --notify none`: each task says 'email: nothing' (CLI, job page),
    yet the array's end is still mailed, by JobArray.notify, which nothing can change."""
    from queue_service.jobs.models import Notification
    from queue_service.jobs.services import cancel_job

    array, tasks_ = _array_changed_everywhere(people, ["end"], [])
    for task in tasks_:
        cancel_job(people["alice"], task)

    sent = Notification.objects.filter(job__array=array)
    assert not sent.exists(), [(n.job.array_index, n.event, n.dedupe_key) for n in sent]


# --- charging from hand-over -------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_job_handed_over_during_a_sync_that_never_saw_it_is_charged_for_its_run(
    people: Any, local_cluster: Any, monkeypatch: Any
) -> None:
    """_earliest_start takes the cluster's last_sync_at as 'the last sync, which saw it
    waiting'. But last_sync_at is written when a sync ends, not when it polled: a job
    dispatched (by another worker) after a sync listed its jobs, that runs and ends before
    that sync finishes (a Slurm sync over SSH takes seconds; short array tasks), is charged
    from the end of that sync, i.e. for nothing."""
    from queue_service.jobs.dispatch import dispatch_job, sync_cluster
    from queue_service.jobs.models import JobRun
    from queue_service.jobs.snapshot import run_cycle

    other = submit_job(people["bob"], spec(name="long", command=["sleep", "30"])).job
    run_until(other, lambda j: j.state == S.RUNNING)
    short = submit_job(people["alice"], spec(name="short", command=["sleep", "2"])).job
    run_cycle()
    short.refresh_from_db()
    assert short.state == S.ADMITTED

    real_poll = LocalBackend.poll
    calls = []

    def poll(self: Any, ids: Any) -> Any:
        answer = real_poll(self, ids)
        if not calls:  # the sync has listed its jobs; a worker dispatches `short` meanwhile
            calls.append(1)
            dispatch_job(str(short.pk))
            short.refresh_from_db()
            wait_for_verdict(local_cluster, short)  # it ran 2 s, unseen
        return answer

    monkeypatch.setattr(LocalBackend, "poll", poll)
    sync_cluster(local_cluster.pk)  # the slow sync; it ends after `short` ended
    sync_cluster(local_cluster.pk)  # sees `short` ended

    short.refresh_from_db()
    assert short.state == S.SUCCEEDED
    (run,) = JobRun.objects.filter(job=short)
    assert (run.ended_at - run.started_at).total_seconds() >= 1.5
