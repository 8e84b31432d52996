"""A cancel the cluster refuses or errs on still says who cancelled: the job's reason is
gpuq's words (`cancelled by alice`), the cluster's are kept in its details. Against our fake
Kubernetes API server with injected faults (docs/kubernetes.md)."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_fakeapi import Fault

from queue_service.jobs.dispatch import run_once, submit_admitted
from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import spec
from tests.service.test_dispatch_races import dispatching, workloads

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


@pytest.fixture
def k8s(fake_k8s: Any, teams: Any) -> Any:
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=8)
    return fake_k8s(
        setup=lambda sim: sim.node("gpu-1", gpus=8), image_default="busybox", workload="indexed"
    )


def test_a_cancel_during_a_submit_the_cluster_refuses_says_who_cancelled(
    k8s: Any, people: Any
) -> None:
    with k8s as (cluster, sim):
        job = submit_job(people["alice"], spec(name="refused", cluster=cluster.name)).job
        job = dispatching(job, cluster)  # a worker submits...
        cancel_job(people["alice"], Job.objects.get(pk=job.pk))  # ...and alice, meanwhile
        sim.api.inject(Fault("status", code=403, method="POST", path_contains="/jobs"))

        submit_admitted(job)

        job.refresh_from_db()
        assert job.state == S.CANCELLED
        assert (job.reason["code"], job.reason["message"]) == ("cancelled", "cancelled by alice")
        assert "Forbidden" in job.reason["details"]["cluster"]["refused"]
        event = job.events.get(code="cancelled")
        assert event.message.startswith("cancelled by alice; the cluster refused it: ")


def test_a_stop_the_cluster_refuses_says_who_asked_and_the_job_waits_saying_why(
    k8s: Any, people: Any
) -> None:
    """Kubernetes answers 403 to the deletion (gpuq's account may not delete workloads):
    the job is still there, so it stays cancelling, and both its reason and the event say
    that alice asked and what the cluster answered. Once the workload ends (here: the
    cluster lets the next stop through), the job is `cancelled by alice`."""
    with k8s as (cluster, sim):
        job = submit_job(people["alice"], spec(name="kept", cluster=cluster.name)).job
        run_once()
        job.refresh_from_db()
        assert job.state in (S.QUEUED, S.RUNNING) and job.external_id
        sim.api.inject(Fault("status", code=403, method="DELETE", path_contains="/jobs/"))

        cancel_job(people["alice"], job)  # the embedded mode stops it after the commit

        job.refresh_from_db()
        assert job.state == S.CANCELLING
        failed = job.events.get(code="stop_failed")
        assert failed.message.startswith("the cluster refused the stop alice asked for: ")
        assert failed.details["by"] == "alice" and "Forbidden" in failed.details["cluster"]
        assert job.reason["message"].startswith("cancelled by alice; the cluster refused")
        assert job.reason["details"]["by"] == "alice"
        assert "Forbidden" in job.reason["details"]["cluster"]

        from queue_service.jobs.dispatch import stop_job

        stop_job(str(job.pk))  # the sync's re-send, the cluster letting it through now
        for _ in range(20):
            run_once()
            job.refresh_from_db()
            if job.is_terminal:
                break
        assert job.state == S.CANCELLED
        assert (job.reason["code"], job.reason["message"]) == ("cancelled", "cancelled by alice")
        assert workloads(sim) == []
