"""The local backend's job supervisor: `python -m queue_service.backends.local_runner DIR`.

It detaches (double fork, new session) so a worker restart does not kill it, starts one
process per allocated node (rank), and writes result.json when the job ends: exit code,
timeout, cancellation (SIGTERM to the supervisor, or cancel.json found at start), or the first
failing rank stopping the gang. Each rank runs in its own process group, in DIR/work (DIR holds
gpuq's own files), so the whole tree is signalled: whatever a rank leaves in its group when it
exits gets TERM, then KILL after the grace, before the verdict is written.

On Linux the supervisor is also a child subreaper (prctl PR_SET_CHILD_SUBREAPER): what the job
orphans (a process started in a new session with `setsid`, a daemon's double fork) is
reparented to it, not to init, so every process the job started stays its descendant. A stop,
and the end of the ranks, signal every descendant as they signal the ranks' groups, the
supervisor reaps what is reparented to it, and the verdict waits until it has no child left:
nothing the job started outlives it (as Slurm's cgroup and Kubernetes' pod do), without root
or cgroups. A descendant is known by its pid and start time, checked once it is pinned by a
pidfd, so a pid reused meanwhile by another program is not signalled."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

POLL_S = 0.1
KILL_WAIT_S = 5.0  # after SIGKILL: a process stuck in the kernel (D state) cannot be waited for
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def cancel_grace(job_dir: Path, default: float) -> float:
    """The grace a cancel asked for; anything else found there (jobs run as the same user and
    can write it) keeps the default."""
    try:
        grace = json.loads((job_dir / "cancel.json").read_text())["grace_s"]
        grace = float(grace)
    except (OSError, ValueError, TypeError, KeyError, IndexError, RecursionError):
        return default
    return grace if 0 <= grace < float("inf") else default


def group_members(pgid: int) -> list[int]:
    """The processes of a process group that still run (zombies waiting for init to reap
    them are left out: they hold nothing)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass  # someone else's process in it: still look
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[0] != "Z" and fields[2] == str(pgid):
            members.append(int(entry.name))
    return members


def start_time(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (/proc/PID/stat field 22): with
    its pid, what tells it from a later process given the same pid."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def become_subreaper() -> bool:
    """Makes orphaned descendants reparent to this process (Linux 3.4+), which must then reap
    them. Not inherited by the ranks (fork clears it). Elsewhere, or if the kernel refuses,
    False: the supervisor then stops the ranks' process groups only, as it did before, and
    what a job starts in a new session escapes it."""
    if sys.platform != "linux":
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def descendants(root: int) -> list[tuple[int, int, int]]:
    """(pid, process group, start time) of every running (not zombie) descendant of `root`,
    from one read of /proc's parent pids (/proc/PID/task/TID/children needs a kernel option
    not every kernel has). A process forked during the read may be missed: callers repeat."""
    children: dict[int, list[tuple[int, str, int, int]]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
            ppid, pgid, start = int(fields[1]), int(fields[2]), int(fields[19])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append((int(entry.name), fields[0], pgid, start))
    found: list[tuple[int, int, int]] = []
    todo = [root]
    seen = {root}
    while todo:
        for pid, state, pgid, start in children.get(todo.pop(), []):
            if pid in seen:
                continue
            seen.add(pid)
            todo.append(pid)
            if state != "Z":
                found.append((pid, pgid, start))
    return found


def signal_process(pid: int, start: int, sig: int) -> None:
    """Signals the process `pid` if it is still the one that started at `start`: pinned by a
    pidfd first (Linux 5.3+), so one that ends after the check is not replaced by a process
    given the same pid; without pidfds, checked just before the kill."""
    fd = None
    if sys.platform == "linux":
        with contextlib.suppress(OSError):
            fd = os.pidfd_open(pid)
    try:
        if start_time(pid) != start:
            return
        if fd is None:
            os.kill(pid, sig)
        else:
            signal.pidfd_send_signal(fd, sig)
    except (ProcessLookupError, PermissionError):
        pass
    finally:
        if fd is not None:
            os.close(fd)


def reap(procs: list[subprocess.Popen[bytes]]) -> bool:
    """Waits for every child that has ended (a rank through its Popen, which keeps its
    status; an orphan reparented to the subreaper directly) and says whether any child is
    left. Every live descendant has a live chain of parents up to us (a parent that dies
    hands its children to us), so no child left means nothing of the job is left."""
    ranks = {p.pid: p for p in procs if p.returncode is None}
    while True:
        try:
            ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return False
        if ended is None:
            return True  # children, none of them ended
        rank = ranks.pop(ended.si_pid, None)
        if rank is not None:
            if rank.poll() is None:
                return True  # not waited for after all: its status is Popen's, next turn
        else:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(ended.si_pid, 0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_env(req: dict[str, Any], rank: int, port: int) -> dict[str, str]:
    alloc = req["placement"][rank]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", "USER")}
    nnodes = len(req["placement"])
    # Rendezvous defaults: the job's own env wins over them, as on Slurm (whose user env is
    # applied last), so a MASTER_PORT the spec gives is the one the job sees.
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        NNODES=str(nnodes),
        NODE_RANK=str(rank),
    )
    env.update(req["env"])
    env.update(
        GPUQ_NODE=alloc["node"],
        GPUQ_NODE_RANK=str(rank),
        GPUQ_NNODES=str(nnodes),
        GPUQ_GPUS_PER_NODE=str(len(alloc["gpus"])),
        GPUQ_GPUS=",".join(str(g) for g in alloc["gpus"]),
    )
    if alloc.get("mig_profile"):
        env.update(
            GPUQ_MIG_PROFILE=alloc["mig_profile"],
            GPUQ_MIG_GPU=str(alloc["mig_gpu"]),
            GPUQ_MIG_START=str(alloc["mig_start"]),
            # What a real MIG device looks like to CUDA: an instance UUID, not an index.
            CUDA_VISIBLE_DEVICES=f"MIG-gpuq-{alloc['node']}-{alloc['mig_gpu']}-{alloc['mig_start']}",
        )
    else:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in alloc["gpus"])
    return env


def start_rank(
    argv: list[str], env: dict[str, str], out: IO[bytes], err: IO[bytes], cwd: Path
) -> subprocess.Popen[bytes]:
    """Starts one rank in a process group of its own. An executable file the kernel cannot
    run (a script without `#!`: ENOEXEC) is run by /bin/sh, as shells, execvp(3) and the
    Slurm backend's batch script run it."""

    def popen(args: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            args,
            env=env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            start_new_session=True,
        )

    try:
        return popen(argv)
    except OSError as exc:
        if exc.errno != errno.ENOEXEC:
            raise
    # The file found on the job's PATH, as execvp hands it to the shell (a relative path
    # with a "/" is the rank's cwd's, for sh as for exec).
    program = argv[0]
    if "/" not in program:
        program = shutil.which(program, path=env.get("PATH", os.defpath)) or program
    return popen(["/bin/sh", program, *argv[1:]])


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def signal_job(procs: list[subprocess.Popen[bytes]], sig: int, subreaper: bool) -> None:
    """The ranks' process groups (each at once, a fork cannot race it), then, as a subreaper,
    every other descendant: what left its rank's group (a new session, a daemon). Each
    process gets the signal once."""
    for p in procs:
        signal_group(p, sig)
    if subreaper:
        groups = {p.pid for p in procs}
        for pid, pgid, start in descendants(os.getpid()):
            if pgid not in groups:
                signal_process(pid, start, sig)


def supervise(
    job_dir: Path,
    stopping: dict[str, Any],
    procs: list[subprocess.Popen[bytes]],
    subreaper: bool = False,
) -> None:
    """Runs the ranks (appended to `procs`) to the end and writes the verdict. `stopping`
    is filled by the SIGTERM handler main() installs before anyone can know our pid;
    `subreaper`: we are one, so every descendant is stopped and waited for, not only the
    ranks' process groups."""
    req = json.loads((job_dir / "request.json").read_text())
    if (job_dir / "cancel.json").exists():  # cancelled before our pid could be signalled
        stopping.setdefault("why", "cancelled")
        stopping.setdefault("at", time.monotonic())
    if stopping:
        write_json(
            job_dir / "result.json",
            {
                "state": "cancelled",
                "exit_code": None,
                "reason": "cancelled before it started",
                "started": False,
            },
        )
        return
    command = req["command"]
    # `--`: a command string starting with "-" is the command, not options of sh.
    argv = ["/bin/sh", "-c", "--", command] if isinstance(command, str) else list(command)
    port = free_port()
    work = job_dir / "work"
    try:
        work.mkdir(exist_ok=True)
        for rank in range(len(req["placement"])):
            # Every rank writes the attempt's one stdout and stderr, as srun's tasks write
            # Slurm's file: appending (O_APPEND), so no rank overwrites another's output,
            # though their lines may interleave.
            with open(job_dir / "stdout", "ab") as out, open(job_dir / "stderr", "ab") as err:
                procs.append(start_rank(argv, rank_env(req, rank, port), out, err, work))
    except OSError as exc:
        signal_job(procs, signal.SIGKILL, subreaper)
        write_json(
            job_dir / "result.json",
            {
                "state": "failed",
                # As shells: 127 for a program not found, 126 for one that cannot run
                # (not executable, or not a program even for /bin/sh: see start_rank).
                "exit_code": 127 if isinstance(exc, FileNotFoundError) else 126,
                "reason": f"could not start: {exc.strerror}",
                "started": bool(procs),  # ranks started before the one that could not
            },
        )
        return
    write_json(
        job_dir / "started.json",
        {
            "pids": [p.pid for p in procs],
            "starts": [start_time(p.pid) for p in procs],
            "at": time.time(),
        },
    )
    started = time.monotonic()
    limit = req.get("time_limit_s")
    grace = float(req.get("grace_s", 10))
    warn_s = req.get("checkpoint_signal_s")
    warned = False
    failed: int | None = None
    ended_at: float | None = None  # when no leader was left
    term_at: float | None = None
    kill_at: float | None = None
    while True:
        leaders = [p.poll() is None for p in procs]  # poll() every rank, every turn
        # As a subreaper: orphans that ended are waited for every turn (no zombies pile up
        # in a long job), and whether any process of the job is left is known without /proc.
        left = reap(procs) if subreaper else None
        now = time.monotonic()
        if any(leaders):
            if limit and warn_s is not None and not warned and now - started >= limit - warn_s:
                # As Slurm's `--signal=B:USR1@<s>`, once: to each rank's own process (what
                # the Slurm script `exec`s as its batch shell), not to the rest of its group.
                warned = True
                for p in procs:
                    p.send_signal(signal.SIGUSR1)  # not once it has ended (Popen checks)
            if limit and now - started > limit:
                stopping.setdefault("why", "timeout")
                stopping.setdefault("at", now)
            codes = [p.returncode for p in procs if p.returncode not in (None, 0)]
            if codes and failed is None:
                failed = codes[0]  # one rank failed: the gang stops
                stopping.setdefault("why", "failed")
                stopping.setdefault("at", now)
        else:
            if ended_at is None:
                ended_at = now
                # The end is the ranks' own from here: a stop that comes now changes nothing,
                # and LocalBackend.cancel says so.
                write_json(job_dir / "ended.json", {"at": time.time()})
            if left is None:
                left = any(group_members(p.pid) for p in procs)
            if not left:
                break
            if kill_at is not None and now - kill_at > KILL_WAIT_S:
                break
        if term_at is None and (stopping or ended_at is not None):
            if stopping:
                grace = cancel_grace(job_dir, grace)
            signal_job(procs, signal.SIGTERM, subreaper)
            term_at = now
        if term_at is not None and now - term_at > grace:
            # Again each turn: a fork may have raced the first.
            signal_job(procs, signal.SIGKILL, subreaper)
            kill_at = kill_at or now
        time.sleep(POLL_S)
    assert ended_at is not None  # the loop ends only once no leader is left
    codes = [p.returncode for p in procs]
    exit_code = failed if failed is not None else next((c for c in codes if c != 0), 0)
    if exit_code < 0:
        exit_code = 128 - exit_code  # killed by signal N -> 128 + N, as shells report it
    # A stop that came once every leader had ended on its own does not change that end.
    why = stopping.get("why") if stopping.get("at", float("inf")) <= ended_at else None
    if why in ("cancelled", "timeout"):
        state, reason = (
            why,
            {"cancelled": "cancelled", "timeout": f"time limit {limit}s reached"}[why],
        )
    elif exit_code == 0:
        state, reason = "succeeded", ""
    else:
        state, reason = "failed", f"exit code {exit_code}"
    write_json(job_dir / "result.json", {"state": state, "exit_code": exit_code, "reason": reason})


def main() -> int:
    job_dir = Path(sys.argv[1])
    if os.fork() > 0:
        return 0  # the caller gets control back at once; the grandchild supervises
    os.setsid()
    # A worker started with `&` by a script (deploy/run-embedded) has SIGINT and SIGQUIT
    # ignored, and Popen hands an ignored signal on to every rank: a job could not be
    # interrupted as it can on Slurm or Kubernetes.
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    if os.fork() > 0:
        os._exit(0)
    subreaper = become_subreaper()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    stopping: dict[str, Any] = {}

    def on_term(signum: int, _frame: object) -> None:
        stopping.setdefault("why", "cancelled")
        stopping.setdefault("at", time.monotonic())

    # Before the pid is written: a cancel that finds the pid is caught; one that does not
    # wrote cancel.json first, and supervise() reads it after this.
    signal.signal(signal.SIGTERM, on_term)
    try:
        fd = os.open(job_dir / "supervisor.pid", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        os._exit(0)  # another supervisor already runs this attempt
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        supervise(job_dir, stopping, procs, subreaper)
    except Exception as exc:  # a crash must leave no rank unsupervised, and a verdict
        with contextlib.suppress(Exception):
            signal_job(procs, signal.SIGKILL, subreaper)
        with contextlib.suppress(OSError):
            write_json(
                job_dir / "result.json",
                {"state": "lost", "exit_code": None, "reason": f"supervisor crashed: {exc!r}"},
            )
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
