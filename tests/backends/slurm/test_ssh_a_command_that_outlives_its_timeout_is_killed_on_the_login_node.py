"""A remote command that outlives its timeout is killed on the login node, not only closed on:
sshd leaves a command whose channel closes running (no pty, no SIGHUP). Left running, every
timed-out call of a hung `squeue` would add a process on the login node at each sync, and an
`sbatch` that timed out could still make its job after the retry's look-up found none: two
Slurm jobs for one attempt. gpuq asks sshd for a KILL (RFC 4254's "signal" request).

On the lab's real sshd, which runs on this host: the command's process is looked for here."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest

from queue_service.backends.base import BackendError
from queue_service.backends.slurm import SlurmBackend

from .conftest import lab_backend

pytestmark = pytest.mark.slurm


@pytest.fixture
def lab(slurm_lab: None) -> Iterator[SlurmBackend]:
    backend = lab_backend(command_timeout_s=1)
    yield backend
    backend.close()


def still_running(pattern: str, within_s: float = 3.0) -> bool:
    deadline = time.monotonic() + within_s
    while True:
        found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, check=False)
        if found.returncode != 0:
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.1)


@pytest.mark.parametrize(
    "command",
    [
        "sleep {n}",  # silent: the watchdog's timeout
        # Talkative (the reads' deadline), and deaf to the SIGPIPE of its closed channel.
        "trap '' PIPE; while :; do echo x 2>/dev/null; sleep 0.01; done; : {n}",
    ],
)
def test_a_command_that_outlives_its_timeout_is_killed(lab: SlurmBackend, command: str) -> None:
    n = f"{300 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 1000:03d}"
    with pytest.raises(BackendError, match="timed out after 1s") as raised:
        lab.connection.run(command.format(n=n))
    assert not raised.value.permanent
    pattern = n.replace(".", r"\.")
    try:
        assert not still_running(pattern)
    finally:
        subprocess.run(["pkill", "-f", pattern], check=False)
    assert lab.connection.run("echo alive").stdout == "alive\n"
