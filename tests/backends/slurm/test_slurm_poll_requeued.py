"""Whether a job that ended cancelled ever ran, as poll() tells it: a job Slurm requeued (a
node failure, `scontrol requeue`) and that was cancelled while it waited to run again ends as
one that never ran, in squeue (`CANCELLED|0|BeginTime`) and in sacct's last record (no
nodes). Before: gpuq took that end at its word and never charged the run. Now poll asks
sacct for every record of such a job (-D).

Against a login node that answers with what the lab's squeue and sacct printed
(data/squeue_final.txt, data/sacct_final.txt, made by capture.py), over a real SSH
connection; tests/backends/slurm/test_lab.py runs the same against the lab."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_service.backends.base import BackendError, RemoteState
from queue_service.backends.slurm import SlurmBackend, commands
from queue_service.backends.slurm.backend import SlurmSettings

from .sshd_fakes import LoginNode, sshd

DATA = Path(__file__).parent / "data"
JOBS: dict[str, str] = json.loads((DATA / "jobs.json").read_text())
SQUEUE = ((DATA / "squeue_final.txt").read_text(), "", 0)
SACCT = ((DATA / "sacct_final.txt").read_text(), "", 0)
SLURMDBD_DOWN = ("", (DATA / "sacct_slurmdbd_down.stderr.txt").read_text(), 1)


@pytest.fixture
def login_node() -> Iterator[tuple[LoginNode, SlurmBackend]]:
    node = LoginNode({"squeue": SQUEUE, "sacct": SACCT})
    with sshd(node) as connection:
        settings = SlurmSettings(host="127.0.0.1", user="slurm", known_hosts="pinned")
        yield node, SlurmBackend("lab", settings, connection)


# case -> (its end, whether it ran)
ENDED = {
    "requeued_cancelled": (RemoteState.CANCELLED, True),  # ran, requeued, cancelled waiting
    "requeued": (RemoteState.CANCELLED, True),  # the same, cancelled by an admin
    "resources": (RemoteState.CANCELLED, False),  # cancelled while it waited for GPUs
    "held_cancelled": (RemoteState.CANCELLED, False),  # cancelled the moment it was submitted
    "cancelled": (RemoteState.CANCELLED, True),  # cancelled while it ran (squeue: SIGTERM)
    "completed": (RemoteState.SUCCEEDED, None),
}


def test_a_job_squeue_reads_as_never_started_is_asked_of_sacct_in_one_call(
    login_node: tuple[LoginNode, SlurmBackend],
) -> None:
    node, backend = login_node
    statuses = backend.poll([JOBS[case] for case in ENDED])
    assert {case: (statuses[JOBS[case]].state, statuses[JOBS[case]].started) for case in ENDED} == (
        ENDED
    )
    waited = [JOBS[c] for c in ("requeued_cancelled", "requeued", "resources", "held_cancelled")]
    # Which records are each job's: by the WorkDir the same squeue gave.
    assert node.commands[1:] == [commands.sacct(waited)]


def test_a_poll_of_jobs_squeue_tells_all_about_asks_no_sacct(
    login_node: tuple[LoginNode, SlurmBackend],
) -> None:
    node, backend = login_node
    backend.poll([JOBS[case] for case in ("cancelled", "completed", "exit3", "node_fail")])
    assert [c.split()[0] for c in node.commands] == ["squeue"]


def test_with_slurmdbd_down_whether_a_job_cancelled_while_it_waited_ran_is_unknown(
    login_node: tuple[LoginNode, SlurmBackend],
) -> None:
    """Not a failed poll: squeue still follows every job. The service charges a job whose
    run it cannot rule out."""
    node, backend = login_node
    node.answers["sacct"] = SLURMDBD_DOWN
    ids = [JOBS[c] for c in ("requeued_cancelled", "resources", "cancelled")]
    statuses = backend.poll(ids)
    assert [(statuses[i].state, statuses[i].exit_code, statuses[i].started) for i in ids] == [
        (RemoteState.CANCELLED, 0, None),
        (RemoteState.CANCELLED, 0, None),
        (RemoteState.CANCELLED, 143, True),
    ]


def test_with_slurmdbd_down_a_job_squeue_forgot_fails_the_poll_as_transient(
    login_node: tuple[LoginNode, SlurmBackend],
) -> None:
    node, backend = login_node
    node.answers["sacct"] = SLURMDBD_DOWN
    with pytest.raises(BackendError, match="sacct failed") as raised:
        backend.poll([JOBS["requeued_cancelled"], "999999"])
    assert not raised.value.permanent
