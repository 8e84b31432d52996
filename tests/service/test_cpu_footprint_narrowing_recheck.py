"""A job's CPUs are charged in GPUs (snapshot.Footprints), and nodes with too few CPUs for it
are kept away by narrowing it to a cluster, model or pool only nodes large enough have. Once
narrowed, the job is charged the (smaller) footprint of the narrowed nodes, so the narrowed
nodes are looked at again with that charge: a node there with too few CPUs but enough GPUs
for the smaller charge would otherwise be where the job is placed."""

from __future__ import annotations

from typing import Any

from queue_service.clusters.models import Cluster, Node
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import spec

S = Job.State


def test_a_job_is_never_placed_on_a_node_with_fewer_cpus_than_it_asks(
    people: Any, teams: Any, tmp_path: Any
) -> None:
    a = Cluster.objects.create(name="a", kind="local", settings={"workdir": str(tmp_path / "a")})
    b = Cluster.objects.create(name="b", kind="local", settings={"workdir": str(tmp_path / "b")})
    # Inventory as a sync stores it: CPUs known per node.
    Node.objects.create(cluster=a, name="bigA", gpu_model="SIM-A100", gpus=8, cpus=64)
    Node.objects.create(cluster=a, name="smallA", gpu_model="SIM-A100", gpus=4, cpus=16)
    Node.objects.create(cluster=b, name="hugeB", gpu_model="SIM-A100", gpus=16, cpus=32)
    Node.objects.create(cluster=b, name="smallB", gpu_model="SIM-A100", gpus=16, cpus=16)
    cpus = {"bigA": 64, "smallA": 16, "hugeB": 32, "smallB": 16}
    # 32 CPUs on its node: bigA and hugeB can hold it, smallA and smallB cannot.
    job = submit_job(people["alice"], spec(name="cpu-heavy", gpus_per_node=1, cpus_per_gpu=32)).job

    run_cycle()

    job.refresh_from_db()
    if job.state == S.ADMITTED:
        (alloc,) = job.placement
        assert cpus[alloc["node"]] >= 32, (
            f"admitted on {job.cluster.name}/{alloc['node']} ({cpus[alloc['node']]} CPUs)"
            " for a job asking 32 CPUs per node"
        )
    else:
        assert job.state == S.PENDING
