"""A job whose process was killed by a signal (the OOM killer's or `kill -9`'s SIGKILL), and
exits that say so, as Slurm reports them (captured on the lab by capture_signals.py) and as a
Slurm user reads them: the shell's 128 + N, and the signal named (docs/slurm.md).

squeue's exit_code is the raw wait status, exact. sacct's ExitCode `exit:signal` prints an exit
code of 128 or more less 128 (Slurm's sacct/print.c): exit 137 reads `9:0`, exactly as exit 9
does, and exit 255 `127:0`. gpuq reads squeue while Slurm keeps the job (MinJobAge), so sacct's
reading is needed only for jobs squeue has forgotten; for those the reason says which two
codes it may be."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from queue_service.backends.base import RemoteState
from queue_service.backends.slurm import parsers

from .conftest import lab_backend, request, wait_for

DATA = Path(__file__).parent / "data"
JOBS: dict[str, str] = json.loads((DATA / "signals.json").read_text())

KILLED = "killed by signal 9 (SIGKILL)"
EXIT_137 = "exit code 137: a process killed by SIGKILL (128 + 9)"
EXIT_9_OR_137 = (
    "exit code 9 or 137: sacct cannot tell them apart (137: a process killed by SIGKILL)"
)

# case -> (gpuq state, exit code, reason)
SQUEUE = {
    "exit137": (RemoteState.FAILED, 137, EXIT_137),
    "exit9": (RemoteState.FAILED, 9, "NonZeroExitCode"),
    "exit255": (RemoteState.FAILED, 255, "NonZeroExitCode"),
    # Slurm's reason for a batch script killed by a signal is JobLaunchFailure: it launched.
    "killed": (RemoteState.FAILED, 137, KILLED),
    "child_killed": (RemoteState.FAILED, 137, EXIT_137),
    "step_killed": (RemoteState.FAILED, 137, EXIT_137),
    "step_killed_then_ok": (RemoteState.SUCCEEDED, 0, ""),
    "gpuq_killed": (RemoteState.FAILED, 137, KILLED),
    "gpuq_child_killed": (RemoteState.FAILED, 137, EXIT_137),
}
SACCT = {
    "exit137": (RemoteState.FAILED, 9, EXIT_9_OR_137),
    "exit9": (RemoteState.FAILED, 9, EXIT_9_OR_137),
    # 255 folded to 127; 127 is no signal that kills a job: no note.
    "exit255": (RemoteState.FAILED, 127, ""),
    "killed": (RemoteState.FAILED, 137, KILLED),
    "child_killed": (RemoteState.FAILED, 9, EXIT_9_OR_137),
    "step_killed": (RemoteState.FAILED, 9, EXIT_9_OR_137),
    "step_killed_then_ok": (RemoteState.SUCCEEDED, 0, ""),
    "gpuq_killed": (RemoteState.FAILED, 137, KILLED),
    "gpuq_child_killed": (RemoteState.FAILED, 9, EXIT_9_OR_137),
}


@pytest.mark.parametrize("case", SQUEUE)
def test_squeue_tells_a_killed_job_by_its_signal(case: str) -> None:
    status = parsers.parse_squeue((DATA / "squeue_signals.txt").read_text())[JOBS[case]]
    assert (status.state, status.exit_code, status.reason) == SQUEUE[case]


@pytest.mark.parametrize("case", SACCT)
def test_sacct_exit_codes_of_128_and_more_are_read_as_either(case: str) -> None:
    status = parsers.parse_sacct((DATA / "sacct_signals.txt").read_text())[JOBS[case]]
    assert (status.state, status.exit_code, status.reason) == SACCT[case]


def test_out_of_memory_is_the_oom_killers_sigkill() -> None:
    """Slurm reports a step the cgroup's OOM killer struck with SIG_OOM (253, sacct `0:125`)
    instead of its status. Constructed: the lab has no memory cgroup (task/none)."""
    sacct = parsers.parse_sacct("7|OUT_OF_MEMORY|0:125|2026-12-03T17:15:58|gpu1|/j/a.1|None\n")
    squeue = parsers.parse_squeue("7|OUT_OF_MEMORY|253|/j/a.1|None\n")
    for status in (sacct["7"], squeue["7"]):
        assert (status.state, status.exit_code, status.reason) == (
            RemoteState.FAILED,
            137,
            "out of memory",
        )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("0:6", "killed by signal 6 (SIGABRT)"),
        ("0:11", "killed by signal 11 (SIGSEGV)"),
        ("0:40", "killed by signal 40 (SIGRTMIN+6)"),
        ("15:0", "exit code 15 or 143: sacct cannot tell them apart"
                 " (143: a process killed by SIGTERM)"),
        ("11:0", "exit code 11 or 139: sacct cannot tell them apart"
                 " (139: a process killed by SIGSEGV)"),
        # The common failures: exit 1 or 2 read as SIGHUP or SIGINT would mislead.
        ("1:0", ""),
        ("2:0", ""),
        ("0:0", ""),
    ],
)  # fmt: skip
def test_a_failed_jobs_reason_names_its_signal(text: str, said: str) -> None:
    status = parsers.parse_sacct(f"7|FAILED|{text}|2026-12-03T17:15:58|gpu1|/j/a.1|None\n")["7"]
    assert status.reason == said


@pytest.mark.slurm
def test_a_gpuq_job_killed_by_sigkill_fails_with_137_naming_the_signal(slurm_lab: None) -> None:
    """On the lab: the batch step execs the job, so its process killed by SIGKILL is the job's."""
    backend = lab_backend()
    try:
        job = backend.submit(request(command=("bash", "-c", "kill -9 $$"))).external_id
        status = wait_for(backend, job)
        assert (status.state, status.exit_code, status.reason) == (RemoteState.FAILED, 137, KILLED)
    finally:
        backend.close()
