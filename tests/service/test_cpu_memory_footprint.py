"""CPUs and memory are charged in GPUs (Slurm's MAX_TRES billing): a job is charged, on each
node, max(its GPUs, its CPUs / the node's CPUs per GPU, its memory / the node's memory per
GPU), rounded up. It is placed, counted against quota and in usage for that footprint, so two
jobs never share a node whose CPUs or memory hold only one of them; the backend is given only
the job's own GPUs. Through the real cycle: snapshot -> scheduler -> apply.

The nodes' CPUs and memory are written into the inventory as a Slurm or Kubernetes sync
stores them (the local backend reports none: unknown, no constraint)."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from queue_service.clusters.models import Cluster, Node
from queue_service.jobs.dispatch import dispatch_request, sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import build_snapshot, preview_job, run_cycle
from queue_service.tenancy.models import Quota
from scheduler.engine import running_gpus
from scheduler.quota import Ledger
from tests.conftest import spec

S = Job.State
MODEL = "SIM-A100"
# (name, GPUs, CPUs, memory MiB): a common 8-GPU node, 12 CPUs and 125,000 MiB per GPU.
BIG = (8, 96, 1_000_000)


def cluster_of(tmp_path: Any, *nodes: tuple[str, int, int | None, int | None], **kw: Any) -> Any:
    """A local cluster of these nodes, whose inventory then says their CPUs and memory."""
    cluster = Cluster.objects.create(
        name=kw.get("name", "c1"),
        kind=kw.get("kind", "local"),
        settings={
            "workdir": str(tmp_path / f"{kw.get('name', 'c1')}-jobs"),
            "nodes": [{"name": n, "gpus": g, "gpu_model": MODEL} for n, g, _, _ in nodes],
        },
    )
    if cluster.kind == "local":
        sync_cluster(cluster.pk)
    for name, gpus, cpus, memory_mb in nodes:
        Node.objects.update_or_create(
            cluster=cluster,
            name=name,
            defaults={"gpu_model": MODEL, "gpus": gpus, "cpus": cpus, "memory_mb": memory_mb},
        )
    return cluster


def submit(people: Any, **overrides: Any) -> Job:
    job: Job = submit_job(people["alice"], spec(**overrides)).job
    return job


def fresh(*jobs: Job) -> list[Job]:
    for job in jobs:
        job.refresh_from_db()
    return list(jobs)


def held_gpus(job: Job) -> list[int]:
    return [len(a["gpus"]) for a in job.placement]


def test_two_cpu_heavy_one_gpu_jobs_are_not_placed_on_one_node(people: Any, tmp_path: Any) -> None:
    """64 CPUs on a 96-CPU, 8-GPU node take the CPUs of 6 GPUs: one such job fits a node,
    not two (the second would wait inside Slurm while gpuq counted it running)."""
    cluster_of(tmp_path, ("n1", *BIG))
    first = submit(people, name="a", cpus_per_gpu=64)
    second = submit(people, name="b", cpus_per_gpu=64)

    run_cycle()

    first, second = fresh(first, second)
    assert (first.state, second.state) == (S.ADMITTED, S.PENDING)
    assert held_gpus(first) == [6]
    assert second.reason["code"] in ("no_capacity", "behind_higher_priority")


def test_a_waiting_job_charged_for_its_cpus_says_so_in_its_reason(
    people: Any, tmp_path: Any
) -> None:
    """The scheduler's words count the footprint ("needs 1 node x 6 free GPUs"): a user who
    asked for one GPU is told where the other five come from."""
    cluster_of(tmp_path, ("n1", *BIG))
    submit(people, name="a", cpus_per_gpu=64)
    second = submit(people, name="b", cpus_per_gpu=64)

    run_cycle()

    (second,) = fresh(second)
    assert second.state == S.PENDING
    assert "charged 6 GPUs per node for its 64 CPUs per node" in second.reason["message"]
    assert second.reason["details"]["gpus_charged_per_node"] == 6
    preview = preview_job("vision", second.spec)
    assert preview["reason"]["message"].endswith(
        "(charged 6 GPUs per node for its 64 CPUs per node)"
    )


def test_cpu_heavy_jobs_spread_over_nodes(people: Any, tmp_path: Any) -> None:
    cluster_of(tmp_path, ("n1", *BIG), ("n2", *BIG))
    jobs = [submit(people, name=f"j{i}", cpus_per_gpu=64) for i in range(2)]

    run_cycle()

    jobs = fresh(*jobs)
    assert [j.state for j in jobs] == [S.ADMITTED, S.ADMITTED]
    assert {j.placement[0]["node"] for j in jobs} == {"n1", "n2"}


# (what the job asks, the node, the GPUs it is charged per node)
FOOTPRINTS = [
    ("nothing but GPUs", {}, BIG, 1),
    ("CPUs within its GPU's share", {"cpus_per_gpu": 12}, BIG, 1),
    ("one CPU past its share", {"cpus_per_gpu": 13}, BIG, 2),
    ("64 CPUs of 96", {"cpus_per_gpu": 64}, BIG, 6),
    ("CPUs per GPU times GPUs", {"gpus_per_node": 2, "cpus_per_gpu": 30}, BIG, 5),
    ("memory past its share", {"memory": "400000M"}, BIG, 4),
    ("the larger of CPUs and memory", {"cpus_per_gpu": 24, "memory": "700000M"}, BIG, 6),
    ("GPUs beyond both", {"gpus_per_node": 7, "cpus_per_gpu": 1}, BIG, 7),
    ("every CPU of the node", {"cpus_per_gpu": 96}, BIG, 8),
    ("a node whose CPUs are unknown", {"cpus_per_gpu": 64}, (8, None, None), 1),
]


@pytest.mark.parametrize(
    ("asks", "node", "charged"), [c[1:] for c in FOOTPRINTS], ids=[c[0] for c in FOOTPRINTS]
)
def test_a_job_is_charged_its_footprint_in_placement_quota_and_usage(
    people: Any, tmp_path: Any, asks: dict[str, Any], node: Any, charged: int
) -> None:
    cluster_of(tmp_path, ("n1", *node))
    (job,) = fresh(submit(people, **asks))

    run_cycle()

    (job,) = fresh(job)
    assert job.state == S.ADMITTED
    assert held_gpus(job) == [charged]
    assert job.gpus == charged  # what the quota report and usage (JobRun.gpus) count
    snap, _, _ = build_snapshot(timezone.now())
    ledger = Ledger(snap.teams, [(j, running_gpus(j), True) for j in snap.running], [], True)
    assert ledger.accounts[("vision", MODEL)].used == charged


def test_the_backend_is_given_only_the_jobs_own_gpus(people: Any, tmp_path: Any) -> None:
    """The extra GPUs are held idle: CUDA_VISIBLE_DEVICES of a local job lists its own."""
    cluster_of(tmp_path, ("n1", *BIG))
    job = submit(people, gpus_per_node=2, cpus_per_gpu=30)
    run_cycle()
    (job,) = fresh(job)

    request = dispatch_request(job)

    assert held_gpus(job) == [5]
    assert request.gpus_per_node == 2
    assert [len(a.gpus) for a in request.placement] == [2]
    assert set(request.placement[0].gpus) <= set(job.placement[0]["gpus"])
    assert request.cpus_per_gpu == 30


# (cluster kind, what the job asks, the memory request the backend gets)
MEMORY_REQUESTS = [
    # 5 GPUs of a 1,000,000 MiB, 8-GPU node: 625,000 MiB, never the whole node.
    ("slurm, no memory given", "slurm", {"cpus_per_gpu": 30, "gpus_per_node": 2}, 625_000),
    ("slurm, no CPUs either", "slurm", {}, 125_000),
    ("slurm, memory given", "slurm", {"memory": "2000M"}, 2000),
    # No GPUs and no CPUs asked: charged none; Slurm gives it 1 CPU, 1/96 of the memory.
    ("slurm, no GPUs", "slurm", {"gpus_per_node": 0}, 10_416),
    # No GPUs, 4 CPUs: charged 1 GPU (a 12-CPU share), so 1 GPU's memory.
    ("slurm, no GPUs, 4 CPUs", "slurm", {"gpus_per_node": 0, "cpus_per_gpu": 4}, 125_000),
    # Kubernetes sets no memory limit the job did not ask for (limits == requests there).
    ("kubernetes, no memory given", "kubernetes", {"cpus_per_gpu": 30}, None),
]


@pytest.mark.parametrize(
    ("kind", "asks", "memory_mb"),
    [c[1:] for c in MEMORY_REQUESTS],
    ids=[c[0] for c in MEMORY_REQUESTS],
)
def test_a_job_without_memory_asks_for_its_footprints_share_of_the_node(
    people: Any, tmp_path: Any, kind: str, asks: dict[str, Any], memory_mb: int | None
) -> None:
    """With SelectTypeParameters=CR_*_Memory, a Slurm job with no --mem gets the whole
    node's memory and blocks every other job there."""
    cluster_of(tmp_path, ("n1", *BIG), name="remote", kind=kind)
    job = submit(people, cluster="remote", **asks)
    run_cycle()
    (job,) = fresh(job)
    assert job.state == S.ADMITTED

    assert dispatch_request(job).memory_mb == memory_mb


def test_a_mig_slice_without_memory_asks_its_share_of_a_gpus_memory(
    people: Any, teams: Any, tmp_path: Any
) -> None:
    """A slice counts as 1/4 of an A30 (compute slices / 4): of a 1-GPU, 256,000 MiB node,
    64,000 MiB, not the whole node."""
    cluster = Cluster.objects.create(
        name="remote",
        kind="local",
        settings={
            "workdir": str(tmp_path / "jobs"),
            "nodes": [
                {
                    "name": "m1",
                    "gpus": 1,
                    "gpu_model": "A30-24GB",
                    "mig": True,
                    "mig_layout": [
                        {"gpu": 0, "profile": "1g.6gb", "start": i, "size": 1} for i in range(4)
                    ],
                }
            ],
        },
    )
    sync_cluster(cluster.pk)
    Node.objects.filter(cluster=cluster).update(cpus=32, memory_mb=256_000)
    Quota.objects.create(team=teams["vision"], gpu_model="A30-24GB", nominal_gpus=1)
    body = spec(kind="agent", mig_profile="1g.6gb", cluster="remote")
    del body["gpus_per_node"]
    job = submit_job(people["alice"], body).job
    run_cycle()
    Cluster.objects.filter(pk=cluster.pk).update(kind="slurm")  # as a Slurm sync stores it
    (job,) = fresh(job)
    assert job.state == S.ADMITTED

    assert dispatch_request(job).memory_mb == 64_000


def test_a_node_of_unknown_memory_gets_no_memory_request(people: Any, tmp_path: Any) -> None:
    cluster_of(tmp_path, ("n1", 8, 96, None), name="remote", kind="slurm")
    job = submit(people, cluster="remote")
    run_cycle()
    (job,) = fresh(job)

    assert dispatch_request(job).memory_mb is None


# (what the job asks, the nodes' (GPUs, CPUs, memory), why it waits)
NEVER_FITS = [
    (
        "more CPUs than any node",
        {"cpus_per_gpu": 128},
        [BIG],
        "needs 128 CPUs per node; nodes of cluster remote have at most 96",
    ),
    (
        "CPUs per GPU times GPUs",
        {"gpus_per_node": 2, "cpus_per_gpu": 50},
        [BIG, (8, 64, 1_000_000)],
        "needs 100 CPUs per node; nodes of cluster remote have at most 96",
    ),
    (
        "more memory than any node",
        {"memory": "2000000M"},
        [BIG],
        "needs 2000000 MB of memory per node; nodes of cluster remote have at most 1000000 MB",
    ),
    (
        "no node with both",
        {"cpus_per_gpu": 90, "memory": "900000M"},
        [(8, 96, 100_000), (8, 16, 1_000_000)],
        "needs 90 CPUs and 900000 MB of memory per node; no node of cluster remote has both",
    ),
]


@pytest.mark.parametrize(
    ("asks", "nodes", "why"), [c[1:] for c in NEVER_FITS], ids=[c[0] for c in NEVER_FITS]
)
def test_a_job_no_node_can_hold_is_never_dispatched_and_says_why(
    people: Any, tmp_path: Any, asks: dict[str, Any], nodes: list[Any], why: str
) -> None:
    cluster_of(tmp_path, *[(f"n{i}", *n) for i, n in enumerate(nodes)], name="remote")
    job = submit(people, cluster="remote", **asks)

    run_cycle()

    (job,) = fresh(job)
    assert job.state == S.PENDING
    assert (job.reason["code"], job.reason["message"]) == ("unsatisfiable", why)
    assert preview_job("vision", job.spec, pinned_cluster="remote")["reason"]["message"] == why


def test_a_job_not_pinned_is_checked_against_every_clusters_nodes(
    people: Any, tmp_path: Any
) -> None:
    cluster_of(tmp_path, ("n1", *BIG), name="small")
    cluster_of(tmp_path, ("m1", 8, 256, 2_000_000), name="large")
    never = submit(people, name="never", gpus_per_node=2, cpus_per_gpu=150)
    fits = submit(people, name="fits", cpus_per_gpu=128)

    run_cycle()

    never, fits = fresh(never, fits)
    assert never.state == S.PENDING
    assert (
        never.reason["message"] == "needs 300 CPUs per node; nodes of any cluster have at most 256"
    )
    # Only the large nodes hold it: it goes there, charged 4 of their 8 GPUs.
    assert fits.state == S.ADMITTED
    assert (fits.cluster.name, held_gpus(fits)) == ("large", [4])


def test_nodes_that_differ_charge_the_largest_footprint(people: Any, tmp_path: Any) -> None:
    """Conservative: the job may land on either node, so it is charged as on the smaller."""
    cluster_of(tmp_path, ("n1", *BIG), ("n2", 8, 256, 2_000_000))
    job = submit(people, cpus_per_gpu=64)

    run_cycle()

    (job,) = fresh(job)
    assert held_gpus(job) == [6]


def test_a_node_too_small_for_the_job_is_not_chosen_when_its_gpus_are_free(
    people: Any, tmp_path: Any
) -> None:
    """128 CPUs take 4 GPUs on a 256-CPU node, and a 96-CPU node with 4 free GPUs cannot run
    it at all: the job is charged past that node's GPUs as long as the large node holds it."""
    cluster_of(tmp_path, ("small", 4, 96, 1_000_000), ("large", 8, 256, 2_000_000))
    job = submit(people, cpus_per_gpu=128)

    run_cycle()

    (job,) = fresh(job)
    assert job.state == S.ADMITTED
    assert job.placement[0]["node"] == "large"
    assert held_gpus(job) == [5]
