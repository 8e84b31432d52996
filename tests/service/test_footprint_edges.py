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


def test_a_cpu_only_job_asking_a_few_cpus_holds_no_gpu(people: Any, tmp_path: Any) -> None:
    """A job of no GPUs (gpus_per_node: 0) asking 2 of a node's 96 CPUs makes no GPU
    unusable (the node's 8 GPUs keep 94 CPUs between them). Rounding its 1/6 of a GPU's
    CPUs up to a whole GPU holds a GPU idle and charges the team's GPU quota for it: eight
    such jobs fill an 8-GPU node whose CPUs are nearly all free, and while the GPUs are busy
    it cannot start at all (before the footprint it started at once)."""
    cluster_of(tmp_path, ("n1", 8, 96, 1_000_000))
    busy = [submit(people, name=f"gpu{i}") for i in range(8)]
    run_cycle()
    assert [j.state for j in fresh(*busy)] == [S.ADMITTED] * 8

    bare = submit(people, name="bare", gpus_per_node=0)
    small = submit(people, name="small", gpus_per_node=0, cpus_per_gpu=2)
    run_cycle()

    bare, small = fresh(bare, small)
    assert bare.state == S.ADMITTED  # a CPU-only job asking nothing starts beside them
    assert (small.state, small.gpus) == (S.ADMITTED, 0.0), (small.state, small.reason)
