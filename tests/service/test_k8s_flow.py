"""The service against our fake Kubernetes API server (docs/kubernetes.md): stops are the
workload's deletion, which the next sync sees; a job whose workload ended by itself just
before its owner cancelled it keeps its own end."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_fakeapi import ApiError

from queue_service.jobs.dispatch import run_once
from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, resume_job, suspend_job

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


def test_a_suspended_job_is_deleted_and_created_again_when_resumed(
    running_on_k8s: Any, people: Any
) -> None:
    with running_on_k8s() as (job, sim):
        first = job.external_id

        suspend_job(people["alice"], job)
        run_once()

        job.refresh_from_db()
        assert (job.state, job.external_id, job.placement) == (S.SUSPENDED, first, [])
        with pytest.raises(ApiError, match="not found"):  # the workload was deleted
            sim.workload(first)
        resume_job(people["alice"], job)
        run_once()
        job.refresh_from_db()
        assert job.state == S.QUEUED and job.attempts == 2
        assert job.external_id and job.external_id != first


def test_a_job_that_ended_before_its_cancel_keeps_its_own_end(
    running_on_k8s: Any, people: Any
) -> None:
    with running_on_k8s() as (job, sim):
        sim.succeed(job.external_id)  # gpuq's next sync has not seen it when alice cancels

        cancel_job(people["alice"], job)

        job.refresh_from_db()
        assert job.state == S.SUCCEEDED
        assert "ended_before_stop" in [e.code for e in job.events.all()]
