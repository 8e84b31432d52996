"""The service against our fake Kubernetes API server (docs/kubernetes.md): a job whose
workload ended by itself just before its owner cancelled it keeps its own end."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.dispatch import run_once
from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import spec

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


def test_a_job_that_ended_before_its_cancel_keeps_its_own_end(
    fake_k8s: Any, people: Any, teams: Any
) -> None:
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=8)
    with fake_k8s(setup=lambda sim: sim.node("gpu-1", gpus=8), image_default="busybox") as (
        _,
        sim,
    ):
        job = submit_job(people["alice"], spec(name="quick", cluster="k8s")).job
        run_once()
        job.refresh_from_db()
        sim.run(job.external_id)
        run_once()
        job.refresh_from_db()
        assert job.state == S.RUNNING
        sim.succeed(job.external_id)  # gpuq's next sync has not seen it when alice cancels

        cancel_job(people["alice"], job)

        job.refresh_from_db()
        assert job.state == S.SUCCEEDED
        assert "ended_before_stop" in [e.code for e in job.events.all()]
