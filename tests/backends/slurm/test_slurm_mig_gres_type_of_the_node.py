"""A MIG slice is requested by the GRES type its node has. Slurm's MIG GRES types are the
site's ("a substring of the profile string slurmd logs", specs/mig.md: `a100_1g.10gb`, and
`h100_1g.10gb` beside it on another model's nodes); the inventory offers such slices as the
profile (`1g.10gb`, what the scheduler matches a job's mig_profile against), and the batch
script asks `--gres=gpu:<that node's type>:1`, whatever type gres_map gives the profile: any
other type is one the `--nodelist` node lacks, and Slurm refuses the job or keeps it waiting.
The backend knows each node's types from its inventory (`nodes()`), and reads it when this
process has not yet."""

from __future__ import annotations

import re
from typing import cast

import pytest

from queue_service.backends.base import AllocatedNode
from queue_service.backends.slurm import SlurmBackend, parsers
from queue_service.backends.slurm.backend import SlurmSettings
from queue_service.backends.slurm.ssh import Result, SSHConnection

from .conftest import request

A100 = "A100-SXM4-80GB"
H100 = "H100-SXM5-80GB"


class FakeLogin:
    """A login node whose sinfo prints `sinfo` and whose sbatch keeps the script."""

    def __init__(self, sinfo: str) -> None:
        self.sinfo = sinfo
        self.scripts: list[str] = []
        self.where = "slurmuser@fake:22"

    def home(self) -> str:
        return "/home/slurmuser"

    def make_dir(self, path: str) -> bool:
        return True

    def chmod(self, path: str, mode: int) -> bool:
        return True

    def close(self) -> None:
        pass

    def run(self, command: str, stdin: bytes | None = None) -> Result:
        if command.startswith("sinfo"):
            resources = parsers.SINFO_RESOURCES_FORMAT in command
            return Result(0, "" if resources else self.sinfo, "")
        assert command.startswith("sbatch"), command
        self.scripts.append((stdin or b"").decode())
        return Result(0, "4242\n", "")


CASES = [
    # An unmapped site type: unmapped names "keep their own name".
    (
        "gpu9|idle|gpu:a100_1g.10gb:7|gpu:a100_1g.10gb:0(IDX:N/A)|a100,mig|gpu|none\n",
        {A100: "a100"},
        "gpu9",
        "a100_1g.10gb",
    ),
    # A100 and H100 MIG nodes: one profile, two site types, and gres_map names one of them.
    (
        "ga|idle|gpu:a100_1g.10gb:7|gpu:a100_1g.10gb:0(IDX:N/A)|a100,mig|gpu|none\n"
        "gh|idle|gpu:h100_1g.10gb:7|gpu:h100_1g.10gb:0(IDX:N/A)|h100,mig|gpu|none\n",
        {A100: "a100", H100: "h100", "1g.10gb": "a100_1g.10gb"},
        "gh",
        "h100_1g.10gb",
    ),
]


@pytest.mark.parametrize("inventory_read_first", [True, False], ids=["after nodes()", "fresh"])
@pytest.mark.parametrize(("sinfo", "gres_map", "node", "gres_type"), CASES)
def test_a_mig_slice_is_requested_by_its_nodes_own_gres_type(
    sinfo: str, gres_map: dict[str, str], node: str, gres_type: str, inventory_read_first: bool
) -> None:
    login = FakeLogin(sinfo)
    settings = SlurmSettings.from_mapping(
        {"host": "login", "user": "slurmuser", "known_hosts": "x", "gres_map": gres_map}
    )
    backend = SlurmBackend("hpc", settings, cast(SSHConnection, login))
    if inventory_read_first:
        offered = {n.name: n for n in backend.nodes()}[node]
        assert offered.mig and {m.profile for m in offered.mig_instances} == {"1g.10gb"}
    job = request(
        mig_profile="1g.10gb",
        placement=(AllocatedNode(node, mig_gpu=0, mig_profile="1g.10gb", mig_start=0),),
    )

    backend.submit(job)

    (text,) = login.scripts
    assert re.findall(r"^#SBATCH --gres=(\S+)$", text, re.M) == [f"gpu:{gres_type}:1"]
    assert f"#SBATCH --nodelist={node}\n" in text


def test_the_inventory_names_each_nodes_type_of_each_mig_profile() -> None:
    sinfo = (
        "gh|idle|gpu:h100_3g.40gb:2,gpu:h100_1g.10gb:1|gpu:h100_3g.40gb:0(IDX:N/A)|h100|gpu|none\n"
        "g1|idle|gpu:a100:4|gpu:a100:0(IDX:N/A)|a100|gpu|none\n"
    )
    assert parsers.mig_gres_types(sinfo, {H100: "h100"}) == {
        "gh": {"3g.40gb": "h100_3g.40gb", "1g.10gb": "h100_1g.10gb"},
        "g1": {},
    }
