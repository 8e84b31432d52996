"""The memory a Slurm job asks (`--mem`) when its spec gives none: its footprint's share of
the node, so that under SelectTypeParameters=CR_*_Memory it never gets the whole node's
memory. Whole GPUs, MIG slices and jobs of no GPUs alike (backends.base.memory_share_mb; the
service's dispatch_request hands the result to the script builder)."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.backends.base import memory_share_mb
from queue_service.backends.slurm import script

from .conftest import request

# (case, node (memory MB, GPUs, CPUs), GPUs charged there, CPUs asked, --mem in MB)
SHARES = [
    ("1 GPU of the lab's 4-GPU node", (16000, 4, 8), 1, 1, 4000),
    ("a footprint of 3 GPUs", (16000, 4, 8), 3, 5, 12000),
    # A slice counts compute slices / 7 of a GPU: 1g.10gb on the lab's MIG node (1 GPU).
    ("a 1g.10gb slice", (16000, 1, 8), 1 / 7, 1, 2285),
    ("a 3g.40gb slice of an 8-GPU node", (1_000_000, 8, 96), 3 / 7, 1, 53571),
    ("a 1g.6gb slice of an A30 (of 4)", (256_000, 4, 64), 1 / 4, 1, 16000),
    # No GPUs and no CPUs or memory asked: charged none; Slurm gives it 1 CPU.
    ("no GPUs, nothing asked", (16000, 4, 8), 0, 1, 2000),
    ("a CPU-only node", (256_000, 0, 64), 0, 4, 16000),
]


@pytest.mark.parametrize(
    ("node", "gpus", "cpus", "mem"), [c[1:] for c in SHARES], ids=[c[0] for c in SHARES]
)
def test_a_job_without_memory_asks_its_footprints_share_of_the_node(
    node: tuple[int, int, int], gpus: float, cpus: int, mem: int
) -> None:
    memory_mb, node_gpus, node_cpus = node
    assert memory_share_mb(memory_mb, node_gpus, node_cpus, gpus, cpus) == mem


def test_a_node_of_no_gpus_and_unknown_cpus_gets_no_share() -> None:
    assert memory_share_mb(256_000, 0, None, 0, 1) is None


@pytest.mark.parametrize(
    ("job", "gres"),
    [
        (request(mig_profile="1g.10gb", memory_mb=2285), "--gres=gpu:1g.10gb:1"),
        (request(gpus_per_node=0, memory_mb=2000), None),
    ],
    ids=["a MIG slice", "no GPUs"],
)
def test_the_script_asks_the_memory_it_is_given_with_or_without_gpus(
    job: Any, gres: str | None
) -> None:
    lines = script.directives(job, script.ScriptOptions(), "/w")
    assert f"#SBATCH --mem={job.memory_mb}M" in lines
    assert [line for line in lines if "--gres" in line] == ([f"#SBATCH {gres}"] if gres else [])
