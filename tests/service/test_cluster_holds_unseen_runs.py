"""A job its cluster held waiting (its run ended at the hold, so the wait is not charged) that
runs again unseen is charged for that run all the same, from when a sync last saw it held:
when it ends before the next sync sees it running, and when it is being stopped (its cluster
refusing the stop) as it runs again."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from k8s_fakeapi import Fault

from queue_service.backends.base import JobStatus, RemoteState
from queue_service.jobs.dispatch import _apply_status, sync_cluster
from queue_service.jobs.models import Job, JobRun
from queue_service.jobs.services import _open_run, cancel_job, submit_job, suspend_job
from tests.conftest import spec
from tests.service.test_cluster_holds_running_job import kueue_evicts

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


def test_a_held_job_that_runs_again_and_succeeds_between_two_syncs_is_charged_for_that_run(
    running_on_k8s: Any, people: Any
) -> None:
    with running_on_k8s(workload="indexed") as (job, sim):
        kueue_evicts(sim, job)
        sync_cluster(job.cluster_id)
        (held,) = JobRun.objects.filter(job=job)
        assert held.ended_by == "cluster_holds"

        sim.run(job.external_id)  # Kueue admits it again; it runs...
        sim.succeed(job.external_id)  # ...and ends before gpuq's next sync
        sync_cluster(job.cluster_id)

        job.refresh_from_db()
        assert job.state == S.SUCCEEDED
        runs = list(JobRun.objects.filter(job=job).order_by("id"))
        assert len(runs) == 2, [(r.started_at, r.ended_at, r.ended_by) for r in runs]
        assert runs[1].ended_by == S.SUCCEEDED and runs[1].started_at >= held.ended_at


@pytest.mark.parametrize(
    ("end", "state"),
    [
        (JobStatus("x", RemoteState.SUCCEEDED, exit_code=0, native_state="COMPLETED"), S.SUCCEEDED),
        (JobStatus("x", RemoteState.FAILED, exit_code=3, native_state="FAILED"), S.FAILED),
        (JobStatus("x", RemoteState.TIMEOUT, native_state="TIMEOUT", started=True), S.TIMEOUT),
    ],
    ids=["completed", "failed", "timeout"],
)
def test_a_requeued_slurm_job_that_runs_again_and_ends_between_two_syncs_is_charged_for_that_run(
    people: Any, end: JobStatus, state: str
) -> None:
    job = submit_job(people["alice"], spec()).job
    Job.objects.filter(pk=job.pk).update(state=S.RUNNING, external_id="x", attempts=1, reason={})
    job.refresh_from_db()
    _open_run(job, timezone.now())
    _apply_status(job, JobStatus("x", RemoteState.QUEUED, reason="", native_state="REQUEUED"))
    job.refresh_from_db()
    assert job.reason["code"] == "cluster_holds"

    _apply_status(job, end)  # Slurm ran it again; it ended before the next poll

    job.refresh_from_db()
    assert job.state == state
    runs = list(JobRun.objects.filter(job=job).order_by("id"))
    assert len(runs) == 2, [(r.started_at, r.ended_at, r.ended_by) for r in runs]
    assert runs[1].ended_by == state


@pytest.mark.parametrize(
    ("stop", "stopping"),
    [(cancel_job, S.CANCELLING), (suspend_job, S.SUSPENDING)],
    ids=["cancel", "suspend"],
)
def test_a_held_job_being_stopped_that_the_cluster_runs_again_is_charged_while_it_runs(
    running_on_k8s: Any, people: Any, stop: Any, stopping: str
) -> None:
    with running_on_k8s(workload="indexed") as (job, sim):
        kueue_evicts(sim, job)
        sync_cluster(job.cluster_id)
        sim.api.inject(Fault("status", code=403, method="DELETE", path_contains="/jobs/"))
        stop(people["alice"], Job.objects.get(pk=job.pk))  # the cluster refuses the stop
        job.refresh_from_db()
        assert job.state == stopping

        sim.run(job.external_id)  # Kueue admits it again: it runs on the cluster
        sync_cluster(job.cluster_id)

        job.refresh_from_db()
        assert job.state == stopping
        runs = [(r.started_at, r.ended_at, r.ended_by) for r in JobRun.objects.filter(job=job)]
        assert JobRun.objects.filter(job=job, ended_at__isnull=True).count() == 1, runs
