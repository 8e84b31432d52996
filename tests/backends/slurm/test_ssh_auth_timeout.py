"""A login node slow to answer the key authentication is a timeout, which is transient, not a
refusal, which is permanent: paramiko reports a login that gets no answer within
`auth_timeout` (gpuq's connect_timeout_s) as an AuthenticationException("Authentication
timeout."). A loaded login node (its PAM, LDAP or NFS home slow to read authorized_keys) must
not fail every job dispatched meanwhile for good."""

from __future__ import annotations

import time

import paramiko
import pytest

from queue_service.backends.base import BackendError
from queue_service.backends.slurm.ssh import SSHConnection

from .sshd_fakes import LetsAnyoneIn, sshd


class _SlowToAuthenticate(LetsAnyoneIn):
    """Accepts gpuq's key, but only after longer than gpuq's connect timeout."""

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        time.sleep(2.5)
        return paramiko.AUTH_SUCCESSFUL


def test_a_login_that_times_out_during_authentication_is_transient() -> None:
    with sshd(_SlowToAuthenticate()) as pinned:
        ssh = SSHConnection(
            host=pinned.host,
            port=pinned.port,
            user="slurm",
            key=paramiko.RSAKey.generate(2048),
            known_hosts=pinned._known_hosts,
            connect_timeout_s=1.0,
            command_timeout_s=1.0,
        )
        try:
            with pytest.raises(BackendError) as raised:
                ssh.run("squeue --me")
        finally:
            ssh.close()
    assert not raised.value.permanent, (
        f"a login that timed out is reported as permanent: {raised.value.message!r}"
    )
