"""A remote command that writes more to stderr than the SSH channel's window (paramiko's is
2 MiB) before it closes stdout is read to its end, not stalled: SSH shares one window between
the two streams, and stderr read only after stdout's end would stop the sender until the
command's timeout (and every retry of it would time out the same way).

On the lab's real sshd."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from queue_service.backends.slurm import SlurmBackend

from .conftest import lab_backend

pytestmark = pytest.mark.slurm


@pytest.fixture
def lab(slurm_lab: None) -> Iterator[SlurmBackend]:
    backend = lab_backend(command_timeout_s=20)
    yield backend
    backend.close()


@pytest.mark.parametrize(
    ("command", "out", "err"),
    [
        ("head -c 5000000 /dev/zero >&2; echo done", 5, 5_000_000),
        (
            "head -c 3000000 /dev/zero; head -c 3000000 /dev/zero >&2; echo done",
            3_000_005,
            3_000_000,
        ),
        ("head -c 3000000 /dev/zero >&2; head -c 3000000 /dev/zero; exit 3", 3_000_000, 3_000_000),
    ],
)
def test_both_streams_are_read_to_their_end_within_the_timeout(
    lab: SlurmBackend, command: str, out: int, err: int
) -> None:
    started = time.monotonic()
    result = lab.connection.run(command)
    assert (len(result.stdout), len(result.stderr)) == (out, err)
    assert result.rc == (3 if "exit 3" in command else 0)
    assert time.monotonic() - started < 10
    assert lab.connection.run("echo alive").stdout == "alive\n"
