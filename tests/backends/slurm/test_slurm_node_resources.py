"""A Slurm node's CPUs and memory: read by `sinfo` (CPUTot and RealMemory), stored by the
inventory sync, and what gpuq charges CPU- and memory-heavy jobs by (in GPUs). On the lab,
a job that gives no memory is submitted with its footprint's share of the node's memory,
never the whole node.

data/sinfo_resources.txt is the lab's real answer to `parsers.sinfo_resources("gpu")`, run as
the submit user over SSH (the lab's nodes: CPUs=8 RealMemory=16000)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_service.backends.slurm import SlurmBackend, parsers
from queue_service.backends.slurm.backend import slurm_job_id

from .conftest import CLUSTER_JSON, lab_up

DATA = Path(__file__).parent / "data"
LAB_GRES_MAP = {"A100-SXM4-80GB": "a100"}


def captured(name: str) -> str:
    return (DATA / name).read_text()


def test_the_captured_answer_gives_each_lab_node_its_cpus_and_memory() -> None:
    assert parsers.parse_sinfo_resources(captured("sinfo_resources.txt")) == {
        f"gpu{i}": (8, 16000) for i in range(1, 5)
    }


# (a line of `sinfo -O NodeList:|,CPUs:|,Memory:`, what it says)
LINES = [
    ("a configured node", "gpu1|8|16000", (8, 16000)),
    # Slurm's default RealMemory is 1: a node whose memory nobody configured.
    ("memory not configured", "cpu7|64|1", (64, None)),
    ("nothing known", "gpu9|0|0", (None, None)),
    ("not numbers", "gpu9|N/A|N/A", (None, None)),
]


@pytest.mark.parametrize(("line", "says"), [c[1:] for c in LINES], ids=[c[0] for c in LINES])
def test_a_resources_line_reads_as(line: str, says: tuple[int | None, int | None]) -> None:
    assert parsers.parse_sinfo_resources(line + "\n") == {line.split("|")[0]: says}


def test_inventory_nodes_carry_their_cpus_and_memory() -> None:
    """The GPUs and states of one captured answer, the CPUs and memory of the other."""
    nodes = parsers.parse_sinfo(
        captured("sinfo_mixed.txt"),
        LAB_GRES_MAP,
        parsers.parse_sinfo_resources(captured("sinfo_resources.txt")),
    )

    assert [(n.name, n.gpus, n.cpus, n.memory_mb) for n in nodes] == [
        ("gpu1", 4, 8, 16000),
        ("gpu2", 4, 8, 16000),
        ("gpu3", 4, 8, 16000),
        ("gpu4", 1, 8, 16000),
    ]


def test_a_node_the_resources_answer_does_not_name_has_them_unknown() -> None:
    nodes = parsers.parse_sinfo(captured("sinfo_mixed.txt"), LAB_GRES_MAP, {})

    assert {(n.cpus, n.memory_mb) for n in nodes} == {(None, None)}


def test_the_lab_reports_its_nodes_cpus_and_memory(backend: SlurmBackend) -> None:
    assert {(n.name, n.cpus, n.memory_mb) for n in backend.nodes()} == {
        (f"gpu{i}", 8, 16000) for i in range(1, 5)
    }


# --- the service on the lab -----------------------------------------------------------------


@pytest.fixture
def lab_cluster(teams: Any, slurm_lab: None) -> Iterator[Any]:
    from queue_service.clusters.models import Cluster
    from queue_service.jobs.dispatch import sync_cluster
    from queue_service.tenancy.models import Quota

    lab_up()
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=16)
    cluster = Cluster.objects.create(
        name="lab", kind="slurm", settings=json.loads(CLUSTER_JSON.read_text())
    )
    sync_cluster(cluster.pk)
    yield cluster
    from queue_service.jobs.models import Job

    for external_id in Job.objects.exclude(external_id="").values_list("external_id", flat=True):
        subprocess.run(["scancel", slurm_job_id(external_id)], check=False)


def slurm_job(external_id: str) -> dict[str, str]:
    """`scontrol show job -o` as a dict (root: the lab runs on this machine)."""
    shown = subprocess.run(
        ["scontrol", "show", "job", "-o", slurm_job_id(external_id)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(re.findall(r"(\w+)=(\S*)", shown))


@pytest.mark.django_db(transaction=True)
def test_cpu_heavy_jobs_without_memory_run_side_by_side_with_bounded_memory(
    lab_cluster: Any, people: Any
) -> None:
    """The lab's nodes have 4 GPUs and 8 CPUs (2 per GPU): a 1-GPU job asking 5 CPUs is
    charged 3 GPUs, so two such jobs go to two nodes and both run (on one node the second
    would wait inside Slurm for CPUs while gpuq counted it running). Neither gives memory:
    each asks for 3 GPUs' share of the node's 16000 MB, 12000 MB, not the whole node."""
    from queue_service.jobs.dispatch import run_once
    from queue_service.jobs.models import Job
    from queue_service.jobs.services import submit_job

    node = lab_cluster.nodes.get(name="gpu1")
    assert (node.cpus, node.memory_mb) == (8, 16000)  # as the sync stored them
    jobs = [
        submit_job(
            people["alice"],
            {
                "name": f"cpu-heavy-{i}",
                "command": ["sleep", "300"],
                "cluster": "lab",
                "gpus_per_node": 1,
                "cpus_per_gpu": 5,
            },
        ).job
        for i in range(2)
    ]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run_once()
        for job in jobs:
            job.refresh_from_db()
        if all(j.state == Job.State.RUNNING for j in jobs):
            break
        time.sleep(0.5)

    assert [j.state for j in jobs] == [Job.State.RUNNING] * 2, [j.reason for j in jobs]
    assert [len(j.placement[0]["gpus"]) for j in jobs] == [3, 3]
    assert [j.gpus for j in jobs] == [3, 3]
    shown = [slurm_job(j.external_id) for j in jobs]
    assert len({s["NodeList"] for s in shown}) == 2
    assert [(s["JobState"], s["MinMemoryNode"], s["NumCPUs"]) for s in shown] == [
        ("RUNNING", "12000M", "5")
    ] * 2


@pytest.mark.slurm
@pytest.mark.django_db(transaction=True)
def test_mig_and_cpu_only_jobs_without_memory_ask_their_share_not_the_node(
    lab_cluster: Any, people: Any
) -> None:
    """On the lab (16000 MB per node): a 1g.10gb slice of gpu4's one GPU asks 1/7 of it,
    2285 MB; a job of no GPUs asking nothing, charged none, asks 1 of gpu1-3's 8 CPUs'
    share, 2000 MB. Without --mem Slurm shows MinMemoryNode=0: the whole node."""
    from queue_service.jobs.dispatch import run_once
    from queue_service.jobs.models import Job
    from queue_service.jobs.services import submit_job

    specs = [
        {"name": "slice", "kind": "agent", "mig_profile": "1g.10gb"},
        {"name": "no-gpus", "gpus_per_node": 0},
    ]
    jobs = [
        submit_job(people["alice"], {"command": ["sleep", "300"], "cluster": "lab", **spec}).job
        for spec in specs
    ]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run_once()
        for job in jobs:
            job.refresh_from_db()
        if all(j.state == Job.State.RUNNING for j in jobs):
            break
        time.sleep(0.5)

    assert [j.state for j in jobs] == [Job.State.RUNNING] * 2, [j.reason for j in jobs]
    shown = [slurm_job(j.external_id) for j in jobs]
    assert [(s["JobState"], s["MinMemoryNode"]) for s in shown] == [
        ("RUNNING", "2285M"),
        ("RUNNING", "2000M"),
    ]
