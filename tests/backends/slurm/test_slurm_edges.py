"""Edges of the Slurm backend: what a job's env, logs, cancel and inventory must survive.

Most run against the real lab (deploy/slurm-lab); the rest are pure (script, parsers) or use an
in-process SSH server that misbehaves the way a loaded login node can."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import paramiko
import pytest

from queue_service.backends.base import BackendError, RemoteState
from queue_service.backends.slurm import SlurmBackend, parsers, script
from queue_service.backends.slurm.backend import slurm_job_id
from queue_service.backends.slurm.ssh import SSHConnection
from scheduler import mig

from .conftest import lab_backend, request, wait_for
from .sshd_fakes import LetsAnyoneIn, sshd

A100 = "A100-SXM4-80GB"


def running(status: object) -> bool:
    return getattr(status, "state", None) == RemoteState.RUNNING


# -- env: what the user set is what the job sees -----------------------------------------------


@pytest.mark.slurm
def test_env_names_bash_treats_specially_reach_the_job_as_given(backend: SlurmBackend) -> None:
    """The spec accepts any [A-Za-z_][A-Za-z0-9_]* name outside GPUQ_/SLURM_; the batch script
    sets them with bash `export`, so bash's readonly (UID, EUID, PPID) and dynamic (RANDOM,
    SHLVL, LINENO, BASHPID...) variables never reach the job as the user gave them."""
    env = {"UID": "4242", "RANDOM": "7", "SHLVL": "5", "LINENO": "12"}
    printer = 'for k in UID RANDOM SHLVL LINENO; do printf "%s=%s\\n" "$k" "$(printenv "$k")"; done'
    external_id = backend.submit(request(env=env, command=("sh", "-c", printer))).external_id
    assert wait_for(backend, external_id).state == RemoteState.SUCCEEDED
    seen = dict(line.split("=", 1) for line in backend.logs(external_id).data.decode().split())
    stderr = backend.logs(external_id, stream="stderr").data.decode()
    assert (seen, stderr) == (env, "")


def test_env_names_bash_treats_specially_are_set_on_the_launch_line_not_exported() -> None:
    env = {"UID": "4242", "RANDOM": "7"}
    text = script.render(request(env=env, command=("true",)), script.ScriptOptions(), "/w")
    assert "export UID" not in text and "export RANDOM" not in text
    assert text.endswith("\nexec env -- UID=4242 RANDOM=7 true\n")


def test_an_image_job_keeps_the_users_env_over_the_images() -> None:
    job = request(image="ubuntu:22.04", env={"PATH": "/opt/x"}, command=("true",))
    assert script.launch(job, script.ScriptOptions()) == (
        "gpuq_srun=$(command -v srun) || gpuq_srun=srun\n"
        'exec env -- PATH=/opt/x "$gpuq_srun" --container-image=ubuntu:22.04'
        " --container-env=PATH --nodes=1 --ntasks=1 true"
    )


def test_multi_node_training_hands_the_users_env_to_torchrun_past_its_bash() -> None:
    """The per-node `bash -c` wrapper would drop RANDOM and rewrite LINENO: torchrun gets the
    user's env from an `env --` after it, and the user's MASTER_ADDR reaches its flags."""
    env = {"RANDOM": "7", "MASTER_ADDR": "h0", "QUOTED": "it's"}
    job = request(kind="training", nodes=2, gpus_per_node=4, command=("t.py", "a b"), env=env)
    line = script.launch(job, script.ScriptOptions())
    with tempfile.TemporaryDirectory() as bin_dir:
        fakes = {
            "torchrun": 'printf "%s|" "$@"; echo; printenv RANDOM QUOTED',
            "srun": 'exec "$@"',
        }
        for name, body in fakes.items():
            with open(f"{bin_dir}/{name}", "w") as handle:
                handle.write(f"#!/bin/sh\n{body}\n")
            os.chmod(f"{bin_dir}/{name}", 0o700)
        shown = subprocess.run(
            ["bash", "-c", f"export MASTER_PORT=29500 SLURM_NODEID=1; {line}"],
            env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    assert shown == (
        "--nnodes=2|--nproc_per_node=4|--node_rank=1|--master_addr=h0|--master_port=29500|"
        "t.py|a b|\n7\nit's\n"
    )


@pytest.mark.slurm
@pytest.mark.django_db
def test_an_env_the_spec_accepts_fits_in_a_batch_script(backend: SlurmBackend, teams: Any) -> None:
    """256 variables of 32 KiB each pass the spec, but sbatch refuses a script over its 4 MB
    limit: the job is accepted (201) and then fails at dispatch with a message about a
    'Pathname ... too long'. Either the spec says no (a 400 at the env field) or the job runs."""
    from queue_service.jobs.spec import JobSpecSerializer
    from tests.conftest import spec

    env = {f"DATA_{i}": "x" * 32768 for i in range(140)}
    serializer = JobSpecSerializer(data=spec(env=env, gpus_per_node=0))
    if not serializer.is_valid():
        assert "env" in serializer.errors
        return
    try:
        external_id = backend.submit(request(env=env, command=("true",))).external_id
    except BackendError as exc:
        pytest.fail(f"the spec accepted the job, the cluster refused it: {exc.message}")
    assert wait_for(backend, external_id).state == RemoteState.SUCCEEDED


# -- logs of a job Slurm requeues (setting requeue: true) --------------------------------------


@pytest.mark.slurm
def test_a_job_slurm_requeues_keeps_its_first_runs_log_and_its_offsets(
    backend: SlurmBackend,
) -> None:
    """With `requeue: true` Slurm runs the job again after a node failure or a requeue. Its
    output file is opened in truncate mode again: what the first run wrote is gone, and a
    reader that follows by byte offset continues in the middle of the second run."""
    requeuing = lab_backend(requeue=True)
    try:
        command = 'echo "run ${SLURM_RESTART_COUNT:-0} started"; sleep 5; echo finished'
        external_id = requeuing.submit(request(command=command)).external_id
        wait_for(requeuing, external_id, lambda s: requeuing.logs(external_id).data != b"")
        first = requeuing.logs(external_id)
        assert first.data == b"run 0 started\n"
        subprocess.run(["scontrol", "requeue", slurm_job_id(external_id)], check=True, timeout=30)
        # Slurm holds a requeued job back 120 s (BeginTime): start it now.
        wait_for(requeuing, external_id, lambda s: s.reason == "BeginTime", timeout_s=30)
        time.sleep(3)  # let the first run's step finish its cleanup on the node
        update = ["scontrol", "update", f"jobid={slurm_job_id(external_id)}", "StartTime=now"]
        subprocess.run(update, check=True, timeout=30)
        assert wait_for(requeuing, external_id, timeout_s=60).state == RemoteState.SUCCEEDED
        rest = requeuing.logs(external_id, offset=first.next_offset)
        whole = requeuing.logs(external_id).data
    finally:
        requeuing.connection.close()
    assert whole.startswith(b"run 0 started\n")
    assert rest.data.startswith((b"run 1 started\n", b"finished\n"))


# -- cancel ------------------------------------------------------------------------------------


@pytest.mark.slurm
def test_a_job_that_ends_between_cancels_poll_and_its_term_is_reported_as_ended(
    backend: SlurmBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cancel() polls (RUNNING), then sends `scancel --signal=TERM --full`. A job that ends
    in between makes that scancel fail ("Invalid job id specified", rc 1): cancel raises a
    transient BackendError instead of returning False (it had ended on its own)."""
    external_id = backend.submit(request(command=("sleep", "2"))).external_id
    assert wait_for(backend, external_id, running).state == RemoteState.RUNNING
    run = backend._run

    def job_ends_first(command: str, stdin: bytes | None = None) -> Any:
        if command.startswith("scancel --signal"):
            wait_for(backend, external_id)  # the job ends on its own, here
        return run(command, stdin=stdin)

    monkeypatch.setattr(backend, "_run", job_ends_first)
    assert backend.cancel(external_id, grace_s=5) is False
    status = backend.poll([external_id])[external_id]
    assert (status.state, status.native_state) == (RemoteState.SUCCEEDED, "COMPLETED")


# -- inventory: MIG nodes with several profiles ------------------------------------------------


def test_mig_slices_of_several_profiles_are_packed_onto_as_few_gpus_as_the_geometry_allows() -> (
    None
):
    """Two A100s each split 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb (a valid, common layout).
    sinfo reports GRES grouped by type, never interleaved per GPU, and the greedy packing in
    that order needs three GPUs: the node is reported with a GPU it does not have."""
    per_gpu = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    table = mig.geometry(A100)
    assert table is not None and mig.place(table, per_gpu) is not None  # the layout is real
    gres_map = {A100: "a100"}
    for gres in (
        "gpu:3g.40gb:2,gpu:2g.20gb:2,gpu:1g.10gb:4",  # as gres.conf lists them
        "gpu:1g.10gb:4,gpu:2g.20gb:2,gpu:3g.40gb:2",  # sorted by type name
    ):
        line = f"gpu9|idle|{gres}|gpu:1g.10gb:0(IDX:N/A)|a100,mig|gpu|none\n"
        (node,) = parsers.parse_sinfo(line, gres_map)
        assert (node.gpu_model, node.mig, node.gpus) == (A100, True, 2), gres
        assert len(node.mig_instances) == 8


def test_a_requeued_jobs_output_is_appended_to() -> None:
    text = script.render(request(), script.ScriptOptions(requeue=True), "/w")
    assert "#SBATCH --open-mode=append\n" in text


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:3g.40gb:8,gpu:1g.10gb:32", 8),  # 3g at 4 + four 1g below it, on 8 GPUs
        ("gpu:4g.40gb:8,gpu:3g.40gb:8", 8),
        ("gpu:1g.10gb:5,gpu:2g.20gb:24,gpu:1g.10gb:3", 8),  # 2g + 2g + 2g + 1g, type split
    ],
)
def test_full_mig_nodes_report_the_gpus_they_have(gres: str, gpus: int) -> None:
    line = f"gpu9|idle|{gres}|gpu:1g.10gb:0(IDX:N/A)|a100,mig|gpu|none\n"
    (node,) = parsers.parse_sinfo(line, {A100: "a100"})
    assert node.gpus == gpus
    for gpu in range(gpus):
        held = [
            mig.MigInstance(i.profile, i.start, i.size) for i in node.mig_instances if i.gpu == gpu
        ]
        assert mig.validate_layout(A100, held) == []


def test_mig_in_use_flags_follow_the_gres_index_order_per_profile() -> None:
    slices = [("1g.10gb", False), ("3g.40gb", True), ("1g.10gb", True), ("1g.10gb", False)]
    count, instances = parsers.pack_mig(A100, slices, first_gpu=2)
    assert count == 1
    assert [(i.gpu, i.profile, i.start, i.in_use) for i in instances] == [
        (2, "1g.10gb", 1, False),
        (2, "1g.10gb", 2, True),
        (2, "1g.10gb", 3, False),
        (2, "3g.40gb", 4, True),
    ]


# -- every remote call has a timeout -----------------------------------------------------------


class _SilentSftp(LetsAnyoneIn):
    """An sshd that accepts the sftp subsystem and then never says a word (an sftp-server
    stuck on a hung home directory mount, or a loaded login node)."""

    def check_channel_subsystem_request(self, channel: paramiko.Channel, name: str) -> bool:
        return True  # accepted, but no SFTP server ever answers the client's version


@pytest.fixture
def silent_sftp() -> Iterator[SSHConnection]:
    with sshd(_SilentSftp()) as connection:
        yield connection


def test_an_sftp_session_the_login_node_never_starts_times_out(
    silent_sftp: SSHConnection,
) -> None:
    """SFTPClient.from_transport waits for the server's version with no timeout (the channel's
    timeout is set only after it returns), holding the connection's SFTP lock: every later
    logs(), submit() and workdir() of that worker waits behind it, forever."""
    outcome: dict[str, Any] = {}

    def read() -> None:
        try:
            outcome["data"] = silent_sftp.read_file("/tmp/job.out", 0, 100)
        except BackendError as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=read, daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(15)
    assert not worker.is_alive(), "read_file still waiting after 15 s (timeout is 1 s)"
    assert isinstance(outcome.get("error"), BackendError)
    assert time.monotonic() - started < 10
    silent_sftp.close()


def test_multi_node_training_keeps_env_values_out_of_the_process_table() -> None:
    """The per-node `bash -c` stays in `ps` for the job's life, readable by every user of the
    node: only the names bash itself would rewrite are passed to it as arguments; a secret
    reaches torchrun through srun's environment."""
    env = {"WANDB_API_KEY": "s3cret", "RANDOM": "7"}
    job = request(kind="training", nodes=2, gpus_per_node=4, command=("t.py",), env=env)
    line = script.launch(job, script.ScriptOptions()).split("\n")[-1]
    words = shlex.split(line.removeprefix("exec "))
    step = words[words.index("$gpuq_srun") :]  # what runs for the job's life on each node
    assert not any("s3cret" in word for word in step)
    assert "RANDOM=7" in step
