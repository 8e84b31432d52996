"""In-process sshd fakes: a paramiko server that misbehaves the way a loaded login node can,
or answers commands with what the lab's Slurm printed, and a real SSHConnection to it (no
Slurm lab needed)."""

from __future__ import annotations

import contextlib
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping

import paramiko

from queue_service.backends.slurm import commands
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
def sshd(
    server: paramiko.ServerInterface,
    *,
    pinned_key: paramiko.PKey | None = None,
    pinned_as: str | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[SSHConnection]:
    """An in-process sshd that behaves as `server` says, and a connection to it with its host
    key pinned and a command timeout of 1 s. `pinned_key` pins another key in its place (as
    after a key change), `pinned_as` pins it under another name than `[127.0.0.1]:<port>`;
    `clock` paces the connection's reconnect backoff."""
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
            transports.append(transport)
            # A client that refuses the host key hangs up during the handshake (a reset
            # when its socket closes before ours has read).
            with contextlib.suppress(paramiko.SSHException, EOFError, ConnectionResetError):
                transport.start_server(server=server)

    threading.Thread(target=serve, daemon=True).start()
    known = paramiko.HostKeys()
    pinned = pinned_key or host_key
    known.add(pinned_as or f"[127.0.0.1]:{port}", pinned.get_name(), pinned)
    connection = SSHConnection(
        host="127.0.0.1",
        port=port,
        user="slurm",
        key=paramiko.RSAKey.generate(2048),
        known_hosts=known,
        command_timeout_s=1.0,
        clock=clock,
    )
    try:
        yield connection
    finally:
        connection.close()
        listener.close()
        for transport in transports:
            transport.close()


def given(remote: str) -> str:
    """The command a client gave, out of the `timeout -s KILL <s> sh -c <command>` its
    connection runs it under (`ssh.remote_command`)."""
    words = shlex.split(remote)
    assert words[:3] == ["timeout", "-s", "KILL"] and words[4:6] == ["sh", "-c"], remote
    (command,) = words[6:]
    return command


class LoginNode(LetsAnyoneIn):
    """An sshd that answers each command by its first word (`squeue`, `sacct`; `squeue
    WorkDir` for the squeue that asks only jobs' directories, if given) with (stdout, stderr, exit
    status), as a login node's Slurm would: tests give it what the real commands printed
    (data/). It records the commands it was sent."""

    def __init__(self, answers: Mapping[str, tuple[str, str, int]]) -> None:
        self.answers = dict(answers)
        self.commands: list[str] = []

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        text = given(command.decode())
        self.commands.append(text)
        word = text.split(" ", 1)[0]
        stdout, stderr, rc = self.answers.get(
            f"{word} WorkDir" if commands.WORKDIR_FORMAT in text else word, self.answers[word]
        )

        def answer() -> None:
            # Once the client has sent its stdin and EOF, which it does only after the exec
            # request was answered: a close before that answer fails the exec itself.
            while channel.recv(65536):
                pass
            channel.sendall(stdout.encode())
            channel.sendall_stderr(stderr.encode())
            channel.send_exit_status(rc)
            channel.close()

        threading.Thread(target=answer, daemon=True).start()
        return True
