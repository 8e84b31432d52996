"""A Volcano gang ends by its cause, as a batch Job does (docs/kubernetes.md): Volcano
restarts it in place only for a pod deleted (PodEvicted) and only when the job's
`retries.on` lists a cause and it has retries left. A pod that fails by itself (PodFailed:
the user's exit code, the time limit, a kubelet's eviction) ends the gang, and the service
decides from that end's cause, as for every backend: the user's failure is `failed` with its
exit code, the time limit `timeout`, a node failure a new attempt when `retries.on` lists it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from queue_service.jobs.dispatch import run_once
from queue_service.jobs.models import Job, JobRun
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import spec

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


@pytest.fixture
def gang_on_volcano(fake_k8s: Any, people: Any, teams: Any) -> Callable[..., Any]:
    """`with gang_on_volcano(**spec) as (job, sim)`: alice's 2-node training job running as
    a Volcano Job on two 8-GPU nodes."""
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=16)

    def two_nodes(sim: Any) -> None:
        sim.node("gpu-1", gpus=8)
        sim.node("gpu-2", gpus=8)

    @contextmanager
    def make(**overrides: Any) -> Iterator[tuple[Job, Any]]:
        with fake_k8s(setup=two_nodes, image_default="busybox", workload="volcano") as (_, sim):
            gang = spec(name="gang", cluster="k8s", nodes=2, gpus_per_node=8, **overrides)
            job = submit_job(people["alice"], gang).job
            run_once()
            job.refresh_from_db()
            assert job.state == S.QUEUED and "/vcjob/" in job.external_id, job.reason
            sim.run(job.external_id)
            run_once()
            job.refresh_from_db()
            assert job.state == S.RUNNING, job.reason
            yield job, sim

    return make


def test_a_gang_whose_pod_exits_1_ends_failed_after_one_run(gang_on_volcano: Any) -> None:
    """retries.on lists node_failure only: the user's exit 1 is no cause to retry, in place
    or by the service (before: PodFailed -> RestartJob ran it retries.max + 1 times)."""
    with gang_on_volcano(retries={"max": 3, "on": ["node_failure"]}) as (job, sim):
        sim.fail(job.external_id, exit_code=1, index=1)
        run_once()

        job.refresh_from_db()
        assert (job.state, job.exit_code) == (S.FAILED, 1), job.reason
        assert "exit code 1" in job.reason["message"]
        assert job.attempts == 1
        assert JobRun.objects.filter(job=job).count() == 1
        vcjob = sim.workload(job.external_id)[1]
        assert vcjob["status"]["state"]["phase"] == "Terminated"
        assert not vcjob["status"].get("retryCount")  # never restarted in place


def test_a_gang_its_time_limit_stopped_ends_timeout(gang_on_volcano: Any) -> None:
    with gang_on_volcano(time_limit="01:00:00") as (job, sim):
        assert all(p["spec"]["activeDeadlineSeconds"] == 3600 for p in sim.pods(job.external_id))
        sim.deadline(job.external_id)
        run_once()

        job.refresh_from_db()
        assert job.state == S.TIMEOUT, job.reason
        assert "time limit reached" in job.reason["message"]
        assert job.attempts == 1


def test_a_gang_whose_pod_its_kubelet_evicted_is_retried_as_a_new_attempt(
    gang_on_volcano: Any,
) -> None:
    """A kubelet's eviction leaves the pod Failed (PodFailed): Volcano ends the gang, and the
    service retries the node failure as retries.on says, with a new attempt it places."""
    with gang_on_volcano(retries={"max": 1, "on": ["node_failure"]}) as (job, sim):
        first = job.external_id
        sim.evict(first, index=1)
        run_once()

        job.refresh_from_db()
        assert job.attempts == 2 and job.external_id != first, job.reason
        assert "requeued_node_failure" in [e.code for e in job.events.all()]


def test_a_gangs_restarts_in_place_use_its_retries(gang_on_volcano: Any) -> None:
    """retries.max 2: Volcano restarts the gang in place once (a pod deleted: PodEvicted ->
    RestartJob), then a node failure ends it. That uses both retries: one requeue, whose
    attempt Volcano may no longer restart in place, and its node failure is the end (before:
    each attempt was handed retries.max less the requeues alone, so the gang ran four times)."""
    with gang_on_volcano(retries={"max": 2, "on": ["node_failure"]}) as (job, sim):
        first = job.external_id
        sim.evict(first, cause="preemption")  # PodEvicted -> RestartJob: retryCount 1
        run_once()
        sim.run(first)  # the gang recreated in place
        run_once()
        run_once()
        job.refresh_from_db()
        assert job.state == S.RUNNING, job.reason
        restarts = [e.message for e in job.events.filter(code="restarted_in_place")]
        assert restarts == ["restarted in place by Volcano (1)"]

        sim.evict(first, index=1)  # a kubelet's eviction: PodFailed -> TerminateJob
        run_once()
        job.refresh_from_db()
        assert job.attempts == 2 and job.external_id != first, job.reason
        second = job.external_id
        vcjob = sim.workload(second)[1]
        assert vcjob["spec"]["maxRetry"] == 1, "no retry left to make in place"
        assert {"event": "PodEvicted", "action": "TerminateJob"} in vcjob["spec"]["policies"]

        sim.run(second)
        run_once()
        sim.evict(second, index=1)
        run_once()
        job.refresh_from_db()
        assert job.state == S.FAILED, job.reason
        assert job.attempts == 2
        assert job.events.filter(code__startswith="requeued_").count() == 1
