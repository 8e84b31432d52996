"""A node with GPUs of two types (`Gres=gpu:a100:4,gpu:v100:2`). gpuq's scheduler gives each
node one GPU model (scheduler/types.py `Node`), so the inventory offers the node's GPUs of the
model it has most of (the first listed on a tie) and not the others: counting all six as A100s
would have gpuq place a job asking 6 A100s there, which Slurm refuses ("Requested node
configuration is not available", captured). The node's reason names what is not counted.

Captured by capture_two_gpu_types.py from a throw-away Slurm of its own (the lab's nodes have
one type each): mixed1 lists a100 first, mixed2 v100 first; both run jobs (GresUsed)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import cast

import pytest

from queue_service.backends.base import AllocatedNode, NodeInfo
from queue_service.backends.slurm import SlurmBackend, parsers
from queue_service.backends.slurm.backend import SlurmSettings
from queue_service.backends.slurm.ssh import SSHConnection

from .conftest import request
from .test_slurm_mig_gres_type_of_the_node import FakeLogin

DATA = Path(__file__).parent / "data"
A100 = "A100-SXM4-80GB"
GRES_MAP = {A100: "a100"}


def nodes(text: str) -> dict[str, NodeInfo]:
    resources = parsers.parse_sinfo_resources(
        (DATA / "sinfo_two_gpu_types_resources.txt").read_text()
    )
    return {n.name: n for n in parsers.parse_sinfo(text, GRES_MAP, resources)}


@pytest.mark.parametrize("node", ["mixed1", "mixed2"])
def test_a_node_with_two_gpu_types_offers_only_the_gpus_of_its_main_model(node: str) -> None:
    info = nodes((DATA / "sinfo_two_gpu_types.txt").read_text())[node]
    assert (info.gpu_model, info.gpus, info.mig, info.state) == (A100, 4, False, "up")
    assert (info.cpus, info.memory_mb) == (8, 16000)


@pytest.mark.parametrize("node", ["mixed1", "mixed2"])
def test_the_node_says_which_gpus_gpuq_does_not_count(node: str) -> None:
    info = nodes((DATA / "sinfo_two_gpu_types.txt").read_text())[node]
    assert info.reason == (
        f"gpuq counts only its 4 {A100} GPUs (one GPU model per node): not gpu:v100:2"
    )


def test_a_tie_goes_to_the_type_listed_first() -> None:
    row = "n1|idle|gpu:v100:2,gpu:a100:2|gpu:v100:0(IDX:N/A),gpu:a100:0(IDX:N/A)||gpu|none\n"
    info = nodes(row)["n1"]
    assert (info.gpu_model, info.gpus) == ("v100", 2)
    assert info.reason.endswith(f"not gpu:a100:2 ({A100})")


def test_a_drained_node_keeps_slurms_reason_first() -> None:
    row = "n1|drained|gpu:a100:4,gpu:v100:2|gpu:a100:0(IDX:N/A)||gpu|maintenance | disk\n"
    info = nodes(row)["n1"]
    assert info.state == "drain"
    assert info.reason.startswith("maintenance | disk; gpuq counts only its 4 ")


def test_a_node_of_one_gpu_type_has_no_such_note() -> None:
    info = nodes("n1|idle|gpu:a100:4|gpu:a100:0(IDX:N/A)||gpu|none\n")["n1"]
    assert (info.gpu_model, info.gpus, info.reason) == (A100, 4, "")


@pytest.mark.parametrize("node", ["mixed1", "mixed2"])
def test_a_job_placed_on_it_asks_slurm_for_the_type_counted(node: str) -> None:
    login = FakeLogin((DATA / "sinfo_two_gpu_types.txt").read_text())
    settings = SlurmSettings.from_mapping(
        {"host": "login", "user": "slurmuser", "known_hosts": "x", "gres_map": GRES_MAP}
    )
    backend = SlurmBackend("hpc", settings, cast(SSHConnection, login))
    offered = {n.name: n for n in backend.nodes()}[node]
    job = request(
        gpus_per_node=offered.gpus,
        gpu_model=offered.gpu_model,
        placement=(AllocatedNode(node, gpus=tuple(range(offered.gpus))),),
    )

    backend.submit(job)

    (text,) = login.scripts
    assert re.findall(r"^#SBATCH --gres=(\S+)$", text, re.M) == ["gpu:a100:4"]
