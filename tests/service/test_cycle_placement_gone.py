"""Where the cycle and the job lifecycle meet, as specifications: through the real cycle
(snapshot -> scheduler -> apply), PostgreSQL and the local backend."""

from __future__ import annotations

from typing import Any

from queue_service.clusters.models import Cluster, Node
from queue_service.jobs.dispatch import dispatch_job, sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.snapshot import run_cycle
from tests.service.test_cpu_memory_footprint import cluster_of, fresh, submit

S = Job.State


def forget_node(cluster: Cluster, name: str) -> None:
    """The node leaves the cluster: its backend no longer reports it, and the sync removes it
    (or marks it down while a job is still placed on it)."""
    cluster.settings["nodes"] = [n for n in cluster.settings["nodes"] if n["name"] != name]
    cluster.save(update_fields=["settings"])
    sync_cluster(cluster.pk)


def test_a_node_gone_from_inventory_does_not_keep_a_cpu_heavy_job_off_the_nodes_left(
    people: Any, tmp_path: Any
) -> None:
    """A cluster had a 96-CPU and a 16-CPU 8-GPU node; the small one is gone (no longer
    reported). A job asking 64 CPUs fits the large node, the only node anything can be
    placed on: it starts there, and is charged for that node (64 of 96 CPUs: 6 GPUs), not
    kept waiting as `unsatisfiable` because of a node that no longer exists."""
    cluster = cluster_of(tmp_path, ("big", 8, 96, 1_000_000), ("small", 8, 16, 1_000_000))
    forget_node(cluster, "small")
    # What a Slurm or Kubernetes sync stores of the node that is left (local reports none).
    Node.objects.filter(name="big").update(cpus=96, memory_mb=1_000_000)
    assert not Node.objects.filter(name="small").exists()
    job = submit(people, name="j", cpus_per_gpu=64)

    run_cycle()

    (job,) = fresh(job)
    assert (job.state, job.reason.get("code")) == (S.ADMITTED, "admitted"), job.reason
    assert [(a["node"], len(a["gpus"])) for a in job.placement] == [("big", 6)]


def test_a_node_gone_from_inventory_does_not_raise_the_charge_on_the_nodes_left(
    people: Any, tmp_path: Any
) -> None:
    """48 CPUs on a 96-CPU 8-GPU node are the CPUs of 4 GPUs. A gone node of 64 CPUs (8 per
    GPU, where 48 would be 6 GPUs) is no node the job can be placed on: it is charged 4."""
    cluster = cluster_of(tmp_path, ("big", 8, 96, 1_000_000), ("old", 8, 64, 1_000_000))
    forget_node(cluster, "old")
    Node.objects.filter(name="big").update(cpus=96, memory_mb=1_000_000)
    job = submit(people, name="j", cpus_per_gpu=48)

    run_cycle()

    (job,) = fresh(job)
    assert job.state == S.ADMITTED, job.reason
    assert (job.gpus, [len(a["gpus"]) for a in job.placement]) == (4.0, [4])


def test_a_job_whose_node_left_the_cluster_before_its_dispatch_goes_back_to_the_queue(
    people: Any, local_cluster: Any
) -> None:
    """Two 4-GPU jobs are admitted, one per node; before the second is handed over, its node
    leaves the cluster (the sync marks it down). That is no fault of the job's: it waits
    for the next cycle (admitted -> pending) instead of failing with `unknown node(s)`."""
    first = submit(people, name="first", gpus_per_node=4, command=["sleep", "30"])
    second = submit(people, name="second", gpus_per_node=4, command=["sleep", "30"])
    run_cycle()
    first, second = fresh(first, second)
    assert (first.state, second.state) == (S.ADMITTED, S.ADMITTED)
    (gone,) = {a["node"] for a in second.placement}
    forget_node(local_cluster, gone)

    dispatch_job(str(second.pk))

    (second,) = fresh(second)
    assert second.state == S.PENDING, (second.state, second.reason)


def test_a_job_admitted_to_a_cluster_disabled_before_its_dispatch_is_not_handed_to_it(
    people: Any, local_cluster: Any
) -> None:
    """ "Disabled" means no new work (docs/ARCHITECTURE.md): a job the cycle admitted a moment
    before the cluster was disabled is not handed to it afterwards; it waits again."""
    job = submit(people, name="late", gpus_per_node=4, command=["sleep", "30"])
    run_cycle()
    (job,) = fresh(job)
    assert job.state == S.ADMITTED
    Cluster.objects.filter(pk=local_cluster.pk).update(enabled=False)

    dispatch_job(str(job.pk))

    (job,) = fresh(job)
    assert (job.state, job.external_id) == (S.PENDING, ""), (job.state, job.reason)
