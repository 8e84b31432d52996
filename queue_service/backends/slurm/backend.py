"""The Slurm backend: dispatch, follow, cancel, logs and inventory over one SSH connection."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from queue_service.backends.base import (
    BackendError,
    DispatchRequest,
    JobStatus,
    LogChunk,
    NodeInfo,
    RemoteState,
    SubmitResult,
)

from . import commands, parsers, script
from .ssh import Result, SSHConnection

DEFAULT_WORKDIR = "~/.gpuq/jobs"


@dataclass(frozen=True)
class SlurmSettings:
    """ClusterConfig.settings of a Slurm cluster, validated (docs/slurm.md). The private key
    is not kept here: it goes straight into the connection's key object."""

    host: str
    user: str
    known_hosts: str = field(repr=False)
    port: int = 22
    workdir: str = DEFAULT_WORKDIR
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 60.0
    containers: str = "pyxis"  # "pyxis", or "none": the cluster cannot run container images
    script: script.ScriptOptions = field(default_factory=script.ScriptOptions)

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any]) -> SlurmSettings:
        missing = [k for k in ("host", "user", "known_hosts") if not settings.get(k)]
        if missing:
            raise BackendError(f"Slurm cluster settings lack {', '.join(missing)}", permanent=True)
        mounts = settings.get("container_mounts") or ()
        containers = str(settings.get("containers", "pyxis"))
        if containers not in ("pyxis", "none"):
            raise BackendError(
                f"containers must be pyxis or none, not {containers!r}", permanent=True
            )
        try:
            return cls(
                host=str(settings["host"]),
                user=str(settings["user"]),
                known_hosts=str(settings["known_hosts"]),
                port=int(settings.get("port", 22)),
                workdir=str(settings.get("workdir") or DEFAULT_WORKDIR),
                connect_timeout_s=float(settings.get("connect_timeout_s", 10.0)),
                command_timeout_s=float(settings.get("command_timeout_s", 60.0)),
                containers=containers,
                script=script.ScriptOptions(
                    partition=settings.get("partition") or None,
                    account=settings.get("account") or None,
                    qos=settings.get("qos") or None,
                    requeue=bool(settings.get("requeue", False)),
                    gres_map=dict(settings.get("gres_map") or {}),
                    container_mounts=(mounts,) if isinstance(mounts, str) else tuple(mounts),
                    checkpoint_signal_s=int(settings.get("checkpoint_signal_s", 120)),
                ),
            )
        except (TypeError, ValueError) as exc:
            raise BackendError(f"invalid Slurm cluster settings: {exc}", permanent=True) from None


def private_key_text(settings: Mapping[str, Any]) -> str:
    if settings.get("private_key"):
        return str(settings["private_key"])
    if settings.get("private_key_file"):
        try:
            return Path(str(settings["private_key_file"])).read_text()
        except OSError as exc:
            raise BackendError(
                f"cannot read the private key file: {exc.strerror}", permanent=True
            ) from None
    raise BackendError(
        "Slurm cluster settings lack private_key or private_key_file", permanent=True
    )


class SlurmBackend:
    kind = "slurm"

    def __init__(
        self,
        name: str,
        settings: SlurmSettings,
        connection: SSHConnection,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.name = name
        self.settings = settings
        self.connection = connection
        self._clock = clock
        self._sleep = sleep
        self._resolved_workdir: str | None = None

    def __repr__(self) -> str:
        return f"SlurmBackend({self.name!r}, {self.connection.where})"

    def _run(self, command: str, stdin: bytes | None = None) -> Result:
        return self.connection.run(command, stdin=stdin)

    def workdir(self) -> str:
        """The base directory on the login node, `~` resolved by the SFTP server."""
        if self._resolved_workdir is None:
            workdir = self.settings.workdir
            if not workdir.startswith("/"):
                relative = workdir.removeprefix("~").lstrip("/")
                workdir = self.connection.home().rstrip("/") + ("/" + relative if relative else "")
            workdir = script.directive_value("workdir", workdir.rstrip("/"))
            # Slurm does not create the directory of --output: it must exist before any job.
            self.connection.make_dir(script.logs_dir(workdir))
            self._resolved_workdir = workdir
        return self._resolved_workdir

    # -- inventory -------------------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        result = self._run(commands.sinfo(self.settings.script.partition))
        if result.rc != 0:
            raise parsers.command_error(
                "sinfo", result.stderr, result.rc, rejection_is_permanent=False
            )
        return parsers.parse_sinfo(result.stdout, self.settings.script.gres_map)

    # -- submit ----------------------------------------------------------------------------

    def submit(self, job: DispatchRequest) -> SubmitResult:
        """Create the attempt's directory, then sbatch with the script on stdin. The mkdir is
        the guard: a repeat finds the directory and looks the job up instead of resubmitting."""
        if job.image and self.settings.containers == "none":
            raise BackendError(
                "this Slurm cluster runs no containers (no Pyxis): submit without `image`, "
                "or to a cluster that has them",
                permanent=True,
            )
        workdir = self.workdir()
        job_dir = script.job_dir(workdir, job)
        text = script.render(job, self.settings.script, workdir).encode()
        if not self.connection.make_dir(job_dir):
            # An earlier submit of this attempt got at least as far as creating its directory.
            return self._adopt_or_resubmit(job, job_dir, text)
        return SubmitResult(self._submitted(self._run(commands.SUBMIT, stdin=text)))

    @staticmethod
    def _submitted(result: Result) -> str:
        if result.rc != 0:
            raise parsers.command_error(
                "sbatch", result.stderr, result.rc, rejection_is_permanent=True
            )
        return parsers.parse_sbatch(result.stdout)

    def _adopt_or_resubmit(self, job: DispatchRequest, job_dir: str, text: bytes) -> SubmitResult:
        """The job, if Slurm has it: same unique name and this attempt's directory as WorkDir
        (squeue while Slurm remembers it, then accounting). Otherwise sbatch now."""
        name = script.job_name(job.job_id)
        for what, command in (
            ("squeue", commands.lookup_squeue(name)),
            ("sacct", commands.lookup_sacct(name)),
        ):
            result = self._run(command)
            if result.rc != 0:
                raise parsers.command_error(
                    what, result.stderr, result.rc, rejection_is_permanent=False
                )
            found = parsers.parse_lookup(result.stdout).get(job_dir)
            if found is not None:
                return SubmitResult(found, adopted=True)
        return SubmitResult(self._submitted(self._run(commands.SUBMIT, stdin=text)))

    # -- follow ----------------------------------------------------------------------------

    def poll(self, external_ids: Sequence[str]) -> dict[str, JobStatus]:
        """One squeue for all ids; one sacct for those squeue no longer shows (finished more
        than MinJobAge ago). squeue failing means the controller is unreachable: transient,
        never a reason to call jobs lost."""
        ids = list(dict.fromkeys(external_ids))
        if not ids:
            return {}
        result = self._run(commands.squeue(ids))
        if result.rc != 0 and not parsers.only_unknown_ids(result.stderr):
            raise parsers.command_error(
                "squeue", result.stderr, result.rc, rejection_is_permanent=False
            )
        found = parsers.parse_squeue(result.stdout) if result.rc == 0 else {}
        missing = [i for i in ids if i not in found]
        if missing:
            result = self._run(commands.sacct(missing))
            if result.rc != 0:
                raise parsers.command_error(
                    "sacct", result.stderr, result.rc, rejection_is_permanent=False
                )
            found.update(parsers.parse_sacct(result.stdout))
        return {
            i: found.get(i)
            or JobStatus(i, RemoteState.LOST, reason="Slurm no longer knows this job")
            for i in ids
        }

    # -- cancel ----------------------------------------------------------------------------

    def cancel(self, external_id: str, grace_s: float = 30.0) -> bool:
        """A running job gets TERM first so it can save state; Slurm's own cancel (TERM, KILL
        after KillWait, state CANCELLED) follows if it still runs after the grace. A pending
        job is cancelled at once: scancel --signal would retry on it for ~95 s. False when
        the job had already ended before any signal (or before the TERM could reach it)."""
        status = self.poll([external_id])[external_id]
        if status.state in RemoteState.TERMINAL:
            return False
        termed = grace_s > 0 and status.state == RemoteState.RUNNING
        if termed:
            if self._scancel(commands.terminate(external_id), external_id):
                return False  # it ended between the poll and the TERM
            deadline = self._clock() + grace_s
            while (remaining := deadline - self._clock()) > 0:
                self._sleep(min(1.0, remaining))
                if self.poll([external_id])[external_id].state in RemoteState.TERMINAL:
                    return True  # it ended after our TERM
        ended_first = self._scancel(commands.cancel(external_id), external_id)
        return termed or not ended_first

    def _scancel(self, command: str, external_id: str) -> bool:
        """Run a scancel; True when it failed because the job had ended meanwhile (Slurm
        answers "Invalid job id specified" for a job that just finished). Any other failure
        is a transient error."""
        result = self._run(command)
        if result.rc == 0:
            return False
        if self.poll([external_id])[external_id].state in RemoteState.TERMINAL:
            return True
        raise parsers.command_error(
            "scancel", result.stderr, result.rc, rejection_is_permanent=False
        )

    # -- logs ------------------------------------------------------------------------------

    def logs(
        self, external_id: str, offset: int = 0, limit: int = 65536, stream: str = "stdout"
    ) -> LogChunk:
        """Bytes [offset, offset+limit) of the job's output file, read by SFTP. At the end of
        what is written, eof says whether the job has ended (so nothing more will come)."""
        path = script.log_path(self.workdir(), commands.job_ids([external_id]), stream)
        data = self.connection.read_file(path, offset, limit) or b""
        if len(data) == limit:
            return LogChunk(data, offset + len(data))
        if self.poll([external_id])[external_id].state not in RemoteState.TERMINAL:
            return LogChunk(data, offset + len(data))
        # The job ended after the first read: what it wrote meanwhile is the true tail.
        data += self.connection.read_file(path, offset + len(data), limit - len(data)) or b""
        return LogChunk(data, offset + len(data), eof=len(data) < limit)
