"""The local backend runs real processes: exit codes, cancel, time limits, gangs, logs, and a
worker restart that finds its jobs again (or lost)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
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
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(_config(tmp_path))


def _config(tmp_path: Path) -> ClusterConfig:
    return ClusterConfig(
        id=1,
        name="lab",
        kind="local",
        settings={
            "workdir": str(tmp_path),
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


def read_all(backend: LocalBackend, eid: str, stream: str = "stdout") -> str:
    return backend.logs(eid, 0, 1 << 20, stream).data.decode()


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


def test_a_missing_program_fails_with_127(backend: LocalBackend) -> None:
    eid = backend.submit(request(["/nonexistent/program"])).external_id
    status = wait_for(backend, eid, finished)
    assert (status.state, status.exit_code) == (RemoteState.FAILED, 127)


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
    job_dir = backend._dir(eid)
    assert (job_dir / "stdout").read_text() == "n1 0/2 0,1 127.0.0.1\n"
    assert (job_dir / "stdout.rank1").read_text() == "n2 1/2 2,3 127.0.0.1\n"


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
    req = request(["/bin/sh", "-c", "echo run >> ../runs.txt"])
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
