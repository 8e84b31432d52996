"""A job its cluster puts back to wait is not charged for the wait (ARCHITECTURE.md, Follow:
`hold_run`), whatever gpuq is doing with it: one being cancelled or suspended is still
running (Job.RUNNING_STATES: its run is open) until its stop takes, and if its cluster
refuses the stop and then evicts it (Kueue: its pods gone, it waits in Kueue's queue holding
nothing), its run ends as a running job's would. It stays being stopped, saying why."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from k8s_fakeapi import Fault

from queue_service.backends.base import RemoteState
from queue_service.jobs.dispatch import backend_for, sync_cluster
from queue_service.jobs.models import Job, JobRun
from queue_service.jobs.services import cancel_job, suspend_job
from queue_service.jobs.snapshot import _usage_by_team
from tests.service.test_cluster_holds_running_job import kueue_evicts

S = Job.State


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("stop", "stopping"),
    [(cancel_job, S.CANCELLING), (suspend_job, S.SUSPENDING)],
    ids=["cancel", "suspend"],
)
def test_a_job_being_stopped_that_its_cluster_puts_back_to_wait_is_not_charged_for_the_wait(
    running_on_k8s: Any, people: Any, stop: Any, stopping: str
) -> None:
    with running_on_k8s(workload="indexed") as (job, sim):
        sim.api.inject(Fault("status", code=403, method="DELETE", path_contains="/jobs/"))
        stop(people["alice"], Job.objects.get(pk=job.pk))  # the cluster refuses the stop
        job.refresh_from_db()
        assert job.state == stopping
        why = job.reason
        assert JobRun.objects.filter(job=job, ended_at__isnull=True).count() == 1

        kueue_evicts(sim, job)  # the cluster puts it back to wait: no pod runs
        seen = backend_for(job.cluster).poll([job.external_id])[job.external_id]
        assert seen.state == RemoteState.QUEUED, seen
        sync_cluster(job.cluster_id)
        job.refresh_from_db()
        assert (job.state, job.reason) == (stopping, why)
        assert not JobRun.objects.filter(job=job, ended_at__isnull=True).exists()

        now = timezone.now()
        waited = _usage_by_team(now + timedelta(hours=1))[job.team_id][0].gpu_seconds
        used = _usage_by_team(now)[job.team_id][0].gpu_seconds
        # An hour of waiting in Kueue's queue adds nothing (1 GPU x 3600 s if charged).
        assert waited == pytest.approx(used, rel=0.01, abs=60)
