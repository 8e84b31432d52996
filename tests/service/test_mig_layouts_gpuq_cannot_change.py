"""A cluster whose MIG layouts gpuq cannot change (Slurm: the site's gres.conf; Kubernetes
without named layouts in `mig_configs`) has its slice jobs take the slices there are: none
waits for a relayout that would never be made. A layout that would serve the queue is
stored as a proposal for admins (`Node.mig_proposals`), the node's slices left as they are."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.clusters.models import Cluster, Node
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from queue_service.tenancy.models import Quota
from tests.conftest import spec

pytestmark = pytest.mark.django_db
S = Job.State
SEVEN_1G = [
    {"gpu": 0, "profile": "1g.10gb", "start": s, "size": 1, "in_use": False} for s in range(7)
]


def slice_job(people: Any, profile: str, name: str) -> Job:
    body = spec(name=name, kind="agent", mig_profile=profile, priority="high", cluster="hpc")
    del body["gpus_per_node"]
    return submit_job(people["alice"], body).job


@pytest.fixture
def hpc(teams: Any) -> Cluster:
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=4)
    return Cluster.objects.create(name="hpc", kind="slurm", settings={})


def test_on_slurm_a_slice_job_takes_an_existing_slice_rather_than_await_a_relayout(
    people: Any, hpc: Cluster
) -> None:
    Node.objects.create(
        cluster=hpc, name="m1", gpu_model="A100-SXM4-80GB", gpus=1, mig_enabled=True, mig=SEVEN_1G
    )
    big = slice_job(people, "3g.40gb", "big")
    small = slice_job(people, "1g.10gb", "small")

    run_cycle()

    big.refresh_from_db()
    small.refresh_from_db()
    assert small.state == S.ADMITTED, small.reason
    assert small.placement[0]["mig"]["profile"] == "1g.10gb"
    assert big.state == S.PENDING and big.reason["code"] == "mig_unavailable", big.reason
    node = Node.objects.get(cluster=hpc, name="m1")
    assert node.mig == SEVEN_1G  # nothing re-laid out


def test_on_slurm_an_idle_gpu_that_would_serve_the_queue_is_proposed_a_layout(
    people: Any, hpc: Cluster
) -> None:
    Node.objects.create(
        cluster=hpc, name="m1", gpu_model="A100-SXM4-80GB", gpus=1, mig_enabled=True, mig=SEVEN_1G
    )
    big = slice_job(people, "3g.40gb", "big")

    run_cycle()

    big.refresh_from_db()
    assert big.state == S.PENDING and big.reason["code"] == "mig_unavailable", big.reason
    node = Node.objects.get(cluster=hpc, name="m1")
    assert node.mig == SEVEN_1G
    proposal = node.mig_proposals["0"]
    assert "3g.40gb" in {i["profile"] for i in proposal["layout"]}
    assert proposal["message"].startswith("GPU 0 on node hpc/m1 laid out as ")
    assert "would serve 1 pending agent job" in proposal["message"]
