"""A job whose cluster is disabled while gpuq is handing it over, and a cancel meanwhile,
against our fake Kubernetes API server with injected faults (docs/kubernetes.md).

A job that never reached its cluster (pending, or admitted and not yet handed over) is
cancelled at once. One whose submit is in doubt (the create may have been stored, its answer
lost) may be on the cluster, disabled or not: its cancel waits for a retry to find it there
and stop it (never a workload left running unseen), says so while it waits, and the retries
are backed off; once the cluster answers, the job ends `cancelled by alice`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from k8s_fakeapi import Fault

from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import RETRY, retries_due_now, run_once
from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, submit_job
from queue_service.jobs.snapshot import run_cycle
from queue_service.tenancy.models import Quota
from tests.conftest import spec
from tests.service.test_dispatch_races import failed_ago, workloads

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


@pytest.fixture
def k8s(fake_k8s: Any, teams: Any) -> Any:
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=8)
    return fake_k8s(
        setup=lambda sim: sim.node("gpu-1", gpus=8), image_default="busybox", workload="indexed"
    )


def cluster_down(sim: Any) -> None:
    """Every create from now on is answered 503: the cluster cannot take the job."""
    sim.api.inject(Fault("status", code=503, method="POST", path_contains="/jobs", times=10**6))


def cluster_back(sim: Any) -> None:
    with sim.api.store.lock:
        sim.api.faults.clear()


def disable(cluster: Cluster) -> None:
    Cluster.objects.filter(pk=cluster.pk).update(enabled=False)


def retry_due(job: Job) -> None:
    """Time passes: the job's backoff is over, and its dispatch is stale."""
    failed_ago(job, timedelta(hours=1))


def test_a_job_admitted_to_a_cluster_disabled_since_is_cancelled_at_once(
    k8s: Any, people: Any
) -> None:
    with k8s as (cluster, sim):
        job = submit_job(people["alice"], spec(name="never-sent", cluster=cluster.name)).job
        run_cycle()
        job.refresh_from_db()
        assert job.state == S.ADMITTED
        disable(cluster)

        cancel_job(people["alice"], job)

        job.refresh_from_db()
        assert (job.state, job.reason["message"]) == (S.CANCELLED, "cancelled by alice")
        assert workloads(sim) == []


def test_a_cancel_of_a_job_whose_submit_is_in_doubt_on_a_disabled_cluster_says_why_it_waits(
    k8s: Any, people: Any
) -> None:
    with k8s as (cluster, sim):
        job = submit_job(people["alice"], spec(name="in-doubt", cluster=cluster.name)).job
        cluster_down(sim)
        run_once()
        job.refresh_from_db()
        assert (job.state, job.external_id, job.reason["code"]) == (S.DISPATCHING, "", RETRY)
        disable(cluster)

        cancel_job(people["alice"], job)

        job.refresh_from_db()
        # It may be on the cluster (a lost answer is no proof of a lost create): it waits,
        # and says for whom, for what and why.
        assert job.state == S.CANCELLING
        message = job.reason["message"]
        assert message.startswith("cancelled by alice; "), message
        assert f"{cluster.name} is disabled" in message, message
        assert "stopped there" in message and "503" in message, message
        assert job.reason["code"] == RETRY  # still claimed by the next retry
        assert job.reason["details"]["by"] == "alice"
        assert retries_due_now(timezone.now() + timedelta(hours=1)) == [str(job.pk)]


def test_a_cancelled_job_on_a_disabled_cluster_is_retried_with_backoff_and_ends_once_found(
    k8s: Any, people: Any
) -> None:
    with k8s as (cluster, sim):
        job = submit_job(people["alice"], spec(name="in-doubt", cluster=cluster.name)).job
        cluster_down(sim)
        run_once()
        disable(cluster)
        cancel_job(people["alice"], job)

        for _ in range(3):  # the cluster stays down: each retry waits its backoff
            retry_due(job)
            run_once()
            assert retries_due_now(timezone.now()) == []
            job.refresh_from_db()
            assert job.state == S.CANCELLING
            assert job.reason["message"].startswith("cancelled by alice; "), job.reason
        # Four failed submits: one before the cancel, three counted on one event after it
        # (services.FOLDED_NOTES).
        retried = job.events.filter(code=RETRY).order_by("at", "id")
        assert [e.details.get("repeats", 1) for e in retried] == [1, 3]

        cluster_back(sim)
        retry_due(job)
        run_once()  # the retry creates (or adopts) the workload, then stops it
        run_once()

        job.refresh_from_db()
        assert job.state == S.CANCELLED and job.external_id
        assert (job.reason["code"], job.reason["message"]) == ("cancelled", "cancelled by alice")
        assert workloads(sim) == []
