"""An sbatch whose answer is lost, or that Slurm refuses only for now, is a transient error:
dispatch retries the same attempt, and the retry adopts the job if Slurm has it (by its unique
name and the attempt's directory, docs/slurm.md "What a submission does"). Only Slurm refusing
this job for good (bad partition, invalid account, unsatisfiable request) fails it.

- No exit status (SSHConnection.run's rc -1): the connection dropped while sbatch ran, or the
  login node killed the command (the OOM killer, a process watchdog). sbatch may have made
  the job: "a lost answer is no proof of a lost create" (ARCHITECTURE.md).
- A limit on the jobs the submit account has in Slurm (QOSMaxSubmitJobPerUserLimit,
  AssocMaxSubmitJobLimit, the Grp forms): the same sbatch succeeds once some of them end,
  and by default every team's jobs are submitted as the cluster's one user.

The lab tests use a backend of their own (not the shared `backend` fixture, whose
`scancel -u` would stop the jobs of everyone else using the lab at the same time)."""

from __future__ import annotations

import dataclasses
import subprocess
import threading
import time
import uuid
from typing import Any

import pytest

from queue_service.backends.base import BackendError
from queue_service.backends.slurm import SlurmBackend, parsers, script
from queue_service.backends.slurm.ssh import Result

from .conftest import lab_backend, request

POLICY = "Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"  # noqa: E501


@pytest.mark.parametrize(
    ("stderr", "rc", "permanent"),
    [
        (f"sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: {POLICY}\n", 1, False),
        (f"sbatch: error: QOSMaxSubmitJobPerAccountLimit\nsbatch: error: {POLICY}\n", 1, False),
        (f"sbatch: error: AssocMaxSubmitJobLimit\nsbatch: error: {POLICY}\n", 1, False),
        (f"sbatch: error: QOSGrpSubmitJobsLimit\nsbatch: error: {POLICY}\n", 1, False),
        (f"sbatch: error: AssocGrpSubmitJobsLimit\nsbatch: error: {POLICY}\n", 1, False),
        ("", -1, False),  # no exit status came back
        ("sbatch: error: Batch job submission failed: Invalid account", 1, True),
        (f"sbatch: error: QOSMaxWallDurationPerJobLimit\nsbatch: error: {POLICY}\n", 1, True),
    ],
)
def test_only_a_refusal_of_this_job_for_good_fails_it(
    stderr: str, rc: int, permanent: bool
) -> None:
    error = parsers.command_error("sbatch", stderr, rc, rejection_is_permanent=True)
    assert error.permanent is permanent, error.message
    with pytest.raises(BackendError) as raised:
        SlurmBackend._submitted(Result(rc, "", stderr))
    assert raised.value.permanent is permanent


def _cut_connection(connection: Any, after_s: float) -> None:
    """The network drops under a live connection: its TCP socket is destroyed from outside
    (`ss -K`, as a reset from a firewall or a rebooted router would), after `after_s`."""
    port = connection._client.get_transport().sock.getsockname()[1]

    def cut() -> None:
        time.sleep(after_s)
        subprocess.run(["ss", "-K", "src", f"127.0.0.1:{port}"], capture_output=True, check=False)

    threading.Thread(target=cut, daemon=True).start()


@pytest.mark.slurm
@pytest.mark.parametrize("how", ["connection_lost", "killed"])
def test_an_sbatch_whose_answer_was_lost_is_a_submit_in_doubt(slurm_lab: None, how: str) -> None:
    """On the real lab: the connection cut, or the command killed, after sbatch made the job.
    No exit status comes back (rc -1), and the job exists: the error is transient."""
    backend = lab_backend()
    name = f"gpuq-doubt-{uuid.uuid4()}"
    submit = f"sbatch --parsable -J {name} -o /dev/null --wrap 'sleep 30' >/dev/null"
    try:
        backend.connection.run("true")
        if how == "connection_lost":
            _cut_connection(backend.connection, after_s=1.5)
            result = backend.connection.run(f"{submit}; sleep 10")
        else:
            result = backend.connection.run(f"{submit}; kill -KILL $$")
        assert result.rc == -1  # no exit status came back
        created = backend.connection.run(f"squeue -h -a -t all --name={name} -o %T").stdout
        assert created.split(), "sbatch had created the job on the cluster"
        with pytest.raises(BackendError) as raised:
            SlurmBackend._submitted(result)
        assert not raised.value.permanent, raised.value.message
    finally:
        backend.connection.run(f"scancel --name={name}")
        backend.connection.close()


@pytest.mark.slurm
def test_the_retry_of_a_submit_whose_answer_was_lost_adopts_the_job(
    slurm_lab: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sbatch runs on the lab, but its answer is lost (rc -1): the submit fails transiently,
    and the retry of the same attempt finds that job and adopts it instead of a second one."""
    backend = lab_backend()
    job = request(command=("sleep", "30"))
    run = backend._run

    def answer_lost(command: str, stdin: bytes | None = None) -> Result:
        result = run(command, stdin=stdin)
        return Result(-1, "", "") if command.startswith("sbatch") else result

    try:
        monkeypatch.setattr(backend, "_run", answer_lost)
        with pytest.raises(BackendError) as raised:
            backend.submit(job)
        assert not raised.value.permanent
        monkeypatch.undo()

        retried = backend.submit(dataclasses.replace(job, resubmit=True))

        assert retried.adopted
        name = script.job_name(job.job_id)
        ids = backend.connection.run(f"squeue -h -a -t all --name={name} -o %i").stdout.split()
        assert ids == [retried.external_id.partition("@")[0]]
    finally:
        backend.connection.run(f"scancel --name={script.job_name(job.job_id)}")
        backend.close()
