"""A cancel that reaches a job already failing by itself (a Kubernetes Job marked
`FailureTarget` while its other pods stop) stops nothing, and the cluster says so: the job
ends as it ended on its own, `failed` with its exit code, not `cancelled`, and the jobs
`after` it see a failure. Against our fake API server (docs/kubernetes.md)."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from k8s_fakeapi import now_rfc3339

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


def failing_by_itself(sim: Any, eid: str) -> None:
    """Pod 1 failed (exit 3); the Job controller marked the Job `FailureTarget` and is
    deleting pod 0, whose kubelet has not confirmed its stop yet."""
    p0, p1 = sim.pods(eid)
    sim.api.store.pods_stop_at_once = False
    sim._pod_status(p1, "pod_failed_error", exit_code=3, reason="Error")
    pods = sim._t(("", "v1", "pods"))
    namespace = p0["metadata"]["namespace"]
    with sim.store.lock:
        sim.store.delete(pods, namespace, p0["metadata"]["name"], None, None)
    kind, obj = sim.workload(eid)
    now = now_rfc3339(time.time())
    status = copy.deepcopy(obj["status"])
    status["conditions"] = [
        {
            "type": "FailureTarget",
            "status": "True",
            "lastProbeTime": now,
            "lastTransitionTime": now,
            "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit",
        }
    ]
    status["failed"], status["terminating"], status["ready"] = 1, 1, 0
    sim._set_status(kind, namespace, obj["metadata"]["name"], status)


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
        failing_by_itself(sim, job.external_id)

        cancel_job(people["alice"], job)  # its stop is sent at once (no broker)

        job.refresh_from_db()
        assert job.state == S.CANCELLING
        sim.kubelet_confirms_stops()  # pod 0 goes; the Job controller marks the Job failed
        sim.fail(job.external_id, exit_code=3, index=0)
        run_once()

        job.refresh_from_db()
        assert (job.state, job.exit_code) == (S.FAILED, 3), (job.state, job.reason)
