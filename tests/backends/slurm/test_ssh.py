"""The SSH settings of a Slurm cluster: a host key line damaged on its way into the settings
(cut short when pasted) is a permanent error that says which line, never a raw paramiko
exception that leaves a job dispatching with no word (docs/slurm.md).

After a failed connect, calls fail fast until the reconnect backoff ends, with the error that
started it, as permanent as it was. Before: always transient, so a job submitted right after a
sync whose login was refused was retried for ever, while the same refusal outside the backoff
failed it."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import paramiko
import pytest

from queue_service.backends.base import BackendError
from queue_service.backends.slurm.ssh import SSHConnection, parse_known_hosts

from .sshd_fakes import LetsAnyoneIn, sshd

GOOD = (
    "[127.0.0.1]:2222 ssh-ed25519 "
    "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
)
DAMAGED = [
    pytest.param(GOOD[:-10], id="cut short: bad base64 (InvalidHostKey)"),
    pytest.param("login ssh-ed25519 AAAAC3NzaC1lZDI1NTE5", id="ed25519 without its key"),
    pytest.param("login ssh-rsa AAAAB3NzaC1yc2E=", id="rsa without n and e"),
    pytest.param(
        "login ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTY=", id="ecdsa without its key"
    ),
]


def test_a_well_formed_known_hosts_line_pins_its_host() -> None:
    keys = parse_known_hosts(f"# the login node\n{GOOD}\n")
    assert keys.lookup("[127.0.0.1]:2222") is not None


@pytest.mark.parametrize("line", DAMAGED)
def test_a_damaged_known_hosts_line_is_a_permanent_error_naming_its_line(line: str) -> None:
    with pytest.raises(BackendError, match="known_hosts line 2 is not a host key") as raised:
        parse_known_hosts(f"{GOOD}\n{line}\n")
    assert raised.value.permanent


@pytest.mark.django_db
def test_a_job_for_a_cluster_with_a_damaged_host_key_fails_with_why(people: Any) -> None:
    """Through the real backend registry and slurm.create(): the job fails with the message,
    rather than staying dispatching with none."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from queue_service.clusters.models import Cluster
    from queue_service.jobs.dispatch import dispatch_job
    from queue_service.jobs.models import Job
    from queue_service.jobs.services import submit_job
    from tests.conftest import spec

    key = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    cluster = Cluster.objects.create(
        name="slurm",
        kind="slurm",
        settings={
            "host": "127.0.0.1",
            "port": 2222,
            "user": "slurmuser",
            "private_key": key.decode(),
            "known_hosts": GOOD[:-10],
        },
    )
    job = submit_job(people["alice"], spec(cluster=cluster.name)).job
    Job.objects.filter(pk=job.pk).update(state=Job.State.ADMITTED, cluster=cluster)

    dispatch_job(str(job.pk))

    job.refresh_from_db()
    assert job.state == Job.State.FAILED
    assert job.reason["message"] == "known_hosts line 1 is not a host key"


class _Stalling(LetsAnyoneIn):
    """An sshd that lets the client in and open a channel, then never answers its request
    (a login node under heavy load, or a hung PAM session hook)."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        self.release.wait(30)
        return False

    def check_channel_subsystem_request(self, channel: paramiko.Channel, name: str) -> bool:
        self.release.wait(30)
        return False


@pytest.fixture
def stalling_sshd() -> Iterator[SSHConnection]:
    release = threading.Event()
    with sshd(_Stalling(release)) as connection:
        yield connection
        release.set()


def test_a_command_the_login_node_never_answers_times_out(stalling_sshd: SSHConnection) -> None:
    started = time.monotonic()
    with pytest.raises(BackendError, match="timed out after 1s"):
        stalling_sshd.run("squeue --me")
    assert time.monotonic() - started < 10


def test_a_file_read_the_login_node_never_answers_times_out(stalling_sshd: SSHConnection) -> None:
    started = time.monotonic()
    with pytest.raises(BackendError, match="timed out"):
        stalling_sshd.read_file("/tmp/job.out", 0, 100)
    assert time.monotonic() - started < 10


class _RefusesEveryKey(LetsAnyoneIn):
    """An sshd where gpuq's key is not (or no longer) authorised."""

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_FAILED


# (the sshd, the key pinned in its place, the name it is pinned under, what the connect says)
PERMANENT_CONNECT_ERRORS = [
    pytest.param(
        _RefusesEveryKey(), None, None, "SSH authentication as slurm on 127.0.0.1", id="login"
    ),
    pytest.param(
        LetsAnyoneIn(), paramiko.ECDSAKey.generate(), None, "host key of 127.0.0.1:", id="key"
    ),
    pytest.param(LetsAnyoneIn(), None, "login.example.org", "no pinned host key", id="unpinned"),
]


@pytest.mark.parametrize(("server", "pinned_key", "pinned_as", "words"), PERMANENT_CONNECT_ERRORS)
def test_calls_inside_the_backoff_fail_with_the_permanent_error_that_started_it(
    server: paramiko.ServerInterface,
    pinned_key: paramiko.PKey | None,
    pinned_as: str | None,
    words: str,
) -> None:
    now = [0.0]
    with sshd(server, pinned_key=pinned_key, pinned_as=pinned_as, clock=lambda: now[0]) as ssh:
        with pytest.raises(BackendError, match=words) as refused:
            ssh.run("squeue --me")
        assert refused.value.permanent
        now[0] += 0.1  # within the first wait (0.5 s)
        with pytest.raises(BackendError) as waiting:
            ssh.run("squeue --me")
        assert (waiting.value.message, waiting.value.permanent) == (refused.value.message, True)
        now[0] += 60  # the backoff is over: it tries again, and is refused again
        with pytest.raises(BackendError, match=words) as again:
            ssh.run("squeue --me")
        assert again.value.permanent


def test_calls_inside_the_backoff_after_an_unreachable_login_node_fail_fast_as_transient() -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    pinned = paramiko.ECDSAKey.generate()
    known = paramiko.HostKeys()
    known.add(f"[127.0.0.1]:{port}", pinned.get_name(), pinned)
    ssh = SSHConnection(
        host="127.0.0.1",
        port=port,
        user="slurm",
        key=paramiko.ECDSAKey.generate(),
        known_hosts=known,
        clock=lambda: 0.0,
    )
    with pytest.raises(BackendError, match=r"SSH to slurm@127\.0\.0\.1") as refused:
        ssh.run("squeue --me")
    with pytest.raises(
        BackendError, match=r"unavailable \(.*\); next attempt in at most 30s"
    ) as waiting:
        ssh.run("squeue --me")
    assert (refused.value.permanent, waiting.value.permanent) == (False, False)
    assert refused.value.message in waiting.value.message
