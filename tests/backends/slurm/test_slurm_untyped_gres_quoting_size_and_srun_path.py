"""What sbatch is handed is a job Slurm runs: GRES its node has, a size sbatch takes, an srun
the launch line finds.

No lab: the batch script is built by `script.render` (through `SlurmBackend.submit` where the
inventory matters, against a login node that answers sinfo and keeps what sbatch read), and
its launch line is run by the real bash with stand-ins for srun."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from typing import Any, cast

import pytest

from queue_service.backends.base import AllocatedNode, BackendError
from queue_service.backends.slurm import SlurmBackend, parsers, script
from queue_service.backends.slurm.backend import SlurmSettings
from queue_service.backends.slurm.ssh import SSHConnection

from .conftest import request
from .test_slurm_mig_gres_type_of_the_node import FakeLogin

A100 = "A100-SXM4-80GB"
WORKDIR = "/home/slurmuser/.gpuq/jobs"
# slurmctld's default max_script_size (slurm.conf SchedulerParameters): "4 megabytes".
SBATCH_MAX_SCRIPT_BYTES = 4 * 1024 * 1024


def gres_requested(text: str) -> list[str]:
    return re.findall(r"^#SBATCH --gres=(\S+)$", text, re.M)


# -- GRES: a job asks for GPUs its node has -------------------------------------------------

# sinfo rows (the backend's own format) of a node whose GPUs are untyped GRES, the most
# common gres.conf (`Name=gpu File=/dev/nvidia[0-3]`): `gpu:4(S:0)`, in use
# `gpu:(null):0(IDX:N/A)` as Slurm 21.08+ prints an untyped GRES.
UNTYPED = [
    pytest.param(
        "gpu5|idle|gpu:4(S:0)|gpu:(null):0(IDX:N/A)|(null)|gpu|none\n",
        {},
        id="no feature: the model is 'unknown'",
    ),
    pytest.param(
        "gpu5|idle|gpu:4(S:0)|gpu:(null):0(IDX:N/A)|a100|gpu|none\n",
        {A100: "a100"},
        id="the model comes from a feature gres_map knows",
    ),
]


@pytest.mark.parametrize(("sinfo", "gres_map"), UNTYPED)
def test_a_gpu_job_placed_on_a_node_of_untyped_gpus_asks_for_untyped_gpus(
    sinfo: str, gres_map: dict[str, str]
) -> None:
    """The cycle stores on an admitted job the model of the node it placed it on
    (snapshot.apply: `gpu_model=start.gpu_model`, "the model it actually runs on"), and
    dispatch hands that to the backend (`job.gpu_model or spec.get("gpu_model")`). On a node
    whose GPUs have no GRES type, the script must ask `gpu:N`: a type the `--nodelist` node
    lacks (`gpu:unknown:2`, `gpu:a100:2`) is a request Slurm refuses ("Invalid generic
    resource (gres) specification" / "Requested node configuration is not available"), so
    every GPU job of such a cluster fails at dispatch."""
    login = FakeLogin(sinfo)
    settings = SlurmSettings.from_mapping(
        {"host": "login", "user": "slurmuser", "known_hosts": "x", "gres_map": gres_map}
    )
    backend = SlurmBackend("hpc", settings, cast(SSHConnection, login))
    (node,) = backend.nodes()
    assert (node.name, node.gpus, node.mig) == ("gpu5", 4, False)

    backend.submit(
        request(gpus_per_node=2, gpu_model=node.gpu_model, placement=(AllocatedNode("gpu5"),))
    )

    (text,) = login.scripts
    assert gres_requested(text) == ["gpu:2"]


# The lab's typed nodes (`Gres=gpu:a100:4`, gres_map {A100: "a100"}), a site type gres_map
# does not name, and a placement over typed and untyped nodes (`gpu:N` fits both).
TYPED = [
    pytest.param(
        "gpu1|idle|gpu:a100:4(S:0)|gpu:a100:0(IDX:N/A)|a100|gpu|none\n",
        {A100: "a100"},
        ("gpu1",),
        "gpu:a100:2",
        id="the lab's typed node",
    ),
    pytest.param(
        "gpu7|idle|gpu:nvidia_a100:4(S:0)|gpu:nvidia_a100:0(IDX:N/A)|(null)|gpu|none\n",
        {},
        ("gpu7",),
        "gpu:nvidia_a100:2",
        id="an unmapped site type",
    ),
    pytest.param(
        "gpu1|idle|gpu:a100:4(S:0)|gpu:a100:0(IDX:N/A)|a100|gpu|none\n"
        "gpu5|idle|gpu:4(S:0)|gpu:(null):0(IDX:N/A)|a100|gpu|none\n",
        {A100: "a100"},
        ("gpu1", "gpu5"),
        "gpu:2",
        id="typed and untyped nodes",
    ),
]


@pytest.mark.parametrize(("sinfo", "gres_map", "placed", "gres"), TYPED)
def test_a_gpu_job_asks_for_the_gres_type_its_placed_nodes_have(
    sinfo: str, gres_map: dict[str, str], placed: tuple[str, ...], gres: str
) -> None:
    login = FakeLogin(sinfo)
    settings = SlurmSettings.from_mapping(
        {"host": "login", "user": "slurmuser", "known_hosts": "x", "gres_map": gres_map}
    )
    backend = SlurmBackend("hpc", settings, cast(SSHConnection, login))
    model = backend.nodes()[0].gpu_model
    placement = tuple(AllocatedNode(node) for node in placed)

    backend.submit(
        request(nodes=len(placed), gpus_per_node=2, gpu_model=model, placement=placement)
    )

    (text,) = login.scripts
    assert gres_requested(text) == [gres]


def test_the_inventory_names_each_nodes_type_of_its_whole_gpus() -> None:
    sinfo = (
        "g1|idle|gpu:a100:4|gpu:a100:0(IDX:N/A)|a100|gpu|none\n"
        "g5|idle|gpu:4(S:0)|gpu:(null):0(IDX:N/A)|a100|gpu|none\n"
        "gm|idle|gpu:1g.10gb:7|gpu:1g.10gb:0(IDX:N/A)|a100,mig|gpu|none\n"
    )
    assert parsers.gpu_gres_types(sinfo, {A100: "a100"}) == {
        "g1": {A100: "a100"},
        "g5": {},
        "gm": {},
    }


# -- size: what the spec accepts fits in what sbatch accepts ------------------------------


@pytest.mark.django_db
def test_a_command_the_spec_accepts_makes_a_batch_script_sbatch_accepts(teams: Any) -> None:
    """The spec bounds command + env at 1 MiB of UTF-8 so that the job can run; the script
    quotes each argument with shlex.quote, which writes every `'` as the five bytes `'"'"'`.
    A command of 16 arguments of 65,000 apostrophes (1,040,000 bytes: each argument, and all
    of them, within the spec's bounds) becomes a script of over 5 MB, which sbatch refuses
    (its 4 MB max_script_size): accepted with a 201, failed at dispatch."""
    from queue_service.jobs.spec import JobSpecSerializer
    from tests.conftest import spec

    command = ["printf", "%s\\n", *(["'" * 65000] * 16)]
    serializer = JobSpecSerializer(data=spec(command=command, gpus_per_node=0))
    assert serializer.is_valid(), serializer.errors

    text = script.render(request(command=tuple(command)), script.ScriptOptions(), WORKDIR)

    size = len(text.encode())
    assert size <= SBATCH_MAX_SCRIPT_BYTES, f"a batch script of {size:,} bytes"


def test_a_batch_script_over_sbatchs_size_limit_is_a_permanent_error_at_render() -> None:
    """A control character is quoted as four bytes (`\\x01`): past sbatch's limit, the job fails
    with a reason, not with sbatch's refusal."""
    job = request(command=("printf", "\x01" * (SBATCH_MAX_SCRIPT_BYTES // 4)))
    with pytest.raises(BackendError, match="max_script_size") as raised:
        script.render(job, script.ScriptOptions(), WORKDIR)
    assert raised.value.permanent


# -- the launch line: gpuq's own launcher is found whatever env the job sets ---------------


def run_launch_line(line: str, bin_dir: str) -> subprocess.CompletedProcess[str]:
    """The batch step's last line under the real bash, with the site's PATH holding srun."""
    return subprocess.run(
        ["bash", "-c", line],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_path_the_job_sets_for_its_container_does_not_hide_srun_from_the_launch_line() -> None:
    """An image job's env is for the container (`--container-env` keeps it over the image's
    ENV): a user sets PATH to the directories of their image. The launch line is
    `exec env -- PATH=<theirs> srun --container-image=…`, so `env` looks srun up in the
    user's PATH, not the site's: where srun is not in it (Slurm under /opt/slurm/bin, as
    here), the job ends at once with `env: 'srun': No such file or directory` (exit 127)."""
    job = request(
        image="nvcr.io/nvidia/pytorch:24.01-py3",
        env={"PATH": "/opt/conda/bin:/usr/local/sbin:/usr/local/bin"},
        command=("/bin/echo", "ran"),
    )
    line = script.launch(job, script.ScriptOptions())
    with tempfile.TemporaryDirectory() as bin_dir:
        # The site's srun (its own PATH, /opt/slurm/bin here); it runs the step in place.
        with open(f"{bin_dir}/srun", "w") as handle:
            handle.write('#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift; done\nexec "$@"\n')
        os.chmod(f"{bin_dir}/srun", 0o700)
        done = run_launch_line(line, bin_dir)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ran\n", "")
