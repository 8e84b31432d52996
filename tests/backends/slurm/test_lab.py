"""The backend against the real lab: slurmctld, four slurmd (gpu1-3: 4 x a100, gpu4: 7 x
1g.10gb MIG slices) and sshd on 127.0.0.1:2222, reached as the unprivileged slurmuser."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queue_service.backends.base import AllocatedNode, BackendError, MigInstanceInfo, RemoteState
from queue_service.backends.slurm import SlurmBackend, commands, script
from queue_service.backends.slurm.backend import log_name, slurm_job_id

from .conftest import kill_node, lab_backend, lab_up, request, wait_for
from .test_script import HOSTILE

pytestmark = pytest.mark.slurm

A100 = "A100-SXM4-80GB"


def running(status: object) -> bool:
    return getattr(status, "state", None) == RemoteState.RUNNING


def test_two_node_job_runs_srun_on_both_placed_nodes(backend: SlurmBackend) -> None:
    job = request(
        nodes=2,
        gpus_per_node=2,
        gpu_model=A100,
        command="srun bash -c 'echo $SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES'",
        placement=(AllocatedNode("gpu2"), AllocatedNode("gpu3")),
    )
    external_id = backend.submit(job).external_id
    assert wait_for(backend, external_id).state == RemoteState.SUCCEEDED
    lines = sorted(backend.logs(external_id).data.decode().split("\n")[:-1])
    assert lines == ["gpu2 gpus=0,1", "gpu3 gpus=0,1"]


def test_multi_node_training_starts_one_torchrun_per_node_with_its_rank(
    backend: SlurmBackend,
) -> None:
    # torchrun is not installed in the lab: a stand-in on PATH prints what it was given.
    bin_dir = Path("/tmp/gpuq-lab-bin")
    bin_dir.mkdir(exist_ok=True)
    stand_in = bin_dir / "torchrun"
    stand_in.write_text('#!/bin/sh\necho "$SLURMD_NODENAME $*"\n')
    stand_in.chmod(0o755)
    job = request(
        kind="training",
        nodes=2,
        gpus_per_node=4,
        gpu_model=A100,
        command=("train.py", "--lr", "0.1"),
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        placement=(AllocatedNode("gpu1"), AllocatedNode("gpu2")),
    )
    external_id = backend.submit(job).external_id
    assert wait_for(backend, external_id).state == RemoteState.SUCCEEDED
    port = 20000 + int(slurm_job_id(external_id)) % 20000
    assert sorted(backend.logs(external_id).data.decode().split("\n")[:-1]) == [
        f"gpu{n + 1} --nnodes=2 --nproc_per_node=4 --node_rank={n} --master_addr=gpu1"
        f" --master_port={port} train.py --lr 0.1"
        for n in (0, 1)
    ]


def test_failing_job_is_failed_with_its_exit_code(backend: SlurmBackend) -> None:
    external_id = backend.submit(request(command="echo oops >&2; exit 3")).external_id
    status = wait_for(backend, external_id)
    assert (status.state, status.exit_code, status.native_state) == (
        RemoteState.FAILED,
        3,
        "FAILED",
    )
    assert backend.logs(external_id, stream="stderr").data == b"oops\n"


@pytest.mark.slow
def test_time_limit_ends_in_timeout(backend: SlurmBackend) -> None:
    # Slurm counts limits in minutes and checks them every ~30 s: this takes 60-90 s.
    external_id = backend.submit(request(time_limit_s=5, command=("sleep", "300"))).external_id
    status = wait_for(backend, external_id, timeout_s=150)
    assert (status.state, status.native_state) == (RemoteState.TIMEOUT, "TIMEOUT")


def test_cancel_gives_the_job_its_grace_to_save(backend: SlurmBackend) -> None:
    command = "trap 'echo saved; exit 0' TERM; echo started; sleep 300 & wait"
    external_id = backend.submit(request(command=command)).external_id
    wait_for(backend, external_id, lambda s: backend.logs(external_id).data == b"started\n")
    started = time.monotonic()
    assert backend.cancel(external_id, grace_s=20) is True  # it ended because we asked
    assert time.monotonic() - started < 10  # it returned as soon as the job had ended
    assert backend.logs(external_id).data == b"started\nsaved\n"
    assert backend.poll([external_id])[external_id].state in RemoteState.TERMINAL


def test_cancel_of_a_job_that_already_ended_says_so_and_sends_nothing(
    backend: SlurmBackend,
) -> None:
    external_id = backend.submit(request(command=("true",))).external_id
    assert wait_for(backend, external_id).state == RemoteState.SUCCEEDED
    assert backend.cancel(external_id, grace_s=5) is False
    status = backend.poll([external_id])[external_id]
    assert (status.state, status.native_state) == (RemoteState.SUCCEEDED, "COMPLETED")


def test_cancel_kills_a_job_that_ignores_the_signal(backend: SlurmBackend) -> None:
    command = "trap '' TERM; echo started; sleep 300"
    external_id = backend.submit(request(command=command)).external_id
    wait_for(backend, external_id, lambda s: backend.logs(external_id).data == b"started\n")
    backend.cancel(external_id, grace_s=2)
    status = wait_for(backend, external_id)
    assert (status.state, status.native_state) == (RemoteState.CANCELLED, "CANCELLED")


def test_cancel_of_a_pending_job(backend: SlurmBackend) -> None:
    # More GPUs than gpu1 has free right now would make it wait; a begin time is simpler.
    job = request(command=("true",), placement=(AllocatedNode("gpu1"),), gpus_per_node=4)
    blocker = backend.submit(request(command=("sleep", "60"), gpus_per_node=4,
                                     placement=(AllocatedNode("gpu1"),))).external_id  # fmt: skip
    external_id = backend.submit(job).external_id
    assert wait_for(backend, external_id, lambda s: s.reason == "Resources").reason == "Resources"
    backend.cancel(external_id, grace_s=5)
    backend.cancel(blocker, grace_s=0)
    assert wait_for(backend, external_id).state == RemoteState.CANCELLED
    assert wait_for(backend, blocker).state == RemoteState.CANCELLED


def test_poll_through_sacct_tells_a_job_cancelled_while_it_waited_never_ran(
    backend: SlurmBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once squeue has forgotten a job (MinJobAge, 300 s in the lab), poll asks sacct, whose
    end is `CANCELLED by <uid>|0:0` for a job cancelled while it waited and for one cancelled
    while it ran: its Start and NodeList tell them apart, so gpuq charges only the one that
    ran. Cancelled at once, the waiter has a Start (the cancel's time) but no nodes."""
    on_gpu1 = {"gpus_per_node": 4, "placement": (AllocatedNode("gpu1"),)}
    blocker = backend.submit(request(command=("sleep", "300"), **on_gpu1)).external_id
    waiter = backend.submit(request(**on_gpu1)).external_id
    assert wait_for(backend, blocker, running).state == RemoteState.RUNNING
    assert wait_for(backend, waiter, lambda s: s.reason == "Resources").reason == "Resources"
    backend.cancel(waiter, grace_s=0)
    backend.cancel(blocker, grace_s=0)
    assert wait_for(backend, blocker).state == RemoteState.CANCELLED
    run = backend._run

    def squeue_forgot_them(command: str, stdin: bytes | None = None) -> Any:
        # squeue's real answer for ids it no longer knows (none of these ever existed).
        if command.startswith("squeue "):
            command = commands.squeue(["999998", "999999"])
        return run(command, stdin=stdin)

    monkeypatch.setattr(backend, "_run", squeue_forgot_them)
    # slurmdbd may record the ends a moment after slurmctld.
    ended = {i: wait_for(backend, i) for i in (waiter, blocker)}
    assert {i: (s.state, s.exit_code, s.started) for i, s in ended.items()} == {
        waiter: (RemoteState.CANCELLED, 0, False),
        blocker: (RemoteState.CANCELLED, 0, True),
    }


def test_a_job_that_ran_then_was_requeued_and_cancelled_while_it_waited_again_ran(
    backend: SlurmBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `requeue: true` Slurm runs a job again after a node failure or `scontrol
    requeue`; cancelled while it waits for that second run, it ends as a job cancelled while
    it waited: squeue's `CANCELLED|0|BeginTime`, and sacct's last record `CANCELLED by
    <uid>|0:0` with no nodes. It ran all the same, and gpuq charges it, both while squeue
    still shows it and once only sacct knows it (whose earlier records `-D` shows)."""
    requeuing = lab_backend(requeue=True)
    try:
        job = request(command=("sleep", "300"), placement=(AllocatedNode("gpu2"),))
        external_id = requeuing.submit(job).external_id
        assert wait_for(requeuing, external_id, running).state == RemoteState.RUNNING
        subprocess.run(["scontrol", "requeue", slurm_job_id(external_id)], check=True, timeout=30)
        # Slurm holds a requeued job back 120 s (BeginTime): it waits there.
        waiting = wait_for(requeuing, external_id, lambda s: s.reason == "BeginTime")
        assert (waiting.state, waiting.reason) == (RemoteState.QUEUED, "BeginTime")
        accounted = f"sacct -n -P -X -D -j {slurm_job_id(external_id)} -o State"
        deadline = time.monotonic() + 30  # slurmdbd records the first run a moment later
        while "REQUEUED" not in requeuing.connection.run(accounted).stdout:
            assert time.monotonic() < deadline, "slurmdbd never recorded the requeue"
            time.sleep(0.3)
        requeuing.cancel(external_id, grace_s=5)
        seen_by_squeue = wait_for(requeuing, external_id)
        run = requeuing._run

        def squeue_forgot_it(command: str, stdin: bytes | None = None) -> Any:
            # squeue's real answer for ids it no longer knows (none of these ever existed).
            if command.startswith("squeue "):
                command = commands.squeue(["999998", "999999"])
            return run(command, stdin=stdin)

        monkeypatch.setattr(requeuing, "_run", squeue_forgot_it)
        # Once slurmdbd has the cancel's details (seconds; squeue forgets a job only after
        # MinJobAge): until then the last record has no WorkDir, and whether the job ran is
        # not known (parse_sacct).
        seen_by_sacct = wait_for(
            requeuing,
            external_id,
            lambda s: s.state in RemoteState.TERMINAL and s.started is not None,
        )
    finally:
        requeuing.connection.close()
    assert {
        seen: (status.state, status.exit_code, status.started)
        for seen, status in (("squeue", seen_by_squeue), ("sacct", seen_by_sacct))
    } == {
        "squeue": (RemoteState.CANCELLED, 0, True),
        "sacct": (RemoteState.CANCELLED, 0, True),
    }


def test_mig_job_lands_on_the_mig_node_and_shows_in_inventory(backend: SlurmBackend) -> None:
    job = request(
        mig_profile="1g.10gb", command="echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES; sleep 30"
    )
    external_id = backend.submit(job).external_id
    wait_for(backend, external_id, lambda s: backend.logs(external_id).data != b"")
    node, slice_index = backend.logs(external_id).data.decode().split()
    assert (node, slice_index.isdigit()) == ("gpu4", True)
    gpu4 = next(n for n in backend.nodes() if n.name == "gpu4")
    assert sum(i.in_use for i in gpu4.mig_instances) == 1
    backend.cancel(external_id, grace_s=0)


def test_inventory_matches_the_lab_config(backend: SlurmBackend) -> None:
    nodes = {n.name: n for n in backend.nodes()}
    assert {(n.name, n.gpu_model, n.gpus, n.mig) for n in nodes.values()} == {
        ("gpu1", A100, 4, False),
        ("gpu2", A100, 4, False),
        ("gpu3", A100, 4, False),
        ("gpu4", A100, 1, True),
    }
    assert [(i.profile, i.start, i.size) for i in nodes["gpu4"].mig_instances] == [
        ("1g.10gb", s, 1) for s in range(7)
    ]
    assert all(isinstance(i, MigInstanceInfo) and i.gpu == 0 for i in nodes["gpu4"].mig_instances)


def test_submit_is_idempotent(backend: SlurmBackend) -> None:
    job = request(command=("sleep", "2"))
    first = backend.submit(job)
    again = backend.submit(job)
    assert (again.external_id, again.adopted, first.adopted) == (first.external_id, True, False)


def test_a_submit_interrupted_after_sbatch_is_adopted_by_name(backend: SlurmBackend) -> None:
    job = request(command=("sleep", "2"))
    # As if the worker died after sbatch, before it could record the job id.
    workdir = backend.workdir()
    assert backend.connection.make_dir(script.job_dir(workdir, job))
    text = script.render(job, backend.settings.script, workdir).encode()
    submitted = backend.connection.run("sbatch --parsable", stdin=text).stdout.strip()
    again = backend.submit(job)
    assert (slurm_job_id(again.external_id), again.adopted) == (submitted, True)
    assert log_name(again.external_id) == script.attempt_name(job)


def test_a_submit_interrupted_before_sbatch_submits_once(backend: SlurmBackend) -> None:
    job = request(command=("true",))
    assert backend.connection.make_dir(script.job_dir(backend.workdir(), job))
    result = backend.submit(job)
    assert not result.adopted
    assert backend.submit(job) == type(result)(result.external_id, adopted=True)


def test_a_retry_attempt_is_a_new_slurm_job(backend: SlurmBackend) -> None:
    job = request(command=("true",))
    first = backend.submit(job)
    retry = backend.submit(request(**{**job.__dict__, "attempt": 2}))
    assert not retry.adopted
    assert retry.external_id != first.external_id


@pytest.mark.parametrize(
    ("setting", "value", "words"),
    [
        ("partition", "nope", "Invalid partition name specified"),
        ("account", "nope", "Invalid account"),
    ],
)
def test_slurm_refusing_a_job_is_permanent(setting: str, value: str, words: str) -> None:
    backend = lab_backend(**{setting: value})
    with pytest.raises(BackendError, match=words) as raised:
        backend.submit(request())
    assert raised.value.permanent


def test_an_image_on_a_cluster_without_containers_is_refused_before_sbatch(
    slurm_lab: None,
) -> None:
    backend = lab_backend(containers="none")
    with pytest.raises(BackendError, match="runs no containers") as raised:
        backend.submit(request(image="nvcr.io/nvidia/pytorch:24.08-py3"))
    assert raised.value.permanent


def test_poll_costs_one_squeue_and_one_sacct_for_all_jobs(backend: SlurmBackend) -> None:
    ids = [backend.submit(request(command=("sleep", "20"))).external_id for _ in range(3)]
    calls = backend.connection.calls
    statuses = backend.poll([*ids, "999999"])
    assert backend.connection.calls - calls == 2
    assert statuses["999999"].state == RemoteState.LOST
    assert {statuses[i].state for i in ids} <= {RemoteState.QUEUED, RemoteState.RUNNING}
    calls = backend.connection.calls
    backend.poll(ids)
    assert backend.connection.calls - calls == 1  # all in squeue: no sacct
    for external_id in ids:
        backend.cancel(external_id, grace_s=0)


def test_logs_are_read_by_byte_offset(backend: SlurmBackend) -> None:
    external_id = backend.submit(request(command="printf 'hello world'; echo é >&2")).external_id
    wait_for(backend, external_id)
    assert backend.logs(external_id, offset=6, limit=3).data == b"wor"
    chunk = backend.logs(external_id, offset=6, limit=100)
    assert (chunk.data, chunk.next_offset, chunk.eof) == (b"world", 11, True)
    assert backend.logs(external_id, stream="stderr").data == "é\n".encode()


def test_a_logs_size_is_told_by_one_sftp_stat(slurm_lab: None) -> None:
    backend = lab_backend()  # not the shared one: its job ends by itself, nobody's is cancelled
    try:
        job = request(command="printf 'hello world'; echo é >&2")
        external_id = backend.submit(job).external_id
        wait_for(backend, external_id)
        calls = backend.connection.calls
        sizes = backend.log_size(external_id), backend.log_size(external_id, stream="stderr")
        assert sizes == (11, 3) and backend.connection.calls - calls == 2
    finally:
        backend.close()


def test_logs_of_a_job_not_started_yet_are_empty_not_an_error(backend: SlurmBackend) -> None:
    blocker = backend.submit(request(command=("sleep", "30"), gpus_per_node=4,
                                     placement=(AllocatedNode("gpu3"),))).external_id  # fmt: skip
    waiting = backend.submit(request(gpus_per_node=4, placement=(AllocatedNode("gpu3"),)))
    chunk = backend.logs(waiting.external_id)
    assert (chunk.data, chunk.eof) == (b"", False)
    backend.cancel(waiting.external_id, grace_s=0)
    backend.cancel(blocker, grace_s=0)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    name=st.sampled_from(HOSTILE),
    value=st.sampled_from(HOSTILE),
    arg=st.sampled_from(HOSTILE),
)
def test_hostile_strings_reach_the_job_literally(
    backend: SlurmBackend, name: str, value: str, arg: str
) -> None:
    printer = 'printf "%s\\0" "$GPUQ_JOB_NAME" "$HOSTILE" "$@"'
    job = request(name=name, env={"HOSTILE": value}, command=("bash", "-c", printer, "x", arg))
    external_id = backend.submit(job).external_id
    assert wait_for(backend, external_id).state == RemoteState.SUCCEEDED
    assert backend.logs(external_id).data.decode().split("\0")[:-1] == [name, value, arg]
    assert not Path("/tmp/gpuq-pwned").exists()


def test_a_killed_node_is_reported_as_node_failure(
    backend: SlurmBackend, restore_lab: None
) -> None:
    job = request(command=("sleep", "300"), placement=(AllocatedNode("gpu3"),))
    external_id = backend.submit(job).external_id
    wait_for(backend, external_id, running)
    kill_node("gpu3")
    # SlurmdTimeout=10: the controller declares the node dead after ~30 s.
    status = wait_for(backend, external_id, timeout_s=90)
    assert (status.state, status.native_state) == (RemoteState.NODE_FAILURE, "NODE_FAIL")
    gpu3 = next(n for n in backend.nodes() if n.name == "gpu3")
    assert gpu3.state == "down"
    lab_up()
    assert next(n for n in backend.nodes() if n.name == "gpu3").state == "up"


def test_a_killed_node_under_a_job_slurm_may_requeue_reads_as_waiting_not_as_a_failure(
    restore_lab: None,
) -> None:
    """With `requeue: true` Slurm itself runs the job again; were it read as a node failure,
    gpuq would retry it too and two copies would run."""
    backend = lab_backend(requeue=True)
    job = request(command=("sleep", "300"), placement=(AllocatedNode("gpu3"),))
    external_id = backend.submit(job).external_id
    wait_for(backend, external_id, running)
    kill_node("gpu3")
    status = wait_for(backend, external_id, lambda s: not running(s), timeout_s=90)
    assert (status.state, status.native_state) == (RemoteState.QUEUED, "PENDING")
    assert backend.cancel(external_id)
    assert wait_for(backend, external_id).state == RemoteState.CANCELLED


def test_a_restarted_controller_keeps_tracking_the_job(
    backend: SlurmBackend, restore_lab: None
) -> None:
    external_id = backend.submit(request(command="sleep 12; echo done")).external_id
    wait_for(backend, external_id, running)
    subprocess.run(["pkill", "-F", "/run/slurm/slurmctld.pid"], check=True)
    time.sleep(2)
    with pytest.raises(BackendError, match="Unable to contact slurm controller") as raised:
        backend.poll([external_id])
    assert not raised.value.permanent
    lab_up()
    # Still known, whether it finished while the controller was away or not.
    assert backend.poll([external_id])[external_id].state in (
        RemoteState.RUNNING,
        RemoteState.SUCCEEDED,
    )
    assert wait_for(backend, external_id).state == RemoteState.SUCCEEDED
    assert backend.logs(external_id).data == b"done\n"


def stop_sshd() -> None:
    """The listener and every session it serves (killing only the listener keeps sessions)."""
    subprocess.run(["pkill", "-F", "/var/lib/slurm-lab/ssh/sshd.pid"], check=True)
    subprocess.run(["pkill", "-f", "^sshd: slurmuser"], check=False)
    time.sleep(0.5)


def test_sshd_down_is_transient_and_the_backend_recovers(restore_lab: None) -> None:
    now = [0.0]
    backend = lab_backend(clock=lambda: now[0])
    assert backend.nodes()
    stop_sshd()
    with pytest.raises(BackendError) as down:
        backend.nodes()
    assert not down.value.permanent
    with pytest.raises(BackendError, match="next attempt in") as waiting:
        backend.nodes()  # within the backoff: fails fast, without touching the network
    assert not waiting.value.permanent
    lab_up()
    now[0] += 60
    assert len(backend.nodes()) == 4


def generated_key(tmp_path: Path, name: str) -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)], check=True
    )
    return tmp_path / name


def test_a_changed_host_key_is_refused_permanently(slurm_lab: None, tmp_path: Path) -> None:
    other = generated_key(tmp_path, "other").with_suffix(".pub").read_text().split()
    backend = lab_backend(known_hosts=f"[127.0.0.1]:2222 {other[0]} {other[1]}")
    with pytest.raises(BackendError, match=r"host key of 127\.0\.0\.1:2222 changed") as raised:
        backend.nodes()
    assert raised.value.permanent


def test_a_host_missing_from_known_hosts_is_refused_permanently(slurm_lab: None) -> None:
    pinned = lab_backend().settings.known_hosts.replace("[127.0.0.1]:2222", "[10.9.9.9]:22")
    with pytest.raises(BackendError, match="no pinned host key") as raised:
        lab_backend(known_hosts=pinned).nodes()
    assert raised.value.permanent


def test_a_wrong_client_key_fails_permanently_and_is_never_shown(
    slurm_lab: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key_text = generated_key(tmp_path, "client").read_text()
    backend = lab_backend(private_key=key_text, private_key_file=None)
    with pytest.raises(BackendError, match="authentication as slurmuser") as raised:
        backend.nodes()
    assert raised.value.permanent
    secret = key_text.split("\n")[1]
    for shown in (repr(backend), repr(backend.settings), str(raised.value), caplog.text):
        assert secret not in shown
        assert "PRIVATE KEY" not in shown
