"""MIG on Kubernetes through the service: the scheduler re-lays out an idle GPU for a
pending agent job, gpuq asks the GPU Operator for the matching named layout, the node drains
while the (simulated) MIG manager works, and the job then lands on a slice of that node.
A failed reconfiguration leaves the node drained with the reason."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from queue_service.clusters.models import Node
from queue_service.jobs.dispatch import run_once
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import spec

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State
CONFIGS = {"all-7g.80gb": ["7g.80gb"], "all-1g.10gb": ["1g.10gb"] * 7}
COUNTS = {"all-7g.80gb": {"7g.80gb": 1}, "all-1g.10gb": {"1g.10gb": 7}}


def one_idle_h100(sim: Any) -> None:
    sim.node(
        "h100-mig",
        gpus=1,
        mig={"7g.80gb": 1},
        labels={
            "nvidia.com/mig.config": "all-7g.80gb",
            "nvidia.com/mig.config.state": "success",
            "gpuq.test/applied": "all-7g.80gb",
        },
    )


def node_label(sim: Any, name: str) -> str | None:
    with sim.store.lock:
        obj = sim.store.get(sim.store.types[("", "v1", "nodes")], "", name)
        return obj["metadata"]["labels"].get("nvidia.com/mig.config")


@pytest.fixture
def agent_job(people: Any, teams: Any) -> Callable[[], Job]:
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=4)

    def submit() -> Job:
        body = spec(kind="agent", mig_profile="1g.10gb", priority="high", cluster="k8s")
        del body["gpus_per_node"]
        return submit_job(people["alice"], body).job

    return submit


def test_a_relayout_is_applied_and_the_job_lands_on_the_new_slice(
    fake_k8s: Any, agent_job: Callable[[], Job]
) -> None:
    with fake_k8s(setup=one_idle_h100, mig_configs=CONFIGS, image_default="busybox") as (_, sim):
        job = agent_job()
        run_once()
        job.refresh_from_db()
        assert job.state == S.PENDING and job.reason["code"] == "mig_relayout"
        assert node_label(sim, "h100-mig") == "all-1g.10gb"
        assert Node.objects.get(name="h100-mig").state == Node.State.DRAIN
        assert sim.mig_manager_step("h100-mig", layouts=COUNTS) == "pending"
        run_once()
        assert Node.objects.get(name="h100-mig").state == Node.State.DRAIN
        assert sim.mig_manager_step("h100-mig", layouts=COUNTS) == "success"
        run_once()
        job.refresh_from_db()
        assert job.state == S.QUEUED, job.reason
        assert job.placement[0]["node"] == "h100-mig"
        assert job.placement[0]["mig"]["profile"] == "1g.10gb"
        _, workload = sim.workload(job.external_id)
        text = json.dumps(workload)
        assert '"nvidia.com/mig-1g.10gb": "1"' in text or '"nvidia.com/mig-1g.10gb": 1' in text
        assert "h100-mig" in text


def test_a_failed_relayout_leaves_the_node_drained_with_the_reason(
    fake_k8s: Any, agent_job: Callable[[], Job]
) -> None:
    with fake_k8s(setup=one_idle_h100, mig_configs=CONFIGS, image_default="busybox") as (_, sim):
        job = agent_job()
        run_once()
        sim.mig_manager_step("h100-mig", layouts=COUNTS)
        sim.mig_manager_step("h100-mig", layouts=COUNTS, fail=True)
        run_once()
        node = Node.objects.get(name="h100-mig")
        assert node.state == Node.State.DRAIN and "failed" in node.reason
        job.refresh_from_db()
        assert job.state == S.PENDING


def test_without_a_matching_named_layout_the_relayout_is_only_proposed(
    fake_k8s: Any, agent_job: Callable[[], Job]
) -> None:
    configs = {"all-7g.80gb": ["7g.80gb"]}
    with fake_k8s(setup=one_idle_h100, mig_configs=configs, image_default="busybox") as (_, sim):
        agent_job()
        run_once()
        assert node_label(sim, "h100-mig") == "all-7g.80gb"
        node = Node.objects.get(name="h100-mig")
        assert node.state == Node.State.UP
        assert node.mig_proposals["0"]["message"].startswith("GPU 0 on node k8s/h100-mig")


def test_admins_see_proposals_on_the_clusters_page(
    fake_k8s: Any, agent_job: Callable[[], Job], client: Any, people: Any
) -> None:
    with fake_k8s(setup=one_idle_h100, mig_configs={}, image_default="busybox"):
        agent_job()
        run_once()
        client.force_login(people["alice"])
        page = client.get("/clusters/").content.decode()
        assert "Proposed MIG layout" in page and "GPU 0 on node k8s/h100-mig" in page
