"""A job of no GPUs (`gpus_per_node: 0`) may run on a MIG node: it takes neither a GPU nor a
slice, so the node's slices stay for slice jobs. Where only MIG nodes could take it, its
CPUs and memory are checked against theirs (as a slice job's are): a job no such node can
hold waits `unsatisfiable`, never dispatched."""

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


@pytest.fixture
def hpc(teams: Any) -> Cluster:
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=4)
    hpc = Cluster.objects.create(name="hpc", kind="slurm", settings={})
    Node.objects.create(
        cluster=hpc,
        name="m1",
        gpu_model="A100-SXM4-80GB",
        gpus=1,
        cpus=32,
        memory_mb=64000,
        mig_enabled=True,
        mig=SEVEN_1G,
    )
    return hpc


def slice_job(people: Any, name: str) -> Job:
    body = spec(name=name, kind="agent", mig_profile="1g.10gb", cluster="hpc")
    del body["gpus_per_node"]
    return submit_job(people["alice"], body).job


def test_a_job_of_no_gpus_is_admitted_on_a_mig_node_and_leaves_its_slices_to_slice_jobs(
    people: Any, hpc: Cluster
) -> None:
    cpu = submit_job(people["alice"], spec(name="cpu", gpus_per_node=0, cluster="hpc")).job

    run_cycle()

    cpu.refresh_from_db()
    assert cpu.state == S.ADMITTED, cpu.reason
    assert cpu.placement == [{"node": "m1", "gpus": []}]
    assert cpu.gpus == 0
    slices = [slice_job(people, f"s{i}") for i in range(7)]

    run_cycle()

    for job in slices:
        job.refresh_from_db()
        assert job.state == S.ADMITTED, job.reason
    assert sorted(job.placement[0]["mig"]["start"] for job in slices) == list(range(7))


def test_a_job_of_no_gpus_asking_more_cpus_than_a_mig_node_has_waits_unsatisfiable(
    people: Any, hpc: Cluster
) -> None:
    body = spec(name="cpu-heavy", gpus_per_node=0, cpus_per_gpu=64, cluster="hpc")
    job = submit_job(people["alice"], body).job

    run_cycle()

    job.refresh_from_db()
    assert job.state == S.PENDING, job.placement
    assert job.reason["code"] == "unsatisfiable", job.reason
    assert "needs 64 CPUs per node" in job.reason["message"], job.reason
