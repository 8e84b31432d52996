"""What is charged and where jobs are placed, as specifications (through the real
cycle and the real status handling; the Slurm statuses are parsed from output captured on
the real lab, tests/backends/slurm/data/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from queue_service.backends.slurm.parsers import parse_sacct, parse_squeue
from queue_service.clusters.models import Node
from queue_service.jobs.dispatch import _apply_status
from queue_service.jobs.models import Job, JobRun
from queue_service.jobs.snapshot import run_cycle
from tests.service.test_cpu_memory_footprint import cluster_of, fresh, submit
from tests.service.test_lifecycle_charges import queued_on_cluster

S = Job.State
SLURM_DATA = Path(__file__).resolve().parents[1] / "backends" / "slurm" / "data"


def _captured(name: str) -> str:
    return (SLURM_DATA / name).read_text()


def test_a_queued_job_cancelled_while_it_ran_is_charged_when_only_sacct_still_knows_it(
    people: Any, local_cluster: Any
) -> None:
    """The lab's capture's job "fill" was RUNNING (squeue_live.txt) when it was
    scancelled. squeue showed it `CANCELLED|15` for MinJobAge; after that gpuq's poll falls
    back to sacct, which reports the same job `CANCELLED by 0|0:0` (sacct_final.txt): exit
    code 0. A gpuq job whose sync did not see it run before squeue forgot it (a worker
    down a few minutes) ran all the same and must be charged for that run."""
    fill = json.loads(_captured("jobs.json"))["fill"]  # its id in this capture
    assert parse_squeue(_captured("squeue_live.txt"))[fill].state == "running"
    status = parse_sacct(_captured("sacct_final.txt"))[fill]
    job = queued_on_cluster(people, local_cluster)
    Job.objects.filter(pk=job.pk).update(external_id=fill)
    job.refresh_from_db()

    _apply_status(job, status)

    job.refresh_from_db()
    assert job.state == S.CANCELLED
    assert JobRun.objects.filter(job=job).exists(), (
        f"not charged: sacct's exit code {status.exit_code!r} taken as 'never ran'"
    )


def test_cpu_only_jobs_admitted_onto_a_node_never_ask_more_cpus_than_it_has(
    people: Any, tmp_path: Any
) -> None:
    """A job of no GPUs asking 11 of a 96-CPU, 8-GPU node's CPUs is charged 0 GPUs (11 x 8 //
    96 rounds down). Rounding down a fraction of one GPU per job is a bounded overcommit;
    but every such job is charged nothing, so the cycle admits any number of them onto one
    node: twelve ask 132 CPUs of its 96 (Slurm keeps the rest pending while gpuq counts
    them dispatched; and the GPU jobs placed there after them wait behind them)."""
    cluster_of(tmp_path, ("n1", 8, 96, 1_000_000))
    jobs = [submit(people, name=f"cpu{i}", gpus_per_node=0, cpus_per_gpu=11) for i in range(12)]

    run_cycle()

    cpus_on: dict[str, int] = {}
    for job in fresh(*jobs):
        for a in job.placement:
            cpus_on[a["node"]] = cpus_on.get(a["node"], 0) + 11
    node_cpus = dict(Node.objects.values_list("name", "cpus"))
    over = {n: (c, node_cpus[n]) for n, c in cpus_on.items() if c > node_cpus[n]}
    assert not over, f"CPUs asked by the jobs admitted per node (asked, has): {over}"


def test_a_job_that_fits_the_large_nodes_of_two_clusters_runs_on_one_of_them(
    people: Any, tmp_path: Any
) -> None:
    """Clusters a and b have 256-CPU nodes, cluster c only 96-CPU ones, all of one model and
    8 GPUs. A job asking 128 CPUs (not pinned) can be kept off c by pinning it to a (or b):
    it must run, not wait `unsatisfiable` with a reason that names c as having such nodes
    ("only some nodes of c1/…") and asks for a pool the large nodes do not need."""
    cluster_of(tmp_path, ("a1", 8, 256, 2_000_000), name="a")
    cluster_of(tmp_path, ("b1", 8, 256, 2_000_000), name="b")
    cluster_of(tmp_path, ("c1", 8, 96, 1_000_000), name="c")
    (job,) = fresh(submit(people, name="big", cpus_per_gpu=128))

    run_cycle()

    (job,) = fresh(job)
    assert job.state == S.ADMITTED, job.reason
    assert job.cluster is not None and job.cluster.name in ("a", "b")


def test_a_job_that_fits_the_large_nodes_of_two_pools_runs_in_one_of_them(
    people: Any, tmp_path: Any
) -> None:
    """The way out the `unsatisfiable` reason names, taken: the large nodes have pools of
    their own ("fat", "fat2"); the small one has none. Narrowing the job to either pool
    keeps it off the small node, so it must run, not wait saying the nodes "look the same
    to the scheduler (cluster, GPU model, pool, GPUs)"."""
    cluster_of(
        tmp_path, ("small", 8, 96, 1_000_000), ("large1", 8, 256, 2_000_000),
        ("large2", 8, 256, 2_000_000),
    )  # fmt: skip
    Node.objects.filter(name="large1").update(pool="fat")
    Node.objects.filter(name="large2").update(pool="fat2")
    (job,) = fresh(submit(people, name="big", cpus_per_gpu=128))

    run_cycle()

    (job,) = fresh(job)
    assert job.state == S.ADMITTED, job.reason
    assert [a["node"] for a in job.placement] in (["large1"], ["large2"])
