"""A dispatch whose first answer was lost, retried after its workload was deleted on the
cluster (the TTL controller's, for a job that ended meanwhile; an admin's `kubectl delete`):
gpuq's finalizer holds that workload until a poll reports its end, and only a named job is
polled. The retry adopts it, so that the job is followed to its end and the finalizer is
released, instead of waiting for a deletion that only gpuq itself could finish."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_fakeapi import Fault

from queue_service.jobs.dispatch import run_once
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import spec

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State
BATCH = ("batch", "v1", "jobs")


def _deleted_by_the_cluster(sim: Any, eid: str) -> None:
    """The TTL-after-finished controller's deletion (Foreground), or an admin's."""
    t, _ = sim.workload(eid)
    namespace, _, name = eid.split("/")
    with sim.store.lock:
        sim.store.delete(t, namespace, name, "Foreground", None)


def test_a_retry_adopts_its_workload_deleted_meanwhile_and_the_job_ends(
    fake_k8s: Any, people: Any, teams: Any
) -> None:
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=8)
    with fake_k8s(
        setup=lambda sim: sim.node("gpu-1", gpus=8),
        image_default="busybox",
        workload="indexed",
        ttl_after_finished_s=0,
        max_retries=0,
    ) as (_, sim):
        job = submit_job(people["alice"], spec(name="short", cluster="k8s")).job
        sim.api.inject(Fault("drop_after", method="POST", path_contains="/jobs"))
        run_once()
        job.refresh_from_db()
        assert (job.state, job.reason["code"]) == (S.DISPATCHING, "dispatch_retry")
        sim.api.faults.clear()
        with sim.store.lock:
            ((namespace, name),) = sim.store.objects[sim.store.types[BATCH]]
        eid = f"{namespace}/job/{name}"
        # It ran and succeeded before the retry, and its TTL of 0 deleted it at once.
        sim.run(eid)
        sim.succeed(eid)
        _deleted_by_the_cluster(sim, eid)

        for _ in range(3):
            run_once()
        job.refresh_from_db()

        assert (job.state, job.external_id, job.exit_code) == (S.SUCCEEDED, eid, 0), job.reason
        with sim.store.lock:  # the end reported, gpuq's finalizer let it go
            assert not sim.store.objects[sim.store.types[BATCH]]
