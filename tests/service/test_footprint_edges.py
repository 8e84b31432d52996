"""CPU/memory footprints, through the real cycle (snapshot -> scheduler ->
apply), with nodes' CPUs and memory written into the inventory as a Slurm or Kubernetes
sync stores them."""

from __future__ import annotations

from typing import Any

from queue_service.clusters.models import Node
from queue_service.jobs.models import Job
from queue_service.jobs.snapshot import run_cycle
from tests.service.test_cpu_memory_footprint import cluster_of, fresh, submit

S = Job.State


def test_a_job_is_never_placed_on_a_node_with_fewer_cpus_than_it_asks(
    people: Any, tmp_path: Any
) -> None:
    """Two 8-GPU nodes of one cluster, model and pool: 96 CPUs and 256 CPUs. A job asking
    128 CPUs can only run on the large one (Slurm rejects --nodelist=small
    --cpus-per-task=128; a pod bound there never fits). The scheduler sees nothing that
    tells the nodes apart (a known limit, docs/ARCHITECTURE.md): the job waits and says
    what would let it run, rather than be admitted onto the small node's free GPUs."""
    cluster_of(tmp_path, ("small", 8, 96, 1_000_000), ("large", 8, 256, 2_000_000))
    jobs = [submit(people, name=f"j{i}", cpus_per_gpu=128) for i in range(3)]

    run_cycle()

    cpus = dict(Node.objects.values_list("name", "cpus"))
    for job in fresh(*jobs):
        if job.placement:
            assert all(cpus[a["node"]] >= 128 for a in job.placement), job.placement
        else:
            assert job.state == S.PENDING
            assert job.reason["code"] == "unsatisfiable"
            assert "give the larger nodes a pool of their own" in job.reason["message"]


def test_a_job_the_larger_nodes_pool_tells_apart_runs_there(people: Any, tmp_path: Any) -> None:
    """The way out the reason names: the larger node in a pool of its own."""
    cluster_of(tmp_path, ("small", 8, 96, 1_000_000), ("large", 8, 256, 2_000_000))
    Node.objects.filter(name="large").update(pool="fat")
    (job,) = fresh(submit(people, name="j", cpus_per_gpu=128))

    run_cycle()

    (job,) = fresh(job)
    assert (job.state, [a["node"] for a in job.placement]) == (S.ADMITTED, ["large"]), job.reason


def test_a_cpu_only_job_asking_cpus_is_charged_a_gpu_and_waits_while_all_are_busy(
    people: Any, tmp_path: Any
) -> None:
    """A job of no GPUs asking 2 of a node's 96 CPUs is charged a whole GPU (rounded up,
    as any job): rounded down, any number of such jobs would fit the node and overcommit its
    CPUs (test_charge_and_footprint_edges.py: twelve 11-CPU jobs on 96 CPUs). So while every
    GPU is busy it waits, saying what it is charged for; a job asking nothing starts."""
    cluster_of(tmp_path, ("n1", 8, 96, 1_000_000))
    busy = [submit(people, name=f"gpu{i}") for i in range(8)]
    run_cycle()
    assert [j.state for j in fresh(*busy)] == [S.ADMITTED] * 8

    bare = submit(people, name="bare", gpus_per_node=0)
    small = submit(people, name="small", gpus_per_node=0, cpus_per_gpu=2)
    run_cycle()

    bare, small = fresh(bare, small)
    assert bare.state == S.ADMITTED
    assert small.state == S.PENDING
    assert "charged 1 GPUs per node for its 2 CPUs per node" in small.reason["message"]
