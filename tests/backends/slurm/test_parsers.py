"""Parsers against output captured from the real lab (data/, made by capture.py), and the
state mapping for the states the lab cannot produce (no preemption, no OOM killer, no boot)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from queue_service.backends.base import MigInstanceInfo, RemoteState
from queue_service.backends.slurm import parsers

DATA = Path(__file__).parent / "data"
JOBS: dict[str, str] = json.loads((DATA / "jobs.json").read_text())
GRES_MAP = {"A100-SXM4-80GB": "a100", "1g.10gb": "1g.10gb"}


def data(name: str) -> str:
    return (DATA / name).read_text()


# case -> (gpuq state, reason, exit code)
LIVE = {
    "exit3": (RemoteState.FAILED, "NonZeroExitCode", 3),
    # Slurm's reason is JobLaunchFailure: the job launched, and its script was killed.
    "sigkill": (RemoteState.FAILED, "killed by signal 9 (SIGKILL)", 137),
    "completed": (RemoteState.SUCCEEDED, "", 0),
    "cancelled": (RemoteState.CANCELLED, "", 143),
    "resources": (RemoteState.QUEUED, "Resources", None),
    "held": (RemoteState.QUEUED, "JobHeldUser", None),
    "requeued": (RemoteState.QUEUED, "BeginTime", None),
    "timeout": (RemoteState.RUNNING, "", None),
    "suspended": (RemoteState.QUEUED, "suspended by Slurm", None),
}
FINAL_SQUEUE = {
    "timeout": (RemoteState.TIMEOUT, "TimeLimit", 143),
    "node_fail": (RemoteState.NODE_FAILURE, "NodeDown", 0),
    "exit3": (RemoteState.FAILED, "NonZeroExitCode", 3),
}
FINAL_SACCT = {
    "timeout": (RemoteState.TIMEOUT, "time limit reached", 0),
    # sacct prints exit 131 as `3:0` too, but SIGQUIT is no usual killer: no note
    # (test_slurm_exit_codes_of_killed_jobs.py).
    "exit3": (RemoteState.FAILED, "", 3),
    "sigkill": (RemoteState.FAILED, "killed by signal 9 (SIGKILL)", 137),
    "completed": (RemoteState.SUCCEEDED, "", 0),
    "cancelled": (RemoteState.CANCELLED, "cancelled by uid 1001", 0),
    "node_fail": (RemoteState.NODE_FAILURE, "a node of the job failed", 0),
}


@pytest.mark.parametrize(
    ("file", "expected"),
    [
        ("squeue_live.txt", LIVE),
        ("squeue_final.txt", FINAL_SQUEUE),
        ("sacct_final.txt", FINAL_SACCT),
    ],
)
def test_captured_job_states_map_to_gpuq_states(
    file: str, expected: dict[str, tuple[str, str, int | None]]
) -> None:
    parse = parsers.parse_sacct if file.startswith("sacct") else parsers.parse_squeue
    statuses = parse(data(file))
    assert set(statuses) == set(JOBS.values())
    for case, (state, reason, exit_code) in expected.items():
        status = statuses[JOBS[case]]
        assert (status.state, status.reason, status.exit_code) == (state, reason, exit_code), case


def test_native_state_keeps_slurms_word() -> None:
    statuses = parsers.parse_sacct(data("sacct_final.txt"))
    assert statuses[JOBS["cancelled"]].native_state == "CANCELLED"
    assert statuses[JOBS["node_fail"]].native_state == "NODE_FAIL"


# case -> whether it ever ran, as sacct's Start and NodeList say
SACCT_RAN = {
    "resources": False,  # cancelled after it had waited for gpu1's GPUs: Start `None`
    # Cancelled by its own user (as gpuq cancels) the moment it was submitted, before
    # slurmdbd recorded it waiting: Start is the cancel's time, NodeList `None assigned`.
    "held_cancelled": False,
    "cancelled": True,  # cancelled by its own user while it ran
    "fill": True,
    "suspended": True,
    "completed": True,
    "timeout": True,
    "node_fail": True,
    # Ran on gpu2, requeued (`scontrol requeue`), cancelled while it waited to run again: by
    # an admin, and by its own user (as gpuq cancels). Their last records show no nodes; the
    # first run's record (REQUEUED, with its start and gpu2), which sacct -D lists, does.
    "requeued": True,
    "requeued_cancelled": True,
}


@pytest.mark.parametrize("case", SACCT_RAN)
def test_sacct_tells_whether_an_ended_job_ran(case: str) -> None:
    status = parsers.parse_sacct(data("sacct_final.txt"))[JOBS[case]]
    assert status.started is SACCT_RAN[case]


def test_a_requeued_job_cancelled_while_it_waited_again_ran_and_ended_cancelled() -> None:
    status = parsers.parse_sacct(data("sacct_final.txt"))[JOBS["requeued_cancelled"]]
    assert (status.state, status.exit_code, status.reason, status.native_state) == (
        RemoteState.CANCELLED,
        0,
        "cancelled by uid 1001",
        "CANCELLED",
    )
    assert status.started is True


@pytest.mark.parametrize("case", ["requeued", "requeued_cancelled"])
def test_without_duplicates_sacct_shows_a_requeued_job_only_as_its_last_wait(case: str) -> None:
    """Why sacct runs with -D: by default it shows an id's last record only, which for a job
    cancelled while it waited to run again is that of a job that never ran."""
    last = parsers.parse_sacct(data("sacct_final_without_duplicates.txt"))[JOBS[case]]
    every = parsers.parse_sacct(data("sacct_final.txt"))[JOBS[case]]
    assert (last.state, last.exit_code, last.started) == (RemoteState.CANCELLED, 0, False)
    assert (every.state, every.exit_code, every.started) == (RemoteState.CANCELLED, 0, True)


@pytest.mark.parametrize("case", ["requeued", "requeued_cancelled", "resources"])
def test_squeue_cannot_tell_a_requeued_job_cancelled_while_it_waited_from_one_that_never_ran(
    case: str,
) -> None:
    """squeue's end of each is `CANCELLED|0|<pending reason>`: it reads as never started,
    and poll asks sacct -D whether an earlier run was requeued."""
    status = parsers.parse_squeue(data("squeue_final.txt"))[JOBS[case]]
    assert (status.state, status.exit_code, status.started) == (RemoteState.CANCELLED, 0, False)


def test_a_job_cancelled_before_it_started_ends_as_one_cancelled_while_it_ran() -> None:
    """Its end cannot tell them apart: sacct says `CANCELLED by <uid>|0:0` for both."""
    statuses = parsers.parse_sacct(data("sacct_final.txt"))
    waited, ran = statuses[JOBS["held_cancelled"]], statuses[JOBS["cancelled"]]
    assert (waited.state, waited.exit_code) == (ran.state, ran.exit_code)
    assert (waited.started, ran.started) == (False, True)


# (a sacct row, whether the job ran)
SACCT_ROWS = [
    ("ended, start Unknown", "7|CANCELLED by 0|0:0|Unknown|None assigned|/jobs/j.1|None", False),
    ("ended, start empty", "7|CANCELLED by 0|0:0||None assigned|/jobs/j.1|None", False),
    (
        "a start but no nodes",
        "7|CANCELLED by 0|0:0|2026-12-02T07:37:23|None assigned|/jobs/j.1|None",
        False,
    ),
    ("SLURM_TIME_FORMAT=relative", "7|CANCELLED by 0|0:0|Tue 07:33|gpu[1-2]|/jobs/j.1|None", True),
    ("still waiting", "7|PENDING|0:0|Unknown|None assigned|/jobs/j.1|Priority", None),
    ("running", "7|RUNNING|0:0|2026-12-02T07:33:48|gpu1|/jobs/j.1|None", True),
]


@pytest.mark.parametrize(
    ("row", "ran"), [c[1:] for c in SACCT_ROWS], ids=[c[0] for c in SACCT_ROWS]
)
def test_a_sacct_row_says_whether_the_job_ran(row: str, ran: bool | None) -> None:
    assert parsers.parse_sacct(row + "\n")["7"].started is ran


# Records of id 7, oldest first, as sacct -D lists a job Slurm requeued: its run is in the first.
REQUEUED_RECORDS = {
    "requeued, waiting to run again": [
        "7|REQUEUED|0:0|2026-12-02T07:33:48|gpu2|/jobs/j.1|None",
        "7|PENDING|0:0|Unknown|None assigned|/jobs/j.1|BeginTime",
    ],
    # a node failure in the lab (shared notes, slurm-lab.md): the first run ends NODE_FAIL
    "requeued after a node failure, then cancelled": [
        "7|NODE_FAIL|0:0|2026-12-02T07:33:48|gpu3|/jobs/j.1|None",
        "7|CANCELLED by 0|0:0|None|None assigned|/jobs/j.1|BeginTime",
    ],
}


@pytest.mark.parametrize("rows", REQUEUED_RECORDS.values(), ids=REQUEUED_RECORDS)
def test_a_job_ran_if_any_of_its_records_ran(rows: list[str]) -> None:
    status = parsers.parse_sacct("\n".join(rows) + "\n")["7"]
    assert status.native_state == rows[-1].split("|")[1].split()[0]  # the last record's end
    assert status.started is True


@pytest.mark.parametrize(
    ("native", "reason", "state", "shown"),
    [
        ("OUT_OF_MEMORY", "None", RemoteState.FAILED, "out of memory"),
        ("PREEMPTED", "None", RemoteState.PREEMPTED, "preempted by Slurm"),
        ("BOOT_FAIL", "None", RemoteState.NODE_FAILURE, "a node failed to boot"),
        ("DEADLINE", "None", RemoteState.TIMEOUT, "deadline reached"),
        ("REQUEUED", "None", RemoteState.QUEUED, "requeued by Slurm"),
        ("REQUEUE_HOLD", "None", RemoteState.QUEUED, "requeued and held by Slurm"),
        ("CONFIGURING", "None", RemoteState.QUEUED, "nodes are being configured"),
        ("COMPLETING", "None", RemoteState.RUNNING, ""),
        ("SPECIAL_EXIT", "None", RemoteState.QUEUED, "held by Slurm after a special exit"),
        ("STOPPED", "None", RemoteState.QUEUED, "stopped by Slurm"),
        ("REVOKED", "None", RemoteState.LOST,
         "revoked: the job runs on another cluster of the federation"),
        ("PENDING", "ReqNodeNotAvail, UnavailableNodes:gpu3", RemoteState.QUEUED,
         "ReqNodeNotAvail, UnavailableNodes:gpu3"),
        ("CANCELLED by 0", "None", RemoteState.CANCELLED, "cancelled by uid 0"),
        ("RESIZING_NEW", "None", RemoteState.QUEUED, "unknown Slurm state RESIZING_NEW"),
    ],
)  # fmt: skip
def test_every_slurm_state_has_a_gpuq_state(
    native: str, reason: str, state: str, shown: str
) -> None:
    status = parsers.job_status("7", native, reason, exit_code=None)
    assert (status.state, status.reason) == (state, shown)


@pytest.mark.parametrize(
    ("text", "end"),
    [
        ("3:0", parsers.Exit(3, folded=True)),
        ("0:9", parsers.Exit(137, 9)),
        ("0:0", parsers.Exit(0)),
        ("1:0", parsers.Exit(1, folded=True)),
        ("0:15", parsers.Exit(143, 15)),
        ("", None),
    ],
)
def test_sacct_exit_codes(text: str, end: parsers.Exit | None) -> None:
    assert parsers.sacct_exit(text) == end


@pytest.mark.parametrize(
    ("text", "end"),
    [
        ("768", parsers.Exit(3)),
        ("9", parsers.Exit(137, 9)),
        ("15", parsers.Exit(143, 15)),
        ("0", parsers.Exit(0)),
        ("N/A", None),
    ],
)
def test_squeue_exit_codes_are_wait_statuses(text: str, end: parsers.Exit | None) -> None:
    assert parsers.wait_status_exit(text) == end


def test_no_exit_code_for_a_job_still_running() -> None:
    assert parsers.job_status("7", "RUNNING", "None", 0).exit_code is None


def test_inventory_of_the_lab() -> None:
    nodes = {n.name: n for n in parsers.parse_sinfo(data("sinfo_mixed.txt"), GRES_MAP)}
    assert [(n.name, n.gpu_model, n.gpus, n.state, n.mig) for n in nodes.values()] == [
        ("gpu1", "A100-SXM4-80GB", 4, "up", False),
        ("gpu2", "A100-SXM4-80GB", 4, "drain", False),
        ("gpu3", "A100-SXM4-80GB", 4, "up", False),
        ("gpu4", "A100-SXM4-80GB", 1, "up", True),
    ]
    assert nodes["gpu2"].reason == "maintenance | disk"
    assert nodes["gpu1"].labels == {"slurm.partitions": "gpu", "slurm.features": "a100"}
    assert nodes["gpu4"].mig_instances == tuple(
        MigInstanceInfo(gpu=0, profile="1g.10gb", start=s, size=1, in_use=s < 3) for s in range(7)
    )


def test_a_node_not_responding_is_down_with_slurms_reason() -> None:
    nodes = {n.name: n for n in parsers.parse_sinfo(data("sinfo_node_down.txt"), GRES_MAP)}
    assert (nodes["gpu3"].state, nodes["gpu3"].reason) == ("down", "Not responding")
    assert nodes["gpu2"].state == "up"


def test_unmapped_gres_types_keep_their_own_name() -> None:
    nodes = parsers.parse_sinfo(data("sinfo_mixed.txt"), {})
    assert {n.name: n.gpu_model for n in nodes} == {
        "gpu1": "a100", "gpu2": "a100", "gpu3": "a100", "gpu4": "unknown"
    }  # fmt: skip
    assert nodes[3].mig and nodes[3].gpus == 1


@pytest.mark.parametrize(
    ("state", "node_state"),
    [
        ("idle", "up"), ("mixed", "up"), ("allocated", "up"), ("completing", "up"),
        ("drained", "drain"), ("draining", "drain"), ("maint", "drain"),
        ("down", "down"), ("down*", "down"), ("idle*", "down"), ("drained*", "down"),
        ("inval", "down"), ("unknown", "down"), ("fail", "down"),
        ("failing", "drain"), ("failing*", "down"), ("reserved", "drain"),
    ],
)  # fmt: skip
def test_node_states(state: str, node_state: str) -> None:
    line = f"n1|{state}|gpu:a100:4|gpu:a100:0(IDX:N/A)|(null)|gpu|none\n"
    assert parsers.parse_sinfo(line, GRES_MAP)[0].state == node_state


def test_a_node_in_two_partitions_is_one_node() -> None:
    text = "n1|idle|gpu:a100:8(S:0-1)|gpu:a100:2(IDX:0,5)|(null)|gpu|none\n"
    text += "n1|idle|gpu:a100:8(S:0-1)|gpu:a100:2(IDX:0,5)|(null)|debug|none\n"
    nodes = parsers.parse_sinfo(text, GRES_MAP)
    assert [(n.name, n.gpus, n.labels["slurm.partitions"]) for n in nodes] == [
        ("n1", 8, "gpu,debug")
    ]


@pytest.mark.parametrize(
    ("model", "slices", "gpus", "layout"),
    [
        # 14 slices of 1g.10gb on an A100-80GB: two full GPUs.
        ("A100-SXM4-80GB", ["1g.10gb"] * 14, 2, [(g, s, 1) for g in (0, 1) for s in range(7)]),
        # 3g at start 4 leaves the four 1g placements below it.
        ("A100-SXM4-80GB", ["3g.40gb"] + ["1g.10gb"] * 4, 1,
         [(0, 0, 1), (0, 1, 1), (0, 2, 1), (0, 3, 1), (0, 4, 4)]),
        # A model without a MIG table: slices side by side, 7 compute slices per GPU.
        ("unknown", ["2g.20gb"] * 4, 2, [(0, 0, 2), (0, 2, 2), (0, 4, 2), (1, 0, 2)]),
    ],
)  # fmt: skip
def test_mig_slices_are_packed_onto_gpus(
    model: str, slices: list[str], gpus: int, layout: list[tuple[int, int, int]]
) -> None:
    count, instances = parsers.pack_mig(model, [(p, False) for p in slices], first_gpu=0)
    assert count == gpus
    assert [(i.gpu, i.start, i.size) for i in instances] == layout


SBATCH_ERRORS = [
    ("sbatch_bad_partition.stderr.txt", True, "Invalid partition name specified"),
    ("sbatch_bad_account.stderr.txt", True, "Invalid account"),
    ("sbatch_bad_gres.stderr.txt", True, "Requested node configuration is not available"),
    ("sbatch_controller_down.stderr.txt", False, "Unable to contact slurm controller"),
]


@pytest.mark.parametrize(("file", "permanent", "words"), SBATCH_ERRORS)
def test_sbatch_errors_are_classified(file: str, permanent: bool, words: str) -> None:
    error = parsers.command_error("sbatch", data(file), 1, rejection_is_permanent=True)
    assert error.permanent is permanent
    assert words in error.message


def test_squeue_of_one_forgotten_id_is_not_an_error() -> None:
    assert parsers.only_unknown_ids(data("squeue_unknown_id.stderr.txt"))
    assert not parsers.only_unknown_ids(data("squeue_controller_down.stderr.txt"))


def test_a_failed_squeue_is_never_permanent() -> None:
    error = parsers.command_error(
        "squeue", data("squeue_controller_down.stderr.txt"), 1, rejection_is_permanent=False
    )
    assert not error.permanent
    assert "Unable to contact slurm controller" in error.message


@pytest.mark.parametrize(("stdout", "job_id"), [("123\n", "123"), ("77;lab\n", "77")])
def test_sbatch_parsable_output(stdout: str, job_id: str) -> None:
    assert parsers.parse_sbatch(stdout) == job_id


def test_sacct_without_accounting_finds_nothing() -> None:
    # What sacct prints (exit 0) on a cluster without slurmdbd.
    assert parsers.parse_sacct("Slurm accounting storage is disabled\n") == {}
    assert parsers.parse_lookup("Slurm accounting storage is disabled\n") == {}


@pytest.mark.parametrize("file", ["lookup_squeue.txt", "lookup_sacct.txt"])
def test_a_job_is_found_by_its_attempt_directory(file: str) -> None:
    lookup = json.loads(data("lookup.json"))
    assert parsers.parse_lookup(data(file)) == {lookup["job_dir"]: lookup["job_id"]}
