"""A cancel that reaches a job already failing by itself (a Kubernetes Job marked
`FailureTarget` while its other pods stop) stops nothing, and the cluster says so: the job
ends as it ended on its own, `failed` with its exit code, not `cancelled`, and the jobs
`after` it see a failure. Against our fake API server (docs/kubernetes.md)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from queue_service.jobs.dispatch import run_once
from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import spec

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


def two_nodes(sim: Any) -> None:
    sim.node("gpu-1", gpus=8)
    sim.node("gpu-2", gpus=8)


def test_a_cancel_that_meets_a_job_failing_by_itself_leaves_it_its_own_end(
    fake_k8s: Any, people: Any, teams: Any
) -> None:
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=16)
    with fake_k8s(setup=two_nodes, image_default="busybox", workload="indexed") as (_, sim):
        body = spec(name="falls", cluster="k8s", nodes=2, gpus_per_node=8)
        job = submit_job(people["alice"], body).job
        run_once()
        job.refresh_from_db()
        sim.run(job.external_id)
        run_once()
        job.refresh_from_db()
        assert job.state == S.RUNNING, job.reason
        sim.failing_by_itself(job.external_id, now=time.time())

        cancel_job(people["alice"], job)  # its stop is sent at once (no broker)

        job.refresh_from_db()
        assert job.state == S.CANCELLING
        sim.kubelet_confirms_stops()  # pod 0 goes; the Job controller marks the Job failed
        sim.fail(job.external_id, exit_code=3, index=0)
        run_once()

        job.refresh_from_db()
        assert (job.state, job.exit_code) == (S.FAILED, 3), (job.state, job.reason)
