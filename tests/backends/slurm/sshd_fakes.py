"""In-process sshd fakes: a paramiko server that misbehaves the way a loaded login node can,
and a real SSHConnection to it (no Slurm lab needed)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import paramiko

from queue_service.backends.slurm.ssh import SSHConnection


class LetsAnyoneIn(paramiko.ServerInterface):
    """An sshd that accepts any public key and opens any channel; a subclass says what it
    then does (or fails to do) with the client's requests."""

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED


@contextlib.contextmanager
def sshd(server: paramiko.ServerInterface) -> Iterator[SSHConnection]:
    """An in-process sshd that behaves as `server` says, and a connection to it with its host
    key pinned and a command timeout of 1 s."""
    host_key = paramiko.RSAKey.generate(2048)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    transports: list[paramiko.Transport] = []

    def serve() -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            transport = paramiko.Transport(sock)
            transport.add_server_key(host_key)
            transport.start_server(server=server)
            transports.append(transport)

    threading.Thread(target=serve, daemon=True).start()
    known = paramiko.HostKeys()
    known.add(f"[127.0.0.1]:{port}", host_key.get_name(), host_key)
    connection = SSHConnection(
        host="127.0.0.1",
        port=port,
        user="slurm",
        key=paramiko.RSAKey.generate(2048),
        known_hosts=known,
        command_timeout_s=1.0,
    )
    try:
        yield connection
    finally:
        connection.close()
        listener.close()
        for transport in transports:
            transport.close()
