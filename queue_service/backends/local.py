"""The embedded default backend: real processes on this machine, simulated GPUs.

Settings: `nodes` = [{"name", "gpus", "gpu_model", "pool"?, "mig"?, "mig_layout"?}],
`workdir` (default GPUQ_LOCAL_WORKDIR/cluster.<cluster id>: an id, never the name, which staff
may edit; a relative path is the project directory's), `grace_s` (10), `checkpoint_signal_s`
(120, as Slurm's setting: a checkpointing job's warning before its time limit). Each attempt
of a job gets a directory `<workdir>/<job_id>/<attempt>/` holding request.json, the
supervisor's pid, stdout/stderr, result.json and `work/`, the ranks' working directory (so a
job's own files are never taken for gpuq's); the directory is the job's identity, which makes
submit idempotent and lets a restarted worker re-attach (or find the job lost)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .base import (
    BackendError,
    ClusterConfig,
    DispatchRequest,
    JobStatus,
    LogChunk,
    MigInstanceInfo,
    NodeInfo,
    RemoteState,
    SubmitResult,
    job_env,
)
from .local_runner import KILL_WAIT_S, group_members, signal_process, start_time

DEFAULT_WORKDIR = Path("var/local-jobs")
RUNNER = "queue_service.backends.local_runner"
STREAMS = ("stdout", "stderr")
# What local_runner writes in result.json.
VERDICTS = RemoteState.TERMINAL - {RemoteState.PREEMPTED, RemoteState.NODE_FAILURE}


class LocalBackend:
    kind = "local"

    def __init__(self, cluster: ClusterConfig) -> None:
        self.cluster = cluster
        base = cluster.settings.get("workdir") or _default_workdir() / default_dir_name(cluster.id)
        self.workdir = (_repo_root() / base).resolve()  # an absolute `base` stays as it is
        self.grace_s = float(cluster.settings.get("grace_s", 10))
        self.checkpoint_signal_s = int(cluster.settings.get("checkpoint_signal_s", 120))

    def close(self) -> None:
        """Nothing to let go of: every call opens and closes its own files."""

    # --- inventory ---------------------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        layouts = self._mig_layouts()
        out = []
        for spec in self.cluster.settings.get("nodes", []):
            name = str(spec["name"])
            mig = bool(spec.get("mig", False))
            instances = layouts.get(name, spec.get("mig_layout", [])) if mig else []
            out.append(
                NodeInfo(
                    name=name,
                    gpu_model=str(spec.get("gpu_model", "SIM-GPU")),
                    gpus=int(spec.get("gpus", 0)),
                    state=str(spec.get("state", "up")),
                    pool=spec.get("pool"),
                    mig=mig,
                    mig_instances=tuple(
                        MigInstanceInfo(
                            int(i["gpu"]), str(i["profile"]), int(i["start"]), int(i["size"])
                        )
                        for i in instances
                    ),
                    labels={"gpuq.io/simulated": "true"},
                )
            )
        return out

    def apply_mig_layout(self, node: str, gpu: int, instances: Sequence[dict[str, Any]]) -> None:
        """Simulated MIG: a new layout for one idle GPU takes effect at once."""
        layouts = self._mig_layouts()
        current = layouts.get(node)
        if current is None:
            spec = next(
                (n for n in self.cluster.settings.get("nodes", []) if n["name"] == node), None
            )
            if spec is None:
                raise BackendError(
                    f"no node {node!r} in cluster {self.cluster.name}", permanent=True
                )
            current = list(spec.get("mig_layout", []))
        layouts[node] = [i for i in current if int(i["gpu"]) != gpu] + [
            {**i, "gpu": gpu} for i in instances
        ]
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / "mig-layouts.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(layouts))
        os.replace(tmp, path)

    def _mig_layouts(self) -> dict[str, list[dict[str, Any]]]:
        path = self.workdir / "mig-layouts.json"
        if not path.exists():
            return {}
        data: dict[str, list[dict[str, Any]]] = json.loads(path.read_text())
        return data

    # --- jobs --------------------------------------------------------------------------------

    def _dir(self, external_id: str) -> Path:
        job_id, _, attempt = external_id.partition("/")
        if not job_id or not attempt.isdigit() or "/" in attempt or job_id in (".", ".."):
            raise BackendError(f"not a local job id: {external_id!r}", permanent=True)
        path = (self.workdir / job_id / attempt).resolve()
        if self.workdir not in path.parents:
            raise BackendError(f"not a local job id: {external_id!r}", permanent=True)
        return path

    def submit(self, job: DispatchRequest) -> SubmitResult:
        external_id = f"{job.job_id}/{job.attempt}"
        job_dir = self._dir(external_id)
        if (job_dir / "supervisor.pid").exists():
            return SubmitResult(external_id, adopted=True)
        if not job.placement:
            raise BackendError("the local backend needs a placement", permanent=True)
        known = {n["name"] for n in self.cluster.settings.get("nodes", [])}
        missing = [a.node for a in job.placement if a.node not in known]
        if missing:
            raise BackendError(f"unknown node(s) {missing} in {self.cluster.name}", permanent=True)
        try:
            job_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BackendError(f"cannot create the job directory: {exc.strerror}") from exc
        request = {
            "job_id": job.job_id,
            "name": job.name,
            "attempt": job.attempt,
            "command": job.command if isinstance(job.command, str) else list(job.command),
            "env": {**job_env(job), **job.env},
            "time_limit_s": job.time_limit_s,
            "grace_s": self.grace_s,
            # As the Slurm script's `--signal=B:USR1@<s>`: only for a job that checkpoints.
            "checkpoint_signal_s": (
                self.checkpoint_signal_s
                if job.checkpoint_dir or job.checkpoint_interval_s
                else None
            ),
            "placement": [asdict(a) for a in job.placement],
        }
        tmp = job_dir / "request.tmp"
        tmp.write_text(json.dumps(request))
        os.replace(tmp, job_dir / "request.json")
        try:
            # The supervisor claims supervisor.pid with O_EXCL: a repeated launch exits at once.
            subprocess.run(
                [sys.executable, "-m", RUNNER, str(job_dir)],
                check=True,
                timeout=30,
                cwd=_repo_root(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise BackendError(f"could not start the job supervisor: {exc}") from exc
        return SubmitResult(external_id)

    def poll(self, external_ids: Sequence[str]) -> dict[str, JobStatus]:
        return {eid: self._status(eid) for eid in external_ids}

    def _status(self, external_id: str) -> JobStatus:
        try:
            job_dir = self._dir(external_id)
        except BackendError:
            return JobStatus(external_id, RemoteState.LOST, reason="unknown job id")
        verdict = _verdict(external_id, job_dir)
        if verdict is not None:
            return verdict
        pid = _read_pid(job_dir / "supervisor.pid")
        if pid is not None and _alive(pid, job_dir):
            if (job_dir / "started.json").exists():
                return JobStatus(external_id, RemoteState.RUNNING, native_state="running")
            return JobStatus(external_id, RemoteState.QUEUED, native_state="starting")
        request = job_dir / "request.json"
        if pid is None and request.exists() and time.time() - request.stat().st_mtime < 60:
            return JobStatus(external_id, RemoteState.QUEUED, native_state="launching")
        verdict = _verdict(external_id, job_dir)  # it finished between the two looks
        if verdict is not None:
            return verdict
        _kill_ranks(job_dir)  # unsupervised, they would hold GPUs the queue hands out again
        if (job_dir / "result.json").exists():
            reason = "the job's supervisor is gone and result.json is not its verdict"
        else:
            reason = "the job's supervisor is gone (machine restarted?)"
        return JobStatus(external_id, RemoteState.LOST, reason=reason)

    def cancel(self, external_id: str, grace_s: float = 30.0) -> bool:
        job_dir = self._dir(external_id)
        if _verdict(external_id, job_dir) is not None or not job_dir.is_dir():
            return False  # it ended on its own, or its directory is gone: poll says lost
        if (job_dir / "ended.json").exists():
            # Its ranks ended by themselves; the supervisor stops what they left behind (TERM,
            # KILL after the grace) and then writes their end, which a stop no longer changes.
            deadline = time.monotonic() + self.grace_s + KILL_WAIT_S + 2
            while _verdict(external_id, job_dir) is None and time.monotonic() < deadline:
                time.sleep(0.1)
            return False
        # Whole or not at all: the supervisor may read it at any moment.
        tmp = job_dir / f"cancel.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"grace_s": grace_s}))
        os.replace(tmp, job_dir / "cancel.json")
        pid = _read_pid(job_dir / "supervisor.pid")
        if pid is not None and _alive(pid, job_dir):
            os.kill(pid, signal.SIGTERM)
        return True

    def logs(
        self, external_id: str, offset: int = 0, limit: int = 65536, stream: str = "stdout"
    ) -> LogChunk:
        if stream not in STREAMS:
            raise BackendError(f"stream must be one of {STREAMS}", permanent=True)
        job_dir = self._dir(external_id)
        if not job_dir.is_dir():  # made at submit: removed since (an attempt's dir by hand)
            return LogChunk(b"", offset, eof=True, gone=True)
        path = job_dir / stream
        finished = _verdict(external_id, job_dir) is not None
        if not path.exists():
            return LogChunk(b"", offset, eof=finished)
        with path.open("rb") as f:
            if offset >= os.fstat(f.fileno()).st_size:  # past the end: nothing, and no seek
                return LogChunk(b"", offset, eof=finished)
            f.seek(offset)
            data = f.read(limit)
            at_end = f.read(1) == b""
        return LogChunk(data, offset + len(data), eof=finished and at_end)

    def log_size(self, external_id: str, stream: str = "stdout") -> int | None:
        if stream not in STREAMS:
            raise BackendError(f"stream must be one of {STREAMS}", permanent=True)
        try:
            return (self._dir(external_id) / stream).stat().st_size
        except FileNotFoundError:
            return None


def _verdict(external_id: str, job_dir: Path) -> JobStatus | None:
    """The supervisor's result.json, or None while there is none. Jobs run as the same user
    and could write that file: what is not a verdict is no verdict, never an exception."""
    try:
        data = json.loads((job_dir / "result.json").read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("state") not in VERDICTS:
        return None
    exit_code, reason = data.get("exit_code"), data.get("reason", "")
    if not (exit_code is None or type(exit_code) is int) or not isinstance(reason, str):
        return None
    state = str(data["state"])
    started = data.get("started")
    return JobStatus(
        external_id,
        state,
        exit_code=exit_code,
        reason=reason,
        native_state=state,
        started=started if isinstance(started, bool) else None,
    )


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int, job_dir: Path) -> bool:
    """Alive and still the supervisor of this job (a recycled pid would be another program,
    or another job's supervisor)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if argv[-2:] != [os.fsencode(job_dir), b""] or RUNNER.encode() not in argv:
        return False
    try:
        status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return status != "Z"


def _kill_ranks(job_dir: Path) -> None:
    """SIGKILL the process groups of a job whose supervisor is gone: those started.json
    names that are still this job's, known by what a rank's `cd` does not change (a group
    id alone may by now be another program's): its leader, by pid and start time, or a
    member carrying the job's GPUQ_JOB_ID and GPUQ_ATTEMPT (the leader may have exited).
    Then what the job started outside those groups (see _kill_escaped)."""
    marks = {
        b"GPUQ_JOB_ID=" + os.fsencode(job_dir.parent.name),
        b"GPUQ_ATTEMPT=" + os.fsencode(job_dir.name),
    }
    try:
        started = json.loads((job_dir / "started.json").read_text())
        pgids = [int(p) for p in started["pids"]]
        starts = started.get("starts")
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        pgids, starts = [], []  # none named: what carries the marks is still the job's
    if not isinstance(starts, list) or len(starts) != len(pgids):
        starts = [None] * len(pgids)  # written by an older supervisor
    for pgid, start in zip(pgids, starts, strict=True):
        if pgid <= 1:
            continue
        members = group_members(pgid)
        leader = pgid in members and start is not None and start_time(pgid) == start
        if leader or any(_carries(pid, marks) for pid in members):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
    _kill_escaped(marks)


def _kill_escaped(marks: set[bytes]) -> None:
    """SIGKILL every process carrying the job's GPUQ_JOB_ID and GPUQ_ATTEMPT: what it started
    in a session of its own (`setsid`, a daemon's double fork) was reparented past its dead
    supervisor, out of reach of its descendants and of the ranks' groups. A process that
    cleared those from its environment cannot be told from another program's without a
    cgroup: it runs on."""
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            pid = int(entry.name)
            start = start_time(pid)
            if start is not None and _carries(pid, marks):
                signal_process(pid, start, signal.SIGKILL)  # if still the process read


def _carries(pid: int, marks: set[bytes]) -> bool:
    """Whether the process's environment holds every one of these NAME=value entries."""
    try:
        environ = set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
    except OSError:
        return False
    return marks <= environ


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def _default_workdir() -> Path:
    env = os.environ.get("GPUQ_LOCAL_WORKDIR")
    return _repo_root() / (env or DEFAULT_WORKDIR)


def default_dir_name(cluster_id: int) -> str:
    """The directory of a cluster without a `workdir` of its own, under GPUQ_LOCAL_WORKDIR.
    By id: a rename must not move the running jobs' directories (their identity). The dot
    keeps it apart from the by-name directories of earlier versions (a slug has no dot),
    which migration clusters.0004 pins as those clusters' `workdir`."""
    return f"cluster.{cluster_id}"


def create(cluster: ClusterConfig) -> LocalBackend:
    return LocalBackend(cluster)
