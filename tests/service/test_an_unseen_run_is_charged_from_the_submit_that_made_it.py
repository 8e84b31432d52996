"""A job first seen after it ended is charged from when it was handed over (ARCHITECTURE.md,
Follow): from the submit that made its workload, at the earliest. A workload submitted
afresh ("submitted as") after submits that failed is the last submit's, so the outage those
retries spanned is not charged; one adopted may have been made by any submit of the attempt
(a lost answer is no proof of a lost create), so it is charged from the first dispatch."""

from __future__ import annotations

import time as clock
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from queue_service.backends.base import BackendError, RemoteState
from queue_service.backends.local import LocalBackend
from queue_service.jobs.dispatch import backend_for, dispatch_job, sync_cluster
from queue_service.jobs.models import Job, JobRun
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import spec

S = Job.State
OUTAGE_S = 2  # how long the cluster stays unusable between two submits (minutes or hours)


def admitted(people: Any) -> Job:
    job = submit_job(people["alice"], spec(name="quick", gpus_per_node=4)).job
    run_cycle()
    job.refresh_from_db()
    assert job.state == S.ADMITTED
    return job


def fails(job: Job) -> None:
    with pytest.raises(BackendError):
        dispatch_job(str(job.pk))
    job.refresh_from_db()
    assert (job.state, job.reason["code"]) == (S.DISPATCHING, "dispatch_retry")


def charged_once_ended(job: Job) -> JobRun:
    """The job's run, once it has ended before any sync saw it running."""
    backend = backend_for(job.cluster)
    deadline = clock.monotonic() + 30
    while backend.poll([job.external_id])[job.external_id].state not in RemoteState.TERMINAL:
        assert clock.monotonic() < deadline, "the job did not end"
        clock.sleep(0.1)
    sync_cluster(job.cluster_id)  # first sees it ended: started and ended between polls
    job.refresh_from_db()
    assert job.state == S.SUCCEEDED
    (run,) = JobRun.objects.filter(job=job)
    return run


def test_a_job_submitted_afresh_after_failed_submits_is_charged_from_that_submit(
    people: Any, local_cluster: Any
) -> None:
    """Two submits fail (the job's directory cannot be made: transient, retried), the third
    finds nothing to adopt and submits afresh; the job runs an instant. Its run counts from
    when that submit began (not from the first dispatch, nor the last failure)."""
    job = admitted(people)
    blocker = Path(local_cluster.settings["workdir"]) / str(job.pk)
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a directory")
    fails(job)
    clock.sleep(OUTAGE_S)
    last_failure: datetime = timezone.now()
    fails(job)
    clock.sleep(OUTAGE_S)
    blocker.unlink()
    retried = timezone.now()
    dispatch_job(str(job.pk))
    job.refresh_from_db()
    made = job.events.get(to_state=S.QUEUED)
    assert made.message.startswith("submitted as")

    run = charged_once_ended(job)
    assert last_failure < retried <= run.started_at <= made.at


def test_a_job_adopted_after_a_lost_answer_is_charged_from_its_first_dispatch(
    people: Any, local_cluster: Any, monkeypatch: Any
) -> None:
    """The first submit made the workload but its answer was lost (a timeout); the retry
    adopts it. It may have run since the first submit: charged from the first dispatch."""
    job = admitted(people)
    submit = LocalBackend.submit

    def answer_lost(self: LocalBackend, request: Any) -> Any:
        submit(self, request)
        raise BackendError("timed out waiting for the cluster's answer")

    monkeypatch.setattr(LocalBackend, "submit", answer_lost)
    fails(job)
    monkeypatch.setattr(LocalBackend, "submit", submit)
    clock.sleep(OUTAGE_S)
    dispatch_job(str(job.pk))
    job.refresh_from_db()
    assert job.events.get(to_state=S.QUEUED).message.startswith("adopted")

    run = charged_once_ended(job)
    assert run.started_at == job.events.get(to_state=S.DISPATCHING).at
