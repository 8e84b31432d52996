"""One persistent, pinned SSH connection to a login node (paramiko).

- The host key is pinned: only the configured known_hosts line(s) are trusted (RejectPolicy);
  a different or missing key is a permanent error. No agent, no ~/.ssh keys are consulted.
- TCP_NODELAY: without it every command costs >= 40 ms (Nagle against delayed ACKs).
- Each command gets its own channel from `transport.open_session()`, closed in `finally`:
  `SSHClient.exec_command`'s file objects can send EOF on a freed channel id from `__del__`
  and kill a transport shared by threads (paramiko#1705).
- A lost connection is reopened on the next call; after failures, attempts are spaced by an
  exponential backoff and calls inside the wait fail fast, as the failure that started it: a
  permanent one (login refused, host key changed or not pinned) with its own words, still
  permanent; a transient one (refused, unreachable, timed out) saying the connection is
  unavailable, still transient.
- A command that outlives its timeout is killed on the login node, not only closed on
  (sshd leaves it running): it runs under coreutils `timeout -s KILL` with the call's own
  timeout (`remote_command`), which needs no request over a connection that may be gone.
  stderr is read while stdout is, as the two share one window.
- The private key lives only in a paramiko key object; it is never in a repr, log or error.
"""

from __future__ import annotations

import contextlib
import io
import logging
import posixpath
import shlex
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import paramiko
from paramiko.hostkeys import HostKeyEntry, InvalidHostKey

from queue_service.backends.base import BackendError

log = logging.getLogger(__name__)
T = TypeVar("T")

# How often a command's wait for stdout stops to read what came on stderr (`_drain`).
STDERR_POLL_S = 0.1

_KEY_TYPES: tuple[type[paramiko.PKey], ...] = (
    paramiko.Ed25519Key,
    paramiko.ECDSAKey,
    paramiko.RSAKey,
)


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: str
    stderr: str


def load_private_key(text: str) -> paramiko.PKey:
    """A key object from PEM/OpenSSH text; errors never quote the text."""
    for key_type in _KEY_TYPES:
        try:
            return key_type.from_private_key(io.StringIO(text))
        except (paramiko.SSHException, ValueError):
            continue
    raise BackendError(
        "the private key could not be read (not an unencrypted Ed25519, ECDSA or RSA key)",
        permanent=True,
    )


def parse_known_hosts(text: str) -> paramiko.HostKeys:
    keys = paramiko.HostKeys()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            entry = HostKeyEntry.from_line(line, number)
        except (InvalidHostKey, paramiko.SSHException, ValueError):  # a key cut short
            entry = None
        if entry is None:
            raise BackendError(f"known_hosts line {number} is not a host key", permanent=True)
        for host in entry.hostnames:
            keys.add(host, entry.key.get_name(), entry.key)
    if not keys:
        raise BackendError("known_hosts is empty: pin the login node's host key", permanent=True)
    return keys


def remote_command(command: str, timeout_s: float) -> str:
    """`command` as the login node runs it: killed with its process group once it outlives
    `timeout_s`. sshd leaves a command whose channel closes running (no pty, no SIGHUP), and
    a dropped connection takes any request to stop it along; an sbatch left behind could
    make its job after a retry's look-up found none. The deadline is the call's own (the
    remote one starts later, so the call gives up first), in milliseconds at the least:
    `timeout 0` would never fire."""
    seconds = f"{max(timeout_s, 0.001):.3f}".rstrip("0").rstrip(".")
    return f"timeout -s KILL {seconds} sh -c {shlex.quote(command)}"


class _Watchdog:
    """Closes a channel that outlives its timeout. paramiko waits for the server's reply to
    an exec or subsystem request with no timeout at all (`Channel._wait_for_event`); closing
    the channel is the public way to wake that wait, which then raises SSHException."""

    def __init__(self, channel: paramiko.Channel, timeout_s: float) -> None:
        self.fired = False
        self._channel = channel
        self._timer = threading.Timer(timeout_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        # The call may have timed out by itself and dropped the transport meanwhile: then
        # there is nothing left to wake.
        with contextlib.suppress(paramiko.SSHException, OSError, EOFError):
            self._channel.close()

    def cancel(self) -> None:
        self._timer.cancel()


class SSHConnection:
    def __init__(
        self,
        *,
        host: str,
        port: int,
        user: str,
        key: paramiko.PKey,
        known_hosts: paramiko.HostKeys,
        connect_timeout_s: float = 10.0,
        command_timeout_s: float = 60.0,
        keepalive_s: int = 15,
        backoff_s: tuple[float, float] = (0.5, 30.0),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.host, self.port, self.user = host, port, user
        self._key = key
        self._known_hosts = known_hosts
        self.connect_timeout_s = connect_timeout_s
        self.command_timeout_s = command_timeout_s
        self._keepalive_s = keepalive_s
        self._backoff_s = backoff_s
        self._clock = clock
        self._lock = threading.Lock()
        self._sftp_lock = threading.Lock()
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._failures = 0
        self._next_attempt = 0.0
        # The failed connect that started the backoff: its message and permanence.
        self._last_error = BackendError("")
        # Remote round trips started (commands and SFTP operations), for benchmarks.
        self.calls = 0

    def __repr__(self) -> str:
        return f"SSHConnection({self.user}@{self.host}:{self.port})"

    @property
    def where(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    def _connect(self) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        host_keys = client.get_host_keys()
        for name, entry in self._known_hosts.items():
            for key_type, key in entry.items():
                host_keys.add(name, key_type, key)
        sock = None
        try:
            sock = socket.create_connection((self.host, self.port), self.connect_timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            client.connect(
                self.host,
                self.port,
                username=self.user,
                pkey=self._key,
                sock=sock,
                timeout=self.connect_timeout_s,
                banner_timeout=self.connect_timeout_s,
                auth_timeout=self.connect_timeout_s,
                channel_timeout=self.connect_timeout_s,
                allow_agent=False,
                look_for_keys=False,
            )
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise BackendError(
                f"the host key of {self.host}:{self.port} changed: it offers a "
                f"{exc.key.get_name()} key {exc.key.fingerprint}, not the pinned one; "
                "refusing to connect",
                permanent=True,
            ) from None
        except paramiko.AuthenticationException as exc:
            client.close()
            if "timeout" in str(exc).lower():  # no answer within auth_timeout: a slow login
                raise BackendError(
                    f"SSH authentication as {self.user} on {self.host}:{self.port} got no"
                    f" answer within {self.connect_timeout_s:g} s"
                ) from None
            raise BackendError(
                f"SSH authentication as {self.user} on {self.host}:{self.port} failed",
                permanent=True,
            ) from None
        except paramiko.SSHException as exc:
            client.close()
            if "known_hosts" in str(exc):
                raise BackendError(
                    f"no pinned host key for {self.host}:{self.port} in known_hosts; "
                    "refusing to connect",
                    permanent=True,
                ) from None
            raise BackendError(f"SSH to {self.where} failed: {exc}") from None
        except (OSError, EOFError) as exc:
            # NoValidConnectionsError (refused) and timeouts are OSErrors.
            if sock is not None:
                sock.close()
            client.close()
            raise BackendError(f"SSH to {self.where} failed: {exc}") from None
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(self._keepalive_s)
        return client

    def _transport(self) -> paramiko.Transport:
        with self._lock:
            client = self._client
            transport = client.get_transport() if client is not None else None
            if transport is not None and transport.is_active():
                return transport
            self._drop()
            now = self._clock()
            if now < self._next_attempt:
                # The same words until the backoff ends (a note repeated is counted on one
                # event of a job's timeline); the wait left, which differs every time, is logged.
                log.debug("SSH to %s: next attempt in %.1fs", self.where, self._next_attempt - now)
                last = self._last_error
                if last.permanent:
                    # What refused gpuq (its key, the host key) still does: a call now fails
                    # as one that made the attempt itself would, not as one to retry.
                    raise BackendError(last.message, permanent=True)
                raise BackendError(
                    f"SSH to {self.where} is unavailable ({last.message}); "
                    f"next attempt in at most {self._backoff_s[1]:g}s"
                )
            try:
                self._client = self._connect()
            except BackendError as exc:
                self._failures += 1
                low, high = self._backoff_s
                self._next_attempt = now + min(high, low * 2 ** (self._failures - 1))
                self._last_error = BackendError(exc.message, permanent=exc.permanent)
                raise
            self._failures = 0
            transport = self._client.get_transport()
            assert transport is not None
            log.info("connected to %s", self.where)
            return transport

    def _drop(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def close(self) -> None:
        with self._lock:
            self._drop()

    def run(
        self, command: str, *, stdin: bytes | None = None, timeout_s: float | None = None
    ) -> Result:
        """Run a command; the result whatever its exit status. Raises BackendError when the
        connection fails (transient, unless the login node refuses gpuq: its key, its host
        key) or the command outlives its timeout (transient)."""
        timeout = timeout_s if timeout_s is not None else self.command_timeout_s
        what = command.split(" ", 1)[0]
        self.calls += 1
        channel = self._open_channel()
        deadline = time.monotonic() + timeout
        watchdog = _Watchdog(channel, timeout)
        try:
            channel.settimeout(timeout)
            channel.exec_command(remote_command(command, timeout))
            if stdin:
                channel.sendall(stdin)
            channel.shutdown_write()
            stdout, stderr = self._drain(channel, deadline)
            if not channel.status_event.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError
            return Result(
                channel.recv_exit_status(),
                stdout.decode(errors="replace"),
                stderr.decode(errors="replace"),
            )
        except TimeoutError:
            raise BackendError(f"{what} on {self.where} timed out after {timeout:g}s") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            if watchdog.fired:
                raise BackendError(f"{what} on {self.where} timed out after {timeout:g}s") from None
            self.close()
            raise BackendError(f"{what} on {self.where} failed: {exc}") from None
        finally:
            watchdog.cancel()
            channel.close()

    def _open_channel(self) -> paramiko.Channel:
        """A new session channel. A transport that died unnoticed (its sshd process gone)
        fails here, before any command ran, so one reconnect and retry is safe."""
        for attempt in (1, 2):
            transport = self._transport()
            try:
                return transport.open_session(timeout=self.connect_timeout_s)
            except (paramiko.SSHException, OSError, EOFError) as exc:
                self.close()
                if attempt == 2:
                    raise BackendError(
                        f"SSH to {self.where}: cannot open a channel: {exc}"
                    ) from None
        raise AssertionError("unreachable")

    @staticmethod
    def _drain(channel: paramiko.Channel, deadline: float) -> tuple[bytes, bytes]:
        """stdout to its end, and stderr as it comes meanwhile: the two streams share the
        channel's window, so stderr left unread (over 2 MiB of it) would stop the command
        until its timeout. A wait for stdout wakes at its data or end at once, and every
        STDERR_POLL_S to read stderr."""
        out: list[bytes] = []
        err: list[bytes] = []
        while True:
            while channel.recv_stderr_ready():
                err.append(channel.recv_stderr(65536))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            channel.settimeout(min(STDERR_POLL_S, remaining))
            try:
                chunk = channel.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                break
            out.append(chunk)
        while True:
            channel.settimeout(max(0.001, deadline - time.monotonic()))
            chunk = channel.recv_stderr(65536)
            if not chunk:
                return b"".join(out), b"".join(err)
            err.append(chunk)

    def _sftp_client(self) -> paramiko.SFTPClient:
        """The connection's SFTP session (callers hold _sftp_lock: SFTP is request/response)."""
        transport = self._transport()
        if self._sftp is None:
            opened = transport.open_session(timeout=self.connect_timeout_s)
            # The watchdog covers the subsystem request; the channel timeout covers the
            # version exchange in SFTPClient(), which otherwise waits forever for the server.
            opened.settimeout(self.command_timeout_s)
            watchdog = _Watchdog(opened, self.command_timeout_s)
            try:
                opened.invoke_subsystem("sftp")
                self._sftp = paramiko.SFTPClient(opened)
            except TimeoutError:
                opened.close()
                raise
            except (paramiko.SSHException, OSError, EOFError):
                opened.close()
                if watchdog.fired:
                    raise TimeoutError from None
                raise
            finally:
                watchdog.cancel()
        channel = self._sftp.get_channel()
        assert channel is not None
        channel.settimeout(self.command_timeout_s)
        return self._sftp

    def _sftp_do(self, what: str, operation: Callable[[paramiko.SFTPClient], T]) -> T:
        with self._sftp_lock:
            self.calls += 1
            try:
                return operation(self._sftp_client())
            except TimeoutError:
                self.close()
                raise BackendError(f"{what} on {self.where} timed out") from None
            except (paramiko.SSHException, OSError, EOFError) as exc:
                self.close()
                raise BackendError(f"{what} on {self.where} failed: {exc}") from None

    def read_file(self, path: str, offset: int, limit: int) -> bytes | None:
        """Up to `limit` bytes of a remote file from `offset`; None when it does not exist."""

        def read(sftp: paramiko.SFTPClient) -> bytes | None:
            try:
                with sftp.open(path, "rb") as handle:
                    handle.seek(offset)
                    return handle.read(limit)
            except FileNotFoundError:
                return None

        return self._sftp_do("reading a file", read)

    def file_size(self, path: str) -> int | None:
        """A remote file's size in bytes; None when it does not exist."""

        def size(sftp: paramiko.SFTPClient) -> int | None:
            try:
                return sftp.stat(path).st_size
            except FileNotFoundError:
                return None

        return self._sftp_do("reading a file's size", size)

    def make_dir(self, path: str) -> bool:
        """Create a directory, and its missing parents; False if it already existed. SFTP's
        mkdir is atomic and runs inside sshd (no process is started), so it is a cheap guard."""

        def make(sftp: paramiko.SFTPClient, directory: str) -> bool:
            try:
                sftp.mkdir(directory)
                return True
            except FileNotFoundError:
                make(sftp, posixpath.dirname(directory))
                sftp.mkdir(directory)
                return True
            except PermissionError:
                try:
                    sftp.stat(directory)
                except FileNotFoundError:
                    # A setting (workdir) the account may not write: no retry mends it.
                    raise BackendError(
                        f"cannot create {directory} on {self.where}: permission denied",
                        permanent=True,
                    ) from None
                return False
            except OSError:
                # SFTP v3 answers a plain "Failure": it exists, unless stat says otherwise.
                sftp.stat(directory)
                return False

        return self._sftp_do("mkdir", lambda sftp: make(sftp, path))

    def chmod(self, path: str, mode: int) -> bool:
        """Set a path's mode; False when the login user may not (it is not the owner)."""

        def change(sftp: paramiko.SFTPClient) -> bool:
            try:
                sftp.chmod(path, mode)
                return True
            except PermissionError:
                return False

        return self._sftp_do("chmod", change)

    def home(self) -> str:
        """The login user's home directory, as the SFTP server resolves `.` (no shell)."""
        return self._sftp_do("resolving the home directory", lambda sftp: sftp.normalize("."))
