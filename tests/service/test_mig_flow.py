"""Agent jobs on MIG slices through the service, on the local backend's simulated MIG GPUs:
an idle GPU is laid out for the pending request, the job lands on the slice and sees it."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.clusters.models import Cluster, Node
from queue_service.jobs.dispatch import sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import spec
from tests.service.test_job_flow import run_until

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State
MODEL = "A100-SXM4-80GB"


@pytest.fixture
def mig_cluster(teams: Any, tmp_path: Any) -> Cluster:
    cluster = Cluster.objects.create(
        name="mig",
        kind="local",
        settings={
            "workdir": str(tmp_path / "jobs"),
            "grace_s": 1,
            "nodes": [
                {"name": "m1", "gpus": 2, "gpu_model": MODEL, "mig": True, "pool": "inference"}
            ],
        },
    )
    sync_cluster(cluster.pk)
    for team in teams.values():
        Quota.objects.create(team=team, gpu_model=MODEL, nominal_gpus=2, borrowing_limit_gpus=0)
    return cluster


def agent(**kw: Any) -> dict[str, Any]:
    body = spec(kind="agent", mig_profile="1g.10gb", priority="high", **kw)
    del body["gpus_per_node"]
    return body


def test_an_agent_job_gets_a_slice_on_an_idle_mig_gpu(mig_cluster: Cluster, people: Any) -> None:
    job = submit_job(
        people["alice"], agent(command="echo $GPUQ_MIG_PROFILE $CUDA_VISIBLE_DEVICES")
    ).job
    job = run_until(job, lambda j: j.is_terminal)
    assert job.state == S.SUCCEEDED
    (alloc,) = job.placement
    assert alloc["node"] == "m1" and alloc["mig"]["profile"] == "1g.10gb"
    node = Node.objects.get(cluster=mig_cluster, name="m1")
    assert any(m["profile"] == "1g.10gb" and m["gpu"] == alloc["mig"]["gpu"] for m in node.mig)
    from queue_service.jobs.dispatch import read_logs

    out = read_logs(job, offset=0, limit=1000, stream="stdout").data.decode()
    assert out.startswith("1g.10gb MIG-gpuq-m1-")


def test_slices_count_against_quota_as_a_fraction_of_a_gpu(
    mig_cluster: Cluster, people: Any
) -> None:
    job = submit_job(people["alice"], agent(command=["sleep", "30"])).job
    assert job.gpus == pytest.approx(1 / 7)
    job = run_until(job, lambda j: j.state == S.RUNNING)
    assert job.gpu_model == MODEL


def test_a_clusters_own_mig_table_is_used_and_a_bad_one_ignored(
    teams: Any, tmp_path: Any, people: Any
) -> None:
    site_model = "X-GPU-48GB"
    cluster = Cluster.objects.create(
        name="site",
        kind="local",
        settings={
            "workdir": str(tmp_path / "jobs"),
            "nodes": [{"name": "x1", "gpus": 1, "gpu_model": site_model, "mig": True}],
            "mig_profiles": {
                site_model: {
                    "compute_slices": 4,
                    "memory_slices": 4,
                    "profiles": [
                        ["1g.12gb", 1, 1, 4, [0, 1, 2, 3], 1],
                        ["2g.24gb", 2, 2, 2, [0, 2], 2],
                    ],
                },
                "Broken-GPU": {"compute_slices": "many"},
            },
        },
    )
    sync_cluster(cluster.pk)
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=1)
    body = spec(
        kind="agent", mig_profile="2g.24gb", priority="high", cluster="site", command=["true"]
    )
    del body["gpus_per_node"]
    job = run_until(submit_job(people["alice"], body).job, lambda j: j.is_terminal)
    assert job.state == S.SUCCEEDED
    assert job.placement[0]["mig"]["start"] in (0, 2)
