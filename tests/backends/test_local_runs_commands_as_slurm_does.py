"""The local backend runs a job's command and env as the Slurm backend does (and a shell
would): the same job file means the same program, arguments and environment on the embedded
default as on a real cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_service.backends.base import AllocatedNode, RemoteState
from queue_service.backends.local import LocalBackend
from tests.backends.test_local import (
    _config,
    finished,
    kill_everything_under,
    read_all,
    request,
    wait_for,
)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    """The local backend of tests/backends/test_local.py (nodes n1, n2 of 4 GPUs, m1 MIG)."""
    yield LocalBackend(_config(tmp_path))
    kill_everything_under(tmp_path)


@pytest.mark.parametrize("by", ["path", "name on PATH"])
def test_an_executable_script_without_a_shebang_is_run_by_sh(
    backend: LocalBackend, tmp_path: Path, by: str
) -> None:
    """An executable file the kernel cannot run (a script with no `#!` line: ENOEXEC) is run
    by /bin/sh with its arguments, as shells, execvp(3) and Slurm's batch script run it;
    named without a "/", it is the file found on the job's PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "train.sh"
    script.write_text('echo "epochs=$2"\n')
    script.chmod(0o755)
    if by == "path":
        job = request([str(script), "--epochs", "3"])
    else:
        job = request(["train.sh", "--epochs", "3"], env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    eid = backend.submit(job).external_id
    status = wait_for(backend, eid, finished)
    assert (status.state, status.exit_code, status.reason) == (RemoteState.SUCCEEDED, 0, "")
    assert read_all(backend, eid) == "epochs=3\n"


def test_a_command_string_starting_with_a_dash_is_the_command_not_sh_options(
    backend: LocalBackend,
) -> None:
    """A command string is the script `sh -c --` runs: one starting with "-" is not read as
    options of /bin/sh."""
    eid = backend.submit(request("-v 2>/dev/null; echo ran")).external_id
    status = wait_for(backend, eid, finished)
    assert (status.state, read_all(backend, eid)) == (RemoteState.SUCCEEDED, "ran\n")


RENDEZVOUS = [
    # (name, the job's env value, what gpuq gives each rank of a 2-node gang otherwise)
    ("MASTER_PORT", "29555", None),  # a free port gpuq picks
    ("MASTER_ADDR", "10.0.0.7", ("127.0.0.1", "127.0.0.1")),
    ("NNODES", "8", ("2", "2")),
    ("NODE_RANK", "5", ("0", "1")),
]


@pytest.mark.parametrize(("name", "given", "default"), RENDEZVOUS)
def test_the_rendezvous_variables_the_job_sets_in_its_env_reach_it(
    backend: LocalBackend, name: str, given: str, default: Any
) -> None:
    """gpuq's rendezvous variables are defaults: a value the job's env gives (the spec lets
    these names through) reaches every rank, as on Slurm, whose user env is applied last."""
    placement = (AllocatedNode("n1", (0,)), AllocatedNode("n2", (1,)))
    outputs = []
    for env in ({name: given}, {}):
        # Each rank's line (both in the attempt's one stdout), by rank.
        job = request(f"echo $GPUQ_NODE_RANK ${name}", nodes=2, placement=placement, env=env)
        eid = backend.submit(job).external_id
        wait_for(backend, eid, finished)
        lines = sorted(read_all(backend, eid).splitlines())
        outputs.append(tuple(line.split(" ", 1)[1] for line in lines))
    assert outputs[0] == (given, given)
    ours = outputs[1]
    if default is None:
        assert ours[0] == ours[1] and ours[0].isdigit()
    else:
        assert ours == default
