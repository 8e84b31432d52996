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


# squeue's {id: WorkDir}: the new jobs'.
WORKDIRS = parsers.squeue_workdirs(data("squeue_reused_ids.txt"))


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


def answering(squeue: str, sacct: str) -> tuple[SlurmBackend, list[str]]:
    """A backend whose login node answers with the lab's output; the commands it was sent."""
    sent: list[str] = []

    def run(command: str, stdin: bytes | None = None) -> Result:
        sent.append(command)
        if command.split()[0] == "sacct":
            return Result(0, sacct, "")
        return Result(0, squeue, "")

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
def test_poll_tells_whose_run_it_was_by_the_workdir_in_squeues_row(
    file: str, case: str, ran: bool
) -> None:
    job_id = JOBS[case]
    backend, sent = answering(data("squeue_reused_ids.txt"), data(file))
    status = backend.poll([job_id])[job_id]
    assert (status.state, status.exit_code, status.started) == (RemoteState.CANCELLED, 0, ran)
    assert sent == [commands.squeue([job_id]), commands.sacct([job_id])]


def test_a_poll_of_jobs_read_as_ended_unstarted_is_one_squeue_and_one_sacct() -> None:
    ids = [JOBS["cancelled_waiting"], JOBS["requeued_cancelled_at_once"]]
    backend, sent = answering(data("squeue_reused_ids.txt"), data("sacct_reused_ids.txt"))
    statuses = backend.poll(ids)
    assert [statuses[i].started for i in ids] == [False, True]
    assert sent == [commands.squeue(ids), commands.sacct(ids)]


def test_before_slurmdbd_has_a_record_of_a_job_an_older_jobs_run_is_not_its_own() -> None:
    """Until slurmdbd records the cancel of a job that waited, every record of its id is an
    older job's (here, the first line of the lab's capture: the older job 142, COMPLETED on
    gpu1); squeue still shows the job, and its WorkDir."""
    job_id = JOBS["cancelled_at_once"]
    older_only = data("sacct_reused_id_cancelled_at_once.txt").splitlines()[0] + "\n"
    assert parsers.parse_sacct(older_only)[job_id].started is True  # read alone: the old run
    backend, _ = answering(data("squeue_reused_ids.txt"), older_only)
    status = backend.poll([job_id])[job_id]
    assert (status.state, status.started) == (RemoteState.CANCELLED, False)


# The older jobs' external ids ({Slurm id}@{attempt}): ids 1-4 before the wrap. gpuq would
# still follow one after the wrap if it missed its end (down longer than MinJobAge, say).
OLDER: list[str] = json.loads((DATA / "reused_ids_older.json").read_text())


def with_attempt(case: str) -> str:
    """The new job's external id: its Slurm id and the attempt its directory is named by."""
    job_id = JOBS[case]
    return f"{job_id}@{parsers.dir_name(WORKDIRS[job_id])}"


def test_squeues_row_of_an_id_is_an_older_jobs_only_in_that_jobs_directory() -> None:
    squeue = data("squeue_reused_ids.txt")
    for older in OLDER:
        slurm_id, _, attempt = older.partition("@")
        assert slurm_id in parsers.parse_squeue(squeue)  # the id's row, whoever's it is
        assert slurm_id not in parsers.parse_squeue(squeue, {slurm_id: attempt})
    new = with_attempt("completed")
    slurm_id, _, attempt = new.partition("@")
    assert parsers.parse_squeue(squeue, {slurm_id: attempt})[slurm_id].state == (
        RemoteState.SUCCEEDED
    )


def test_an_older_job_whose_id_went_to_another_reads_its_own_end_from_accounting() -> None:
    """squeue shows the new jobs with those ids (two cancelled while held, one completed, one
    cancelled after a requeue): each older job's end is its own records' (the first
    completed; the others ran, were requeued and were cancelled), and no third call is
    needed: the attempts name the directories."""
    backend, sent = answering(data("squeue_reused_ids.txt"), data("sacct_reused_ids.txt"))
    statuses = backend.poll(OLDER)
    assert [(statuses[i].state, statuses[i].started) for i in OLDER] == [
        (RemoteState.SUCCEEDED, True),
        (RemoteState.CANCELLED, True),
        (RemoteState.CANCELLED, True),
        (RemoteState.CANCELLED, True),
    ]
    ids = [i.partition("@")[0] for i in OLDER]
    assert sent == [commands.squeue(ids), commands.sacct(ids)]


def test_two_jobs_gpuq_follows_with_one_id_each_read_their_own() -> None:
    """The older job 3 (requeued, then cancelled while it waited) and the new one that got
    its id (completed, still in squeue): one squeue and one sacct for both."""
    older, new = OLDER[2], with_attempt("completed")
    assert older.partition("@")[0] == new.partition("@")[0]
    backend, sent = answering(data("squeue_reused_ids.txt"), data("sacct_reused_ids.txt"))
    statuses = backend.poll([older, new])
    assert {i: (statuses[i].state, statuses[i].exit_code) for i in (older, new)} == {
        older: (RemoteState.CANCELLED, 0),
        new: (RemoteState.SUCCEEDED, 0),
    }
    assert statuses[older].started is True  # its REQUEUED record ran
    assert statuses[older].external_id == older and statuses[new].external_id == new
    job_id = new.partition("@")[0]
    assert sent == [commands.squeue([job_id]), commands.sacct([job_id])]


def test_an_older_job_accounting_no_longer_knows_is_lost_not_the_new_jobs() -> None:
    backend, _ = answering(data("squeue_reused_ids.txt"), "")
    statuses = backend.poll(OLDER)
    assert {statuses[i].state for i in OLDER} == {RemoteState.LOST}


@pytest.mark.parametrize(
    ("file", "case", "ran"),
    [
        ("sacct_reused_id_cancelled_at_once.txt", "cancelled_at_once", False),
        ("sacct_reused_id_requeued_cancelled_at_once.txt", "requeued_cancelled_at_once", True),
    ],
)
def test_with_the_attempt_in_its_id_whose_runs_are_the_jobs_needs_no_third_call(
    file: str, case: str, ran: bool
) -> None:
    external_id = with_attempt(case)
    backend, sent = answering(data("squeue_reused_ids.txt"), data(file))
    status = backend.poll([external_id])[external_id]
    assert (status.state, status.started) == (RemoteState.CANCELLED, ran)
    job_id = JOBS[case]
    assert sent == [commands.squeue([job_id]), commands.sacct([job_id])]


def test_an_older_job_does_not_read_the_new_jobs_cancel_without_workdir_as_its_end() -> None:
    """Id 21: the older job COMPLETED; squeue shows the new job 21, just cancelled while
    held, whose accounting record has no WorkDir yet (named `allocation`). That record is
    the new job's: the older one's end is its own COMPLETED record, whether the new one is
    followed too or not."""
    older, new = OLDER[0], with_attempt("cancelled_at_once")
    assert older.startswith("21@") and new.startswith("21@")
    for polled in ([older], [older, new]):
        backend, _ = answering(
            data("squeue_reused_ids.txt"), data("sacct_reused_id_cancelled_at_once.txt")
        )
        statuses = backend.poll(polled)
        assert (statuses[older].state, statuses[older].started) == (RemoteState.SUCCEEDED, True)
        if new in polled:
            assert (statuses[new].state, statuses[new].started) == (RemoteState.CANCELLED, False)


def test_an_older_job_accounting_forgot_is_lost_not_the_new_jobs_cancel() -> None:
    """The older job 24's records are gone (purged); only the new job 24's records are left,
    the last without WorkDir yet: the older job is LOST, not CANCELLED."""
    older = OLDER[3]
    assert older.startswith("24@")
    sacct = data("sacct_reused_id_requeued_cancelled_at_once.txt").splitlines()[-2:]
    backend, _ = answering(data("squeue_reused_ids.txt"), "\n".join(sacct) + "\n")
    assert backend.poll([older])[older].state == RemoteState.LOST


# slurmctld's state was wiped while the older job 23 ran: slurmdbd keeps its record RUNNING
# with no end (a runaway job, until `sacctmgr show runawayjobs` fixes it), and the new job
# 23, of the same user, runs.
RUNNING_23 = data("squeue_reused_ids.txt").replace("23|COMPLETED|", "23|RUNNING|")
RUNAWAY_23 = (
    "23|RUNNING|0:0|2026-12-03T02:32:02|gpu1|"
    "/home/slurmuser/.gpuq/jobs/c8d0dada-60a6-4094-9ae7-bdcf8ae11e26.1|None\n"
)


def test_a_job_whose_id_squeue_shows_as_another_jobs_is_lost_whatever_accounting_says() -> None:
    older = OLDER[2]
    assert older.startswith("23@c8d0dada")
    backend, _ = answering(RUNNING_23, RUNAWAY_23)
    status = backend.poll([older])[older]
    assert status.state == RemoteState.LOST
    assert "its id is another job's" in status.reason and "RUNNING" in status.reason


@pytest.mark.parametrize("grace_s", [0, 5])
def test_cancelling_a_job_whose_id_went_to_another_sends_no_scancel(grace_s: float) -> None:
    """A scancel by the bare id would stop the new job, which runs as the same user."""
    backend, sent = answering(RUNNING_23, RUNAWAY_23)
    backend._sleep = lambda s: None  # type: ignore[method-assign]
    assert backend.cancel(OLDER[2], grace_s=grace_s) is False
    assert not [c for c in sent if c.startswith("scancel")], sent
