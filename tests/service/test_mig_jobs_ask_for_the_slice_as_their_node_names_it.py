"""A MIG job asks its cluster for the slice it was placed on, spelt as the node spells it.
Drivers name a profile by the memory they report (`7g.79gb` has been seen for `7g.80gb`,
mig.md); the scheduler places a `7g.80gb` request on such an instance, and the backend is
handed the placed slot's profile (dispatch.dispatch_request): the pod's
`nvidia.com/mig-<profile>` resource, Slurm's GRES type."""

from __future__ import annotations

import json
from typing import Any

import pytest

from queue_service.clusters.models import Cluster, Node
from queue_service.jobs.dispatch import dispatch_request, run_once
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from queue_service.tenancy.models import Quota
from tests.conftest import spec

S = Job.State


def agent_body(profile: str, **kw: Any) -> dict[str, Any]:
    body = spec(kind="agent", mig_profile=profile, priority="high", **kw)
    del body["gpus_per_node"]
    return body


def a100_reporting_7g_79gb(sim: Any) -> None:
    sim.node("a100-pcie", product="NVIDIA-A100-SXM4-80GB", gpus=1, mig={"7g.79gb": 1})


@pytest.mark.django_db(transaction=True)
def test_a_pod_requests_the_mig_resource_its_node_offers(
    fake_k8s: Any, people: Any, teams: Any
) -> None:
    """A `7g.80gb` job placed on a node's `7g.79gb` instance requests
    `nvidia.com/mig-7g.79gb`, the resource that node offers (no node offers the other)."""
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=1)
    with fake_k8s(setup=a100_reporting_7g_79gb, image_default="busybox") as (_, sim):
        job = submit_job(people["alice"], agent_body("7g.80gb", cluster="k8s")).job
        run_once()
        job.refresh_from_db()
        assert job.state == S.QUEUED, job.reason
        assert job.placement[0]["mig"]["profile"] == "7g.79gb"
        _, workload = sim.workload(job.external_id)
        text = json.dumps(workload)
        assert "nvidia.com/mig-7g.79gb" in text, text
        assert "nvidia.com/mig-7g.80gb" not in text


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("asked", "offered"), [("7g.80gb", "7g.79gb"), ("7g.80gb", "7g.80gb"), ("1g.10gb", "1g.10gb")]
)
def test_a_slurm_job_is_handed_the_placed_slices_profile(
    people: Any, teams: Any, asked: str, offered: str
) -> None:
    """The Slurm script's GRES comes from the request's `mig_profile`: the placed slot's."""
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=1)
    cluster = Cluster.objects.create(name="hpc", kind="slurm", settings={})
    size = 8 if offered.startswith("7g") else 1
    Node.objects.create(
        cluster=cluster,
        name="m1",
        gpu_model="A100-SXM4-80GB",
        gpus=1,
        mig_enabled=True,
        mig=[{"gpu": 0, "profile": offered, "start": 0, "size": size, "in_use": False}],
    )
    job = submit_job(people["alice"], agent_body(asked, cluster="hpc")).job
    run_cycle()
    job.refresh_from_db()
    assert job.state == S.ADMITTED, job.reason
    assert dispatch_request(job).mig_profile == offered
