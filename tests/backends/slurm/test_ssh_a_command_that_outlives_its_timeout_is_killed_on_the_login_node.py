"""A remote command that outlives its timeout is killed on the login node, not only closed on:
sshd leaves a command whose channel closes running (no pty, no SIGHUP). Left running, every
timed-out call of a hung `squeue` would add a process on the login node at each sync, and an
`sbatch` that timed out could still make its job after the retry's look-up found none: two
Slurm jobs for one attempt. gpuq runs each command under `timeout -s KILL <its timeout>`
there, which ends it and what it started even when the connection is gone.

On the lab's real sshd, which runs on this host: the command's process is looked for here."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

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
        # Processes the command's shell started: a KILL of the shell alone leaves them.
        "sleep {n} | cat",
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


def sshd_of(pid: int) -> int:
    """The sshd process of the session that started `pid` (its nearest `sshd:` ancestor)."""
    while pid > 1:
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sshd:"):
            return pid
    raise AssertionError("no sshd among its ancestors")


def test_a_command_whose_connection_drops_is_still_killed_at_its_timeout(
    slurm_lab: None,
) -> None:
    """The connection is gone (its sshd session process killed, as after a network partition
    once sshd gives up on the client): no request can reach sshd any more, and sshd leaves
    the command running. The command's own deadline on the login node still ends it."""
    lab = lab_backend(command_timeout_s=3)
    n = f"{300 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 1000:03d}"
    pattern = n.replace(".", r"\.")
    ended: list[object] = []

    def run() -> None:
        try:
            ended.append(lab.connection.run(f"sleep {n}").rc)
        except BackendError as exc:
            ended.append(exc.permanent)

    caller = threading.Thread(target=run)
    caller.start()
    try:
        found = b""
        while not found and caller.is_alive():
            found = subprocess.run(
                ["pgrep", "-x", "-f", f"sleep {pattern}"], capture_output=True, check=False
            ).stdout
        (pid,) = map(int, found.split())
        os.kill(sshd_of(pid), signal.SIGKILL)
        caller.join(10)
        # No exit status (-1, as sbatch's that the retry adopts), or a transient error.
        assert ended in ([-1], [False])
        assert not still_running(pattern, within_s=3 + 3)
    finally:
        caller.join(10)
        lab.close()
        for leftover in subprocess.run(
            ["pgrep", "-f", pattern], capture_output=True, check=False
        ).stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(leftover), signal.SIGKILL)
