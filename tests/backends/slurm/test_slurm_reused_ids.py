"""Slurm gives a job id again: ids restart at 1 when slurmctld's state is wiped while slurmdbd
keeps its records (the lab, rebuilt), and wrap at MaxJobId. `sacct -D`, which poll needs for
the runs of a job Slurm requeued, lists every job the id was given, oldest first: an older
job's run must not count as this job's.

Against what the lab printed (data/*reused_id*, made by capture_reused_ids.py): four gpuq jobs
got ids 1-4 and ran (2-4 were requeued: `scontrol requeue`), then the lab's ids wrapped
(MaxJobId=5) and four other gpuq jobs got ids 1-4 again (reused_ids.json). Every field of
those records, Submit and DBIndex included, is in sacct_reused_ids_every_field.txt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import pytest

from queue_service.backends.base import RemoteState
from queue_service.backends.slurm import SlurmBackend, commands, parsers
from queue_service.backends.slurm.backend import SlurmSettings
from queue_service.backends.slurm.ssh import Result, SSHConnection

DATA = Path(__file__).parent / "data"
JOBS: dict[str, str] = json.loads((DATA / "reused_ids.json").read_text())


def data(name: str) -> str:
    return (DATA / name).read_text()


# squeue's {id: WorkDir} of the new jobs (commands.workdirs).
WORKDIRS = {i: w for w, i in parsers.parse_lookup(data("squeue_reused_ids_workdirs.txt")).items()}


def test_only_a_jobs_own_records_say_whether_it_ran() -> None:
    """The older jobs 1-4 all ran. Of the new ones, 1 and 2 were cancelled before they
    started; 4 ran, was requeued and was cancelled while it waited (its end alone reads as
    never started); 3 completed."""
    statuses = parsers.parse_sacct(data("sacct_reused_ids.txt"))
    assert {case: (statuses[i].state, statuses[i].started) for case, i in JOBS.items()} == {
        "cancelled_at_once": (RemoteState.CANCELLED, False),
        "cancelled_waiting": (RemoteState.CANCELLED, False),
        "completed": (RemoteState.SUCCEEDED, True),
        "requeued_cancelled_at_once": (RemoteState.CANCELLED, True),
    }


@pytest.mark.parametrize(
    ("file", "case"),
    [
        ("sacct_reused_id_cancelled_at_once.txt", "cancelled_at_once"),
        ("sacct_reused_id_requeued_cancelled_at_once.txt", "requeued_cancelled_at_once"),
    ],
)
def test_right_after_a_cancel_a_last_record_without_workdir_leaves_an_older_run_unknown(
    file: str, case: str
) -> None:
    """Cancelled before slurmdbd recorded its current wait, a job's last record has no
    WorkDir (and is named `allocation`) for a few seconds: an earlier run may be its own
    (requeued) or an older job's."""
    status = parsers.parse_sacct(data(file))[JOBS[case]]
    assert (status.state, status.started) == (RemoteState.CANCELLED, None)


@pytest.mark.parametrize(
    ("file", "case", "ran"),
    [
        ("sacct_reused_id_cancelled_at_once.txt", "cancelled_at_once", False),
        ("sacct_reused_id_requeued_cancelled_at_once.txt", "requeued_cancelled_at_once", True),
    ],
)
def test_the_workdir_squeue_gives_tells_which_records_are_the_jobs(
    file: str, case: str, ran: bool
) -> None:
    assert parsers.parse_sacct(data(file), WORKDIRS)[JOBS[case]].started is ran


def answering(squeue: str, sacct: str, workdirs: str) -> tuple[SlurmBackend, list[str]]:
    """A backend whose login node answers with the lab's output; the commands it was sent."""
    sent: list[str] = []

    def run(command: str, stdin: bytes | None = None) -> Result:
        sent.append(command)
        if command.split()[0] == "sacct":
            return Result(0, sacct, "")
        return Result(0, workdirs if "WorkDir" in command else squeue, "")

    settings = SlurmSettings(host="127.0.0.1", user="slurmuser", known_hosts="pinned")
    backend = SlurmBackend("lab", settings, cast(SSHConnection, None))
    backend._run = run  # type: ignore[method-assign]
    return backend, sent


@pytest.mark.parametrize(
    ("file", "case", "ran"),
    [
        ("sacct_reused_id_cancelled_at_once.txt", "cancelled_at_once", False),
        ("sacct_reused_id_requeued_cancelled_at_once.txt", "requeued_cancelled_at_once", True),
    ],
)
def test_poll_asks_squeue_for_the_workdir_when_sacct_cannot_tell_whose_run_it_was(
    file: str, case: str, ran: bool
) -> None:
    job_id = JOBS[case]
    backend, sent = answering(
        data("squeue_reused_ids.txt"), data(file), data("squeue_reused_ids_workdirs.txt")
    )
    status = backend.poll([job_id])[job_id]
    assert (status.state, status.exit_code, status.started) == (RemoteState.CANCELLED, 0, ran)
    assert sent == [
        commands.squeue([job_id]),
        commands.sacct([job_id]),
        commands.workdirs([job_id]),
    ]


def test_poll_asks_squeue_once_for_the_workdirs_of_the_jobs_it_read_as_ended_unstarted() -> None:
    ids = [JOBS["cancelled_waiting"], JOBS["requeued_cancelled_at_once"]]
    backend, sent = answering(
        data("squeue_reused_ids.txt"),
        data("sacct_reused_ids.txt"),
        data("squeue_reused_ids_workdirs.txt"),
    )
    statuses = backend.poll(ids)
    assert [statuses[i].started for i in ids] == [False, True]
    assert sent == [commands.squeue(ids), commands.sacct(ids), commands.workdirs(ids)]


def test_before_slurmdbd_has_a_record_of_a_job_an_older_jobs_run_is_not_its_own() -> None:
    """Until slurmdbd records the cancel of a job that waited, every record of its id is an
    older job's (here, the first line of the lab's capture: the older job 142, COMPLETED on
    gpu1); squeue still shows the job, and its WorkDir."""
    job_id = JOBS["cancelled_at_once"]
    older_only = data("sacct_reused_id_cancelled_at_once.txt").splitlines()[0] + "\n"
    assert parsers.parse_sacct(older_only)[job_id].started is True  # read alone: the old run
    backend, _ = answering(
        data("squeue_reused_ids.txt"), older_only, data("squeue_reused_ids_workdirs.txt")
    )
    status = backend.poll([job_id])[job_id]
    assert (status.state, status.started) == (RemoteState.CANCELLED, False)


def test_when_squeue_cannot_give_the_workdir_whether_the_job_ran_is_unknown() -> None:
    job_id = JOBS["cancelled_at_once"]
    backend, _ = answering(
        data("squeue_reused_ids.txt"), data("sacct_reused_id_cancelled_at_once.txt"), ""
    )
    assert backend.poll([job_id])[job_id].started is None
