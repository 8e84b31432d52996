"""Nothing a job of the local backend started outlives it, even what left its session.

A rank runs in a session and process group of its own, and used to be stopped by its group:
a process it started in a new session (`setsid`, a daemon's double fork) escaped that and
ran on after a cancel, a time limit or the job's own end, holding the job's GPUs. Slurm
(proctrack/cgroup) and Kubernetes (the pod) end everything a job started; the supervisor
does the same as a child subreaper (Linux): what the job orphans is reparented to it, and
every descendant left gets TERM, then KILL after the grace, before the verdict."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_service.backends.base import AllocatedNode, RemoteState
from queue_service.backends.local import LocalBackend
from queue_service.backends.local_runner import start_time
from tests.backends.test_local import (
    _config,
    alive,
    finished,
    gone_within,
    kill_everything_under,
    request,
    running,
    wait_for,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="a child subreaper is Linux's")

# A process in a session of its own that writes its pid to work/escaped.pid, then sleeps
# (exec: the pid written is the sleep's).
ESCAPE = "setsid sh -c 'echo $$ > escaped.pid; exec sleep 300' &"
# The same, deaf to SIGTERM.
ESCAPE_DEAF = "setsid sh -c 'trap \"\" TERM; echo $$ > escaped.pid; exec sleep 300' &"
WAIT_FOR_PIDFILE = "while [ ! -s escaped.pid ]; do sleep 0.01; done;"
# A daemon as daemons are made: fork, setsid, fork again, the parents exit; it ignores TERM.
DAEMON = f"""{sys.executable} -c '
import os, signal, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open("daemon.tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename("daemon.tmp", "escaped.pid")
time.sleep(300)
'"""


class Strays:
    """The processes a test's jobs started outside their process groups: killed at the end
    of the test whatever it did (if still the same process: pid and start time)."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int | None]] = []

    def add(self, pid: int) -> int:
        self.seen.append((pid, start_time(pid)))
        return pid

    def kill(self) -> None:
        for pid, start in self.seen:
            if start is not None and start_time(pid) == start:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def strays(tmp_path: Path) -> Iterator[Strays]:
    found = Strays()
    yield found
    found.kill()
    kill_everything_under(tmp_path)


@pytest.fixture
def backend(tmp_path: Path, strays: Strays) -> LocalBackend:
    return LocalBackend(_config(tmp_path))


def escaped_pid(backend: LocalBackend, eid: str, strays: Strays, timeout: float = 10) -> int:
    """The pid the job's escaping process wrote in its working directory."""
    path = backend._dir(eid) / "work" / "escaped.pid"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            return strays.add(int(path.read_text()))
        time.sleep(0.02)
    raise AssertionError(f"{eid} wrote no escaped.pid: {backend.poll([eid])[eid]}")


def session_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])


@pytest.mark.parametrize("escape", [ESCAPE, DAEMON], ids=["setsid", "double-fork"])
def test_a_cancel_stops_what_the_job_started_in_a_new_session(
    backend: LocalBackend, strays: Strays, escape: str
) -> None:
    eid = backend.submit(request(["/bin/sh", "-c", f"{escape}\nsleep 300"])).external_id
    pid = escaped_pid(backend, eid, strays)
    wait_for(backend, eid, running)
    rank = json.loads((backend._dir(eid) / "started.json").read_text())["pids"][0]
    assert session_of(pid) != session_of(rank), "the test's process did not leave the session"
    started = time.monotonic()
    assert backend.cancel(eid, grace_s=0.5) is True
    status = wait_for(backend, eid, finished)
    assert status.state == RemoteState.CANCELLED
    assert gone_within(pid, 3), "a process the cancelled job started in a new session runs on"
    assert time.monotonic() - started < 8  # the grace is 0.5 s: the KILL came after it


@pytest.mark.parametrize(
    ("exit_code", "state"), [(0, RemoteState.SUCCEEDED), (3, RemoteState.FAILED)]
)
def test_a_job_that_ends_on_its_own_leaves_nothing_of_a_new_session_behind_and_keeps_its_end(
    backend: LocalBackend, strays: Strays, exit_code: int, state: str
) -> None:
    script = f"{ESCAPE}\n{WAIT_FOR_PIDFILE} exit {exit_code}"
    eid = backend.submit(request(["/bin/sh", "-c", script])).external_id
    pid = escaped_pid(backend, eid, strays)
    status = wait_for(backend, eid, finished)
    assert (status.state, status.exit_code) == (state, exit_code)
    assert gone_within(pid, 3), "a process of a finished job runs on in a session of its own"


def test_an_escaped_process_deaf_to_sigterm_is_killed_after_the_grace_of_a_job_that_ended(
    backend: LocalBackend, strays: Strays
) -> None:
    # The cluster's grace (1 s) runs from the main process's end; then KILL.
    eid = backend.submit(
        request(["/bin/sh", "-c", f"{ESCAPE_DEAF}\n{WAIT_FOR_PIDFILE} exit 0"])
    ).external_id
    pid = escaped_pid(backend, eid, strays)
    status = wait_for(backend, eid, finished)
    assert (status.state, status.exit_code) == (RemoteState.SUCCEEDED, 0)
    assert gone_within(pid, 3), "a process deaf to SIGTERM outlived the grace"


def test_a_daemon_deaf_to_sigterm_is_killed_when_the_job_times_out(
    backend: LocalBackend, strays: Strays
) -> None:
    eid = backend.submit(
        request(["/bin/sh", "-c", f"{DAEMON}\nsleep 300"], time_limit_s=1)
    ).external_id
    pid = escaped_pid(backend, eid, strays)
    status = wait_for(backend, eid, finished)
    assert status.state == RemoteState.TIMEOUT
    assert gone_within(pid, 3), "a daemon of a timed-out job runs on"


def test_a_whole_escaped_tree_is_stopped_and_a_term_trap_still_runs(
    backend: LocalBackend, strays: Strays
) -> None:
    # The escaped process has children of its own, and a TERM trap that writes a file:
    # TERM comes first (as for the rank), KILL only after the grace.
    tree = (
        'setsid sh -c \'trap "echo bye > ../bye; exit 0" TERM; sleep 300 & echo $! > child.pid;'
        " echo $$ > escaped.pid; wait' &"
    )
    eid = backend.submit(request(["/bin/sh", "-c", f"{tree}\nsleep 300"])).external_id
    pid = escaped_pid(backend, eid, strays)
    child_file = backend._dir(eid) / "work" / "child.pid"
    child = strays.add(int(child_file.read_text()))
    wait_for(backend, eid, running)
    assert backend.cancel(eid, grace_s=5) is True
    assert wait_for(backend, eid, finished).state == RemoteState.CANCELLED
    assert gone_within(pid, 3) and gone_within(child, 3)
    assert (backend._dir(eid) / "bye").read_text() == "bye\n", "the escaped tree got no TERM"


def test_a_gang_rank_that_escapes_is_stopped_with_the_gang(
    backend: LocalBackend, strays: Strays
) -> None:
    # Rank 1 (its own stdout, GPUs, environment) escapes; rank 0 fails: the gang stops.
    placement = (AllocatedNode("n1", (0,)), AllocatedNode("n2", (0,)))
    script = (
        f'if [ "$GPUQ_NODE_RANK" = 1 ]; then {ESCAPE} sleep 300; else {WAIT_FOR_PIDFILE} exit 4; fi'
    )
    eid = backend.submit(request(["/bin/sh", "-c", script], nodes=2, placement=placement))
    pid = escaped_pid(backend, eid.external_id, strays)
    status = wait_for(backend, eid.external_id, finished)
    assert (status.state, status.exit_code) == (RemoteState.FAILED, 4)
    assert gone_within(pid, 3)


def test_stopping_one_job_leaves_another_jobs_escaped_process_and_strangers_alone(
    backend: LocalBackend, strays: Strays, tmp_path: Path
) -> None:
    # Every descendant of one supervisor is its job's: not another job's, even one that
    # escaped the same way, nor a process of the same user that is no job's.
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True, cwd=tmp_path)
    try:
        ours = backend.submit(request(["/bin/sh", "-c", f"{ESCAPE}\nsleep 300"])).external_id
        other = backend.submit(request(["/bin/sh", "-c", f"{ESCAPE}\nsleep 300"])).external_id
        mine, theirs = escaped_pid(backend, ours, strays), escaped_pid(backend, other, strays)
        assert backend.cancel(ours, grace_s=0.5) is True
        assert wait_for(backend, ours, finished).state == RemoteState.CANCELLED
        assert gone_within(mine, 3)
        assert alive(theirs), "cancelling one job killed what another job started"
        assert backend.poll([other])[other].state == RemoteState.RUNNING
        assert stranger.poll() is None, "a process that is no job's was killed"
    finally:
        stranger.kill()
        stranger.wait()


def zombies_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if fields[0] == "Z" and int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def test_the_supervisor_reaps_what_the_job_orphans_while_it_runs(
    backend: LocalBackend, strays: Strays
) -> None:
    # Orphans are the supervisor's children now: each that ends is waited for at once, or a
    # long job forking short-lived daemons would fill the pid table with zombies.
    script = "for i in 1 2 3 4 5 6 7 8 9 10; do (setsid true &); done; echo done; sleep 300"
    eid = backend.submit(request(["/bin/sh", "-c", script])).external_id
    job_dir = backend._dir(eid)
    wait_for(backend, eid, lambda s: (job_dir / "stdout").read_text() == "done\n")
    supervisor = int((job_dir / "supervisor.pid").read_text())
    deadline = time.monotonic() + 3
    while zombies_of(supervisor) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert zombies_of(supervisor) == []
    backend.cancel(eid, grace_s=0.5)
    assert wait_for(backend, eid, finished).state == RemoteState.CANCELLED


def test_an_escaped_process_of_a_job_whose_supervisor_died_does_not_run_on(
    backend: LocalBackend, strays: Strays
) -> None:
    # The supervisor is killed (OOM killer, kill -9): what the job started is reparented
    # past it; the job is lost, and what carries its GPUQ_JOB_ID and GPUQ_ATTEMPT is killed.
    eid = backend.submit(request(["/bin/sh", "-c", f"{ESCAPE}\nsleep 300"])).external_id
    pid = escaped_pid(backend, eid, strays)
    wait_for(backend, eid, running)
    os.kill(int((backend._dir(eid) / "supervisor.pid").read_text()), signal.SIGKILL)
    assert wait_for(backend, eid, finished).state == RemoteState.LOST
    assert gone_within(pid, 3), "a process of a job reported lost runs on in its own session"
