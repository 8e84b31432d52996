"""What a sync's poll answers is applied only to the attempt it polled, a stopping job's end
counts as its stop's only once a stop of its attempt was sent (jobs/dispatch.py,
sync_cluster and _apply_status), and a dispatch hands over only the admission it read."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from queue_service.backends.local import LocalBackend
from queue_service.jobs import dispatch, tasks
from queue_service.jobs.dispatch import sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import (
    cancel_job,
    resume_job,
    submit_job,
    suspend_job,
)
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import spec
from tests.service.test_job_flow import run_until
from tests.service.test_lifecycle_edges import moves, preempt, wait_for_verdict

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


def supervisor_alive(cluster: Any, external_id: str) -> bool:
    """Whether the local cluster's supervisor of that attempt still runs."""
    pid_file = Path(cluster.settings["workdir"]) / external_id / "supervisor.pid"
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return False
    return Path(f"/proc/{pid}").exists() and not (pid_file.parent / "result.json").exists()


# --- a poll that answers for an earlier attempt -------------------------------------------


def test_a_sync_that_polled_an_earlier_attempt_does_not_end_the_attempt_running_now(
    people: Any, local_cluster: Any, monkeypatch: Any
) -> None:
    """A sync lists a cluster's jobs, then polls them (over SSH, seconds). If meanwhile the
    job's attempt ended and a new attempt of it started (here: suspended by its owner, the
    suspend recorded by another sync, resumed, dispatched and running again), the poll's
    answer about the OLD attempt (`cancelled`, the suspend's stop) is applied by
    `transition()`, whose UPDATE is conditional on the state only (RUNNING again): the new
    attempt is recorded cancelled while it keeps running on the cluster, unfollowed and
    holding GPUs the queue hands out again. `_as_read` guards the non-terminal writes against
    exactly this ("a stale read never writes onto a later attempt"); the ends are not."""
    alice = people["alice"]
    job = submit_job(alice, spec(name="long", command=["sleep", "60"])).job
    job = run_until(job, lambda j: j.state == S.RUNNING)
    first = job.external_id

    real_poll = LocalBackend.poll
    meanwhile: list[str] = []

    def poll(self: Any, ids: Any) -> Any:
        if not meanwhile and first in ids:  # the slow sync has listed attempt 1 running
            meanwhile.append("done")
            suspend_job(alice, Job.objects.get(pk=job.pk))  # its stop runs inline
            wait_for_verdict(local_cluster, Job.objects.get(pk=job.pk))
            sync_cluster(local_cluster.pk)  # another sync records the suspend
            assert Job.objects.get(pk=job.pk).state == S.SUSPENDED
            resume_job(alice, Job.objects.get(pk=job.pk))
            run_until(
                Job.objects.get(pk=job.pk), lambda j: j.state == S.RUNNING and j.attempts == 2
            )
        return real_poll(self, ids)

    monkeypatch.setattr(LocalBackend, "poll", poll)
    sync_cluster(local_cluster.pk)  # the slow one: its answer for attempt 1 is `cancelled`

    job.refresh_from_db()
    second = job.external_id
    assert second != first and supervisor_alive(local_cluster, second)
    assert (job.state, job.attempts) == (S.RUNNING, 2), moves(job)


# --- an end the sync sees before any stop was sent ------------------------------------------


@pytest.mark.parametrize(
    "stop",
    [
        lambda people, job: preempt(people, job),
        lambda people, job: cancel_job(people["alice"], job),
    ],
    ids=["preempted", "cancelled"],
)
def test_a_job_that_succeeded_before_its_stop_was_sent_keeps_its_success_when_the_sync_sees_it(
    people: Any, local_cluster: Any, settings: Any, monkeypatch: Any, stop: Any
) -> None:
    """With workers, a stop is a task: a victim (or a cancelled job) that exits 0 on its own
    before that task runs is seen ended by the sync first. The sync applies every end of a
    stopping job as the stop's (`_apply_status(stopped=True)`), though no stop of the attempt
    was even sent: a preempted job that had finished is requeued and runs again (or ends
    `preempted`), a cancelled one ends `cancelled` and its `after` jobs are cancelled. When
    the stop task sees the very same end first it keeps it (`ended_before_stop`)."""
    job = submit_job(
        people["alice"], spec(name="quick", command=["/bin/sh", "-c", "sleep 2; echo done"])
    ).job
    job = run_until(job, lambda j: j.state == S.RUNNING)
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"  # stops go as tasks
    queued: list[str] = []
    monkeypatch.setattr(tasks.cancel_job, "delay", queued.append)  # still in the queue

    stop(people, job)
    assert queued == [str(job.pk)]
    wait_for_verdict(local_cluster, job)  # it ended on its own, exit 0; no stop was sent
    assert not job.events.filter(code="stop_sent").exists()
    sync_cluster(local_cluster.pk)

    job.refresh_from_db()
    assert (job.state, job.exit_code) == (S.SUCCEEDED, 0), moves(job)
    assert not job.events.filter(code__startswith="requeued_").exists()


# --- a dispatch that read an admission undone and made again --------------------------------


def test_a_dispatch_that_read_an_admission_undone_and_made_again_hands_nothing_over(
    people: Any, local_cluster: Any, monkeypatch: Any
) -> None:
    """dispatch_job reads the admitted job, then moves it to dispatching. If between the two
    the admission was undone (preempted before start, placement gone) and a cycle admitted it
    again, placed elsewhere, that move must fail: the read's cluster and GPUs are no longer
    the job's, and the new admission's own task hands it over."""
    job = submit_job(people["alice"], spec(name="w")).job
    run_cycle()
    job.refresh_from_db()
    assert job.state == S.ADMITTED
    again = job.admitted_at + timedelta(seconds=5)
    real = dispatch._placement_gone

    def meanwhile(read: Job) -> str | None:
        Job.objects.filter(pk=job.pk).update(admitted_at=again)  # undone, then made again
        return real(read)

    monkeypatch.setattr(dispatch, "_placement_gone", meanwhile)
    dispatch.dispatch_job(str(job.pk))

    job.refresh_from_db()
    assert (job.state, job.attempts, job.admitted_at) == (S.ADMITTED, 0, again), moves(job)
    assert job.external_id == ""
