"""A job gpuq saw running that its cluster puts back to waiting while still holding it (Kueue
evicting a Job, a Volcano gang restarting in place, Slurm requeueing it): gpuq keeps it running
(the cluster, not gpuq's queue, holds it) and says so, in the cluster's words, until it runs
again."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from queue_service.backends.base import JobStatus, RemoteState
from queue_service.jobs.dispatch import _apply_status, run_once, sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import spec

S = Job.State
KUEUE = "suspended: waiting for admission by Kueue"
HELD = f"the cluster holds it waiting: {KUEUE}"


@pytest.fixture
def running(fake_k8s: Any, people: Any, teams: Any) -> Callable[[], Any]:
    """`with running() as (job, sim)`: alice's job, running as a batch Job (which Kueue may
    suspend) on the fake Kubernetes cluster."""
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=8)

    @contextmanager
    def make() -> Iterator[tuple[Job, Any]]:
        with fake_k8s(
            setup=lambda sim: sim.node("gpu-1", gpus=8), image_default="busybox", workload="indexed"
        ) as (_, sim):
            job = submit_job(people["alice"], spec(name="on-k8s", cluster="k8s")).job
            run_once()
            job.refresh_from_db()
            sim.run(job.external_id)
            run_once()
            job.refresh_from_db()
            assert job.state == S.RUNNING
            yield job, sim

    return make


def kueue_evicts(sim: Any, job: Job) -> None:
    """Kueue suspends the Job: the Job controller marks it Suspended and deletes its pods."""
    sim.held_by_kueue(job.external_id)
    for pod in sim.pods(job.external_id):
        with sim.store.lock:
            sim.store.delete(
                sim.store.types[("", "v1", "pods")],
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                None,
                None,
            )


def job_page(people: Any, job: Job) -> str:
    client = Client()
    client.force_login(people["alice"])
    page = client.get(reverse("job", args=[job.pk]))
    assert page.status_code == 200
    return html.unescape(page.content.decode())


def test_a_running_job_the_cluster_puts_back_to_wait_stays_running_and_says_why(
    running: Any, people: Any, client_for: Any
) -> None:
    with running() as (job, sim):
        kueue_evicts(sim, job)
        sync_cluster(job.cluster_id)

        body = client_for("alice").get(f"/api/v1/jobs/{job.pk}/").json()
        assert body["state"] == S.RUNNING
        assert body["reason"]["message"] == HELD
        assert body["remote_state"] == "Suspended"
        assert HELD in job_page(people, job)


def test_the_clusters_wait_is_no_longer_shown_once_the_job_runs_again(
    running: Any, people: Any, client_for: Any
) -> None:
    with running() as (job, sim):
        kueue_evicts(sim, job)
        sync_cluster(job.cluster_id)
        assert HELD in job_page(people, job)

        sim.run(job.external_id)  # Kueue admits it again; its pods run
        sync_cluster(job.cluster_id)

        body = client_for("alice").get(f"/api/v1/jobs/{job.pk}/").json()
        assert (body["state"], body["reason"], body["remote_state"]) == (S.RUNNING, {}, "Running")
        assert HELD not in job_page(people, job)


@pytest.mark.parametrize(
    "stale",
    [
        JobStatus("x", RemoteState.QUEUED, reason="BeginTime", native_state="PENDING"),
        JobStatus("x", RemoteState.RUNNING, native_state="RUNNING"),
    ],
    ids=["waiting", "running"],
)
def test_a_stale_status_of_an_earlier_attempt_leaves_the_later_attempts_wait_alone(
    people: Any, stale: JobStatus
) -> None:
    job = submit_job(people["alice"], spec()).job
    Job.objects.filter(pk=job.pk).update(state=S.RUNNING, external_id="x", attempts=1, reason={})
    job.refresh_from_db()
    _apply_status(job, JobStatus("x", RemoteState.QUEUED, reason="", native_state="REQUEUED"))
    earlier = Job.objects.get(pk=job.pk)  # read by a sync while attempt 1 was held
    Job.objects.filter(pk=job.pk).update(external_id="y", attempts=2, reason={})  # ran again
    job.refresh_from_db()
    _apply_status(job, JobStatus("y", RemoteState.QUEUED, reason=KUEUE, native_state="Suspended"))

    _apply_status(earlier, stale)

    job.refresh_from_db()
    assert (job.state, job.reason["message"], job.remote_state) == (S.RUNNING, HELD, "Suspended")
