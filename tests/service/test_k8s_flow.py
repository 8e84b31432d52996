"""The service against our fake Kubernetes API server (docs/kubernetes.md): stops are the
workload's deletion, which the next sync sees; a job whose workload ended by itself just
before its owner cancelled it keeps its own end."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_fakeapi import ApiError, Fault

from queue_service.jobs.dispatch import run_once
from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, resume_job, submit_job, suspend_job
from queue_service.tenancy.models import Quota
from tests.conftest import spec

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


def test_a_dispatch_retried_after_a_lost_answer_adopts_the_workload_the_first_made(
    fake_k8s: Any, people: Any, teams: Any
) -> None:
    """The first create's answer is lost and an admin then switches the cluster to Indexed
    Jobs: the retry (marked `resubmit` by dispatch_job) finds the Volcano Job and adopts it,
    where the name's 409 would never fire and a second gang would start."""
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=8)
    with fake_k8s(
        setup=lambda sim: sim.node("gpu-1", gpus=8), image_default="busybox", max_retries=0
    ) as (cluster, sim):
        job = submit_job(people["alice"], spec(name="lost-answer", cluster="k8s")).job
        sim.api.inject(Fault("drop_after", method="POST", path_contains="/jobs", times=10))
        run_once()
        job.refresh_from_db()
        assert (job.state, job.reason["code"]) == (S.DISPATCHING, "dispatch_retry")
        made = [o for o in sim.api.calls("POST") if o.path.endswith("/jobs")]
        assert made  # the create reached the cluster; its answer did not come back
        sim.api.faults.clear()
        cluster.settings = {**cluster.settings, "workload": "indexed"}
        cluster.save()
        run_once()
        job.refresh_from_db()
        assert job.state == S.QUEUED, job.reason
        assert "/vcjob/" in job.external_id
        kinds = [e.message for e in job.events.filter(code="dispatched")]
        assert any(m.startswith("adopted ") for m in kinds), kinds
        with sim.store.lock:
            batch = sim.store.objects.get(sim.store.types.get(("batch", "v1", "jobs")), {})
        assert not batch  # no Indexed Job beside it


def test_a_job_whose_pod_its_time_limit_stopped_ends_timeout(running_on_k8s: Any) -> None:
    """The time limit is the pods' activeDeadlineSeconds: the kubelet fails the pod
    (DeadlineExceeded), the Job fails as for any pod failure, and the job is `timeout`."""
    with running_on_k8s(workload="indexed") as (job, sim):
        pod = sim.pods(job.external_id)[0]
        assert pod["spec"]["activeDeadlineSeconds"] == job.spec["time_limit"]

        sim.deadline(job.external_id)
        run_once()

        job.refresh_from_db()
        assert job.state == S.TIMEOUT, job.reason
        assert "time limit reached" in job.reason["message"]
