"""The local backend runs real processes: exit codes, cancel, time limits, gangs, logs, a
worker restart that finds its jobs again (or lost), and no process of a job outliving it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_service.backends import get_backend
from queue_service.backends.base import (
    AllocatedNode,
    BackendError,
    ClusterConfig,
    DispatchRequest,
    JobStatus,
    RemoteState,
)
from queue_service.backends.local import LocalBackend

_ids = iter(range(10**6))


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    yield LocalBackend(_config(tmp_path))
    kill_everything_under(tmp_path)


def kill_everything_under(workdir: Path) -> None:
    """Whatever a test left running there: supervisors (named by their job's directory),
    ranks and what they started (working in it), with their process groups."""
    marker = os.fsencode(workdir) + b"/"
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            pid = int(entry.name)
            cwd = Path(os.readlink(entry / "cwd"))
            if workdir in cwd.parents or marker in (entry / "cmdline").read_bytes():
                if os.getpgid(pid) != os.getpgrp():
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
                os.kill(pid, signal.SIGKILL)


def _config(tmp_path: Path) -> ClusterConfig:
    return ClusterConfig(
        id=1,
        name="lab",
        kind="local",
        settings={
            "workdir": str(tmp_path / "jobs dir ü"),  # a space and a non-ASCII letter on the way
            "grace_s": 1,
            "nodes": [
                {"name": "n1", "gpus": 4, "gpu_model": "SIM"},
                {"name": "n2", "gpus": 4, "gpu_model": "SIM"},
                {
                    "name": "m1",
                    "gpus": 1,
                    "gpu_model": "A100-SXM4-80GB",
                    "mig": True,
                    "mig_layout": [{"gpu": 0, "profile": "3g.40gb", "start": 4, "size": 4}],
                },
            ],
        },
    )


def request(command: Any, **kw: Any) -> DispatchRequest:
    kw.setdefault("placement", (AllocatedNode("n1", (0, 1)),))
    return DispatchRequest(
        job_id=f"00000000-0000-0000-0000-{next(_ids):012d}",
        team="vision",
        user="alice",
        name="t",
        kind="training",
        command=command,
        **kw,
    )


def wait_for(
    backend: LocalBackend, eid: str, done: Callable[[JobStatus], bool], timeout: float = 20
) -> JobStatus:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = backend.poll([eid])[eid]
        if done(status):
            return status
        time.sleep(0.05)
    raise AssertionError(f"{eid} did not get there: {backend.poll([eid])[eid]}")


def finished(s: JobStatus) -> bool:
    return s.state in RemoteState.TERMINAL


def running(s: JobStatus) -> bool:
    return s.state == RemoteState.RUNNING


def read_all(backend: LocalBackend, eid: str, stream: str = "stdout") -> str:
    return backend.logs(eid, 0, 1 << 20, stream).data.decode()


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return not alive(pid)


def printed_pid(backend: LocalBackend, eid: str, timeout: float = 10) -> int:
    """The pid a job printed on its first line of output."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        first = backend.logs(eid).data.split(b"\n", 1)
        if len(first) == 2:
            return int(first[0])
        time.sleep(0.05)
    raise AssertionError(f"{eid} printed no pid")


def processes_working_in(directory: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            cwd = Path(os.readlink(entry / "cwd"))
            if (cwd == directory or directory in cwd.parents) and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def test_a_successful_command_succeeds_with_its_output(backend: LocalBackend) -> None:
    eid = backend.submit(request(["/bin/sh", "-c", "echo hello; echo oops >&2"])).external_id
    status = wait_for(backend, eid, finished)
    assert (status.state, status.exit_code) == (RemoteState.SUCCEEDED, 0)
    assert read_all(backend, eid) == "hello\n"
    assert read_all(backend, eid, "stderr") == "oops\n"


def test_a_failing_command_reports_its_exit_code(backend: LocalBackend) -> None:
    eid = backend.submit(request("exit 3")).external_id
    status = wait_for(backend, eid, finished)
    assert (status.state, status.exit_code) == (RemoteState.FAILED, 3)


def test_a_missing_program_fails_with_127_and_never_started(backend: LocalBackend) -> None:
    eid = backend.submit(request(["/nonexistent/program"])).external_id
    status = wait_for(backend, eid, finished)
    assert (status.state, status.exit_code, status.started) == (RemoteState.FAILED, 127, False)


def test_a_program_that_cannot_run_fails_with_126_as_in_a_shell(
    backend: LocalBackend, tmp_path: Path
) -> None:
    """A file without execute permission: 126 "Permission denied", as a shell says. (An
    executable one the kernel cannot run is run by /bin/sh, as a shell runs it:
    test_local_runs_commands_as_slurm_does.py.)"""
    program = tmp_path / "not-executable"
    program.write_text("#!/bin/sh\necho hi\n")
    program.chmod(0o644)
    eid = backend.submit(request([str(program)])).external_id
    status = wait_for(backend, eid, finished)
    assert (status.state, status.exit_code) == (RemoteState.FAILED, 126)
    assert "Permission denied" in status.reason


def test_cancel_stops_a_running_job_with_sigterm(backend: LocalBackend) -> None:
    script = "trap 'echo got TERM; exit 143' TERM; echo started; while true; do sleep 0.05; done"
    eid = backend.submit(request(["/bin/sh", "-c", script])).external_id
    wait_for(backend, eid, lambda s: "started" in read_all(backend, eid))
    assert backend.cancel(eid, grace_s=5) is True
    status = wait_for(backend, eid, finished)
    assert status.state == RemoteState.CANCELLED
    assert "got TERM" in read_all(backend, eid)


def test_cancel_of_a_job_that_already_ended_says_so_and_changes_nothing(
    backend: LocalBackend,
) -> None:
    eid = backend.submit(request(["/bin/echo", "done"])).external_id
    wait_for(backend, eid, finished)
    assert backend.cancel(eid, grace_s=5) is False
    status = backend.poll([eid])[eid]
    assert (status.state, status.exit_code) == (RemoteState.SUCCEEDED, 0)


def test_cancel_of_a_job_whose_directory_is_gone_stops_nothing_and_poll_says_lost(
    backend: LocalBackend,
) -> None:
    eid = backend.submit(request(["/bin/echo", "done"])).external_id
    wait_for(backend, eid, finished)
    shutil.rmtree(backend.workdir / eid)  # an operator cleaned the work directory

    assert backend.cancel(eid, grace_s=5) is False

    assert backend.poll([eid])[eid].state == RemoteState.LOST


def test_cancel_kills_a_job_that_ignores_sigterm_after_the_grace(backend: LocalBackend) -> None:
    eid = backend.submit(request(["/bin/sh", "-c", "trap '' TERM; echo up; sleep 60"])).external_id
    wait_for(backend, eid, lambda s: "up" in read_all(backend, eid))
    started = time.monotonic()
    backend.cancel(eid, grace_s=0.5)
    status = wait_for(backend, eid, finished)
    assert status.state == RemoteState.CANCELLED
    assert time.monotonic() - started < 10


def test_a_job_over_its_time_limit_times_out(backend: LocalBackend) -> None:
    eid = backend.submit(request(["sleep", "60"], time_limit_s=1)).external_id
    status = wait_for(backend, eid, finished)
    assert status.state == RemoteState.TIMEOUT


def test_each_node_of_a_gang_gets_its_rank_and_gpus(backend: LocalBackend) -> None:
    placement = (AllocatedNode("n1", (0, 1)), AllocatedNode("n2", (2, 3)))
    cmd = "echo $GPUQ_NODE $GPUQ_NODE_RANK/$GPUQ_NNODES $CUDA_VISIBLE_DEVICES $MASTER_ADDR"
    eid = backend.submit(request(cmd, nodes=2, placement=placement)).external_id
    wait_for(backend, eid, finished)
    # Both ranks write the attempt's one stdout (as srun's tasks do), in either order.
    lines = sorted((backend._dir(eid) / "stdout").read_text().splitlines())
    assert lines == ["n1 0/2 0,1 127.0.0.1", "n2 1/2 2,3 127.0.0.1"]


def test_one_failing_rank_stops_the_whole_gang(backend: LocalBackend) -> None:
    placement = (AllocatedNode("n1", (0,)), AllocatedNode("n2", (0,)))
    cmd = 'if [ "$GPUQ_NODE_RANK" = 1 ]; then exit 5; fi; sleep 60'
    eid = backend.submit(request(cmd, nodes=2, placement=placement)).external_id
    status = wait_for(backend, eid, finished)
    assert (status.state, status.exit_code) == (RemoteState.FAILED, 5)


def test_a_mig_job_sees_its_slice(backend: LocalBackend) -> None:
    placement = (AllocatedNode("m1", mig_gpu=0, mig_profile="3g.40gb", mig_start=4),)
    eid = backend.submit(
        request("echo $GPUQ_MIG_PROFILE@$GPUQ_MIG_START $CUDA_VISIBLE_DEVICES", placement=placement)
    ).external_id
    wait_for(backend, eid, finished)
    assert read_all(backend, eid) == "3g.40gb@4 MIG-gpuq-m1-0-4\n"


def test_user_env_reaches_the_job_and_strings_stay_literal(backend: LocalBackend) -> None:
    hostile = "$(touch /tmp/gpuq-pwned) `id` ; rm -rf / \n#SBATCH --x 'q\" ü"
    eid = backend.submit(
        request(["printf", "%s|%s", hostile, "${HOME}"], env={"HOSTILE": hostile})
    ).external_id
    wait_for(backend, eid, finished)
    assert read_all(backend, eid) == f"{hostile}|${{HOME}}"
    assert not Path("/tmp/gpuq-pwned").exists()


def test_logs_are_read_by_byte_offsets(backend: LocalBackend) -> None:
    eid = backend.submit(request(["printf", "abcdefghij"])).external_id
    wait_for(backend, eid, finished)
    first = backend.logs(eid, 0, 4)
    rest = backend.logs(eid, first.next_offset, 100)
    assert (first.data, first.next_offset, first.eof) == (b"abcd", 4, False)
    assert (rest.data, rest.next_offset, rest.eof) == (b"efghij", 10, True)


@pytest.mark.parametrize("offset", [10, 11, 2**40, 2**62])
def test_an_offset_at_or_past_the_end_reads_nothing(backend: LocalBackend, offset: int) -> None:
    # A seek past what the filesystem allows fails with EINVAL; no seek is made there.
    eid = backend.submit(request(["printf", "abcdefghij"])).external_id
    wait_for(backend, eid, finished)
    chunk = backend.logs(eid, offset, 100)
    assert (chunk.data, chunk.next_offset, chunk.eof) == (b"", offset, True)


def test_a_repeated_submit_adopts_the_first_and_runs_once(backend: LocalBackend) -> None:
    req = request(["/bin/sh", "-c", "echo run >> ../../runs.txt"])  # from <attempt>/work
    first = backend.submit(req)
    again = backend.submit(req)
    assert (first.adopted, again.adopted, first.external_id) == (False, True, again.external_id)
    wait_for(backend, first.external_id, finished)
    runs = backend._dir(first.external_id).parent / "runs.txt"
    assert runs.read_text() == "run\n"


def test_a_restarted_worker_finds_its_running_job(tmp_path: Path) -> None:
    before = LocalBackend(_config(tmp_path))
    eid = before.submit(request(["sleep", "2"])).external_id
    wait_for(before, eid, lambda s: s.state == RemoteState.RUNNING)
    after = LocalBackend(_config(tmp_path))  # a new process's view of the same directory
    assert after.poll([eid])[eid].state == RemoteState.RUNNING
    assert wait_for(after, eid, finished).state == RemoteState.SUCCEEDED


def test_a_job_whose_supervisor_died_is_lost(backend: LocalBackend) -> None:
    eid = backend.submit(request(["sleep", "30"])).external_id
    wait_for(backend, eid, lambda s: s.state == RemoteState.RUNNING)
    job_dir = backend._dir(eid)
    os.kill(int((job_dir / "supervisor.pid").read_text()), signal.SIGKILL)
    for pid in json.loads((job_dir / "started.json").read_text())["pids"]:
        os.killpg(pid, signal.SIGKILL)
    assert wait_for(backend, eid, finished).state == RemoteState.LOST


def test_unknown_ids_are_lost_and_path_tricks_are_refused(backend: LocalBackend) -> None:
    assert backend.poll(["nope/1"])["nope/1"].state == RemoteState.LOST
    with pytest.raises(BackendError):
        backend.logs("../../etc/1")
    with pytest.raises(BackendError):
        backend.logs("x/../../1")


def test_inventory_reports_configured_nodes_and_mig_layouts(backend: LocalBackend) -> None:
    nodes = {n.name: n for n in backend.nodes()}
    assert (nodes["n1"].gpus, nodes["n1"].gpu_model, nodes["n1"].mig) == (4, "SIM", False)
    assert [(m.profile, m.start) for m in nodes["m1"].mig_instances] == [("3g.40gb", 4)]
    backend.apply_mig_layout("m1", 0, [{"profile": "1g.10gb", "start": 0, "size": 1}])
    assert [(m.profile, m.start) for m in backend.nodes()[2].mig_instances] == [("1g.10gb", 0)]


def test_the_registry_builds_one_backend_per_cluster_lazily(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert get_backend(config) is get_backend(config)
    with pytest.raises(BackendError, match="unknown cluster kind"):
        get_backend(ClusterConfig(id=9, name="x", kind="mainframe"))


# --- no process of a job outlives it ---------------------------------------------------------


def test_a_finished_job_leaves_no_process_of_its_own_running(backend: LocalBackend) -> None:
    # A background process the rank started stays in the rank's process group: the job's GPUs
    # go to the next job, so it goes too (on Slurm and Kubernetes the step's cgroup or the
    # container ends with the job).
    eid = backend.submit(request(["/bin/sh", "-c", "sleep 30 & echo $!; exit 0"])).external_id
    status = wait_for(backend, eid, finished)
    assert (status.state, status.exit_code) == (RemoteState.SUCCEEDED, 0)
    assert not alive(printed_pid(backend, eid)), "a process of the finished job still runs"


@pytest.mark.parametrize("how", ["cancel", "timeout"])
def test_a_process_of_the_job_that_ignores_sigterm_is_killed_after_the_grace(
    backend: LocalBackend, how: str
) -> None:
    # The rank's leader exits on TERM; a child of it ignores TERM: the leader's exit does not
    # end the grace the KILL comes after.
    script = "(trap '' TERM; exec sleep 30) & echo $!; trap 'exit 143' TERM; echo up; wait"
    kw: dict[str, Any] = {"time_limit_s": 1} if how == "timeout" else {}
    eid = backend.submit(request(["/bin/sh", "-c", script], **kw)).external_id
    child = printed_pid(backend, eid)
    if how == "cancel":
        wait_for(backend, eid, running)
        assert backend.cancel(eid, grace_s=0.5) is True
    status = wait_for(backend, eid, finished)
    assert status.state == (RemoteState.CANCELLED if how == "cancel" else RemoteState.TIMEOUT)
    # grace 0.5 s (cancel) or 1 s (the cluster's, for a timeout): by the verdict, nothing left.
    assert not alive(child), "a process that ignored SIGTERM outlived the grace"


def test_the_ranks_of_a_job_whose_supervisor_died_do_not_run_on(backend: LocalBackend) -> None:
    # The supervisor is killed (OOM killer, kill -9): the job is lost and its GPUs freed, so
    # its rank must not run on unsupervised, without its time limit.
    eid = backend.submit(request(["sleep", "30"], time_limit_s=60)).external_id
    wait_for(backend, eid, running)
    job_dir = backend._dir(eid)
    rank = json.loads((job_dir / "started.json").read_text())["pids"][0]
    os.kill(int((job_dir / "supervisor.pid").read_text()), signal.SIGKILL)
    assert wait_for(backend, eid, finished).state == RemoteState.LOST
    assert gone_within(rank, 3), "the rank of a job reported lost still runs"


def test_a_supervisor_that_crashes_kills_the_ranks_it_started(backend: LocalBackend) -> None:
    # Here it cannot write started.json (a directory is in the way, as a full disk would
    # refuse it) once the rank runs: the verdict says so, and no process of the job is left.
    req = request(["sleep", "30"])
    job_dir = backend._dir(f"{req.job_id}/{req.attempt}")
    (job_dir / "started.json").mkdir(parents=True)
    eid = backend.submit(req).external_id
    status = wait_for(backend, eid, finished)
    assert status.state == RemoteState.LOST
    assert "supervisor crashed" in status.reason
    assert processes_working_in(job_dir) == []


def test_a_half_written_cancel_file_neither_crashes_the_supervisor_nor_leaves_ranks_running(
    backend: LocalBackend,
) -> None:
    # Read as the time limit stops the job, an empty cancel.json (what an interrupted write
    # would leave) keeps the cluster's grace: the job times out as it should.
    eid = backend.submit(request(["sleep", "30"], time_limit_s=1)).external_id
    job_dir = backend._dir(eid)
    (job_dir / "cancel.json").write_text("")
    wait_for(backend, eid, running)
    rank = json.loads((job_dir / "started.json").read_text())["pids"][0]
    status = wait_for(backend, eid, finished)
    assert status.state == RemoteState.TIMEOUT, status.reason
    assert not alive(rank)


# --- the job's working directory is its own, gpuq's files are beside it ---------------------


def test_a_job_that_writes_result_json_in_its_working_directory_is_followed_as_usual(
    backend: LocalBackend,
) -> None:
    # A job saving its metrics as ./result.json is not taken for the supervisor's verdict,
    # and its file is kept: the ranks run in work/ of the attempt's directory.
    script = """echo "$PWD"; printf '{"loss": 0.1}' > result.json; sleep 1"""
    eid = backend.submit(request(["/bin/sh", "-c", script])).external_id
    status = wait_for(backend, eid, finished)  # polled every 50 ms meanwhile
    assert (status.state, status.exit_code) == (RemoteState.SUCCEEDED, 0)
    cwd = Path(read_all(backend, eid).splitlines()[0])
    assert cwd == backend._dir(eid) / "work"
    assert (cwd / "result.json").read_text() == '{"loss": 0.1}'


@pytest.mark.parametrize(
    "content",
    [
        "",
        "not json",
        "[1]",
        '{"loss": 0.1}',
        '{"state": "exploded"}',
        '{"state": "failed", "exit_code": "3"}',
    ],
)
def test_a_result_json_that_is_no_verdict_is_not_taken_for_one(
    backend: LocalBackend, content: str
) -> None:
    # Jobs run as the same user and can still write gpuq's result.json (../result.json):
    # while the supervisor runs, the job is followed as usual, and its verdict replaces it.
    eid = backend.submit(request(["sleep", "30"])).external_id
    wait_for(backend, eid, running)
    (backend._dir(eid) / "result.json").write_text(content)
    assert backend.poll([eid])[eid].state == RemoteState.RUNNING
    assert backend.logs(eid).eof is False
    assert backend.cancel(eid, grace_s=0.5) is True, "a running job taken for ended"
    assert wait_for(backend, eid, finished).state == RemoteState.CANCELLED


def test_a_job_whose_supervisor_is_gone_leaving_no_verdict_of_its_own_is_lost_saying_why(
    backend: LocalBackend,
) -> None:
    eid = backend.submit(request(["sleep", "30"])).external_id
    wait_for(backend, eid, running)
    job_dir = backend._dir(eid)
    (job_dir / "result.json").write_text('{"state": 7}')
    os.kill(int((job_dir / "supervisor.pid").read_text()), signal.SIGKILL)
    status = wait_for(backend, eid, finished)
    assert status.state == RemoteState.LOST
    assert "result.json is not its verdict" in status.reason


@pytest.mark.django_db(transaction=True)
def test_one_jobs_result_json_does_not_stop_the_embedded_loop_for_every_team(
    people: dict[str, Any], local_cluster: Any
) -> None:
    # The same, seen from the service: a poll that raised would fail sync_cluster and
    # run_once every round, following, scheduling and dispatching nothing of any team.
    from queue_service.jobs.dispatch import run_once
    from queue_service.jobs.models import Job
    from queue_service.jobs.services import submit_job
    from tests.conftest import spec

    submit_job(  # alice's job: writes result.json, then runs 10 s
        people["alice"],
        spec(command=["/bin/sh", "-c", """printf '{"loss": 0.1}' > result.json; sleep 10"""]),
    )
    other = submit_job(people["charlie"], spec(command=["sleep", "1"])).job
    errors: list[BaseException] = []
    deadline = time.monotonic() + 8  # charlie's job ends after 1 s; alice's runs 10 s
    try:
        while time.monotonic() < deadline and not other.is_terminal:
            try:
                run_once()
            except Exception as exc:  # what gpuq_worker logs before its next round
                errors.append(exc)
            other.refresh_from_db()
            time.sleep(0.2)
    finally:
        kill_everything_under(Path(local_cluster.settings["workdir"]))
    assert other.state == Job.State.SUCCEEDED, (
        f"charlie's job is {other.state!r} 8 s on: {len(errors)} rounds failed, e.g. {errors[:1]!r}"
    )
    assert not errors


# --- a supervisor is known by its job's directory, not by its pid alone --------------------


def test_a_recycled_pid_of_another_jobs_supervisor_neither_revives_nor_cancels_it(
    backend: LocalBackend,
) -> None:
    # After a reboot (or a pid wrap) a dead job's supervisor.pid may name the supervisor of
    # another job.
    dead = backend.submit(request(["sleep", "30"])).external_id
    other = backend.submit(request(["sleep", "30"])).external_id
    wait_for(backend, dead, running)
    wait_for(backend, other, running)
    dead_dir, other_dir = backend._dir(dead), backend._dir(other)
    os.kill(int((dead_dir / "supervisor.pid").read_text()), signal.SIGKILL)
    for pid in json.loads((dead_dir / "started.json").read_text())["pids"]:
        os.killpg(pid, signal.SIGKILL)
    assert wait_for(backend, dead, finished).state == RemoteState.LOST
    # The kernel hands the dead supervisor's pid to the other job's supervisor.
    (dead_dir / "supervisor.pid").write_text((other_dir / "supervisor.pid").read_text())
    assert backend.poll([dead])[dead].state == RemoteState.LOST, "a dead job looks alive"
    backend.cancel(dead, grace_s=0.5)  # a user cancels the job that looks alive
    time.sleep(1.5)
    assert backend.poll([other])[other].state == RemoteState.RUNNING, (
        "cancelling one job stopped another"
    )


def test_a_cancel_before_the_supervisor_wrote_its_pid_still_stops_the_job(
    backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # submit() returns once the launcher's first fork exits; the supervisor writes its pid
    # after that. A cancel in between (a job cancelled while dispatching is stopped as soon
    # as submit names it) finds no pid to signal: the supervisor reads cancel.json instead.
    # Made certain here by holding the launch back until the cancel is made.
    launches: list[tuple[Any, dict[str, Any]]] = []
    real_run = subprocess.run

    def held(argv: Any, **kw: Any) -> subprocess.CompletedProcess[bytes]:
        launches.append((argv, kw))
        return subprocess.CompletedProcess(argv, 0, b"", b"")

    monkeypatch.setattr(subprocess, "run", held)  # what local.py launches the supervisor with
    eid = backend.submit(request(["sleep", "30"])).external_id
    monkeypatch.undo()
    assert backend.cancel(eid, grace_s=0.5) is True
    argv, kw = launches[0]
    real_run(argv, **kw)  # the supervisor gets there now
    status = wait_for(backend, eid, finished, timeout=8)
    assert status.state == RemoteState.CANCELLED
