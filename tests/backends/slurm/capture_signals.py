"""Capture data/*_signals.txt from the real lab: `python -m tests.backends.slurm.capture_signals`
as root with `deploy/slurm-lab/lab up` done. Takes about 15 seconds; it disturbs nothing.

Jobs whose process was killed by SIGKILL, and exits that look like it, as squeue (the raw
wait status) and sacct (`exit:signal`, which prints an exit code of 128 or more less 128:
exit 137 reads `9:0`, as exit 9 does) report them."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

from queue_service.backends.slurm import commands
from queue_service.backends.slurm.backend import slurm_job_id

from .conftest import lab_backend, request

DATA = Path(__file__).parent / "data"

# case -> the batch script's command (sbatch --wrap)
WRAPPED = {
    "exit137": "exit 137",
    "exit9": "exit 9",
    "exit255": "exit 255",
    # The batch shell itself killed: Slurm's ExitCode 0:9 (squeue's reason JobLaunchFailure).
    "killed": "kill -9 $$",
    # A child killed: the shell exits 128 + 9.
    "child_killed": "bash -c 'kill -9 $$'",
    # A job step killed: srun exits 128 + 9 (the step's own record is 0:9).
    "step_killed": "srun bash -c 'kill -9 $$'",
    # A step killed, the script going on to exit 0: the job succeeded.
    "step_killed_then_ok": "srun bash -c 'kill -9 $$'; true",
}
# case -> a gpuq job's command, as the backend submits it (the batch step execs it)
GPUQ = {
    "gpuq_killed": ("bash", "-c", "kill -9 $$"),
    "gpuq_child_killed": "sleep 300 & kill -9 $!; wait $!",
}


def ended(text: str, ids: list[str], workdir_at: int) -> bool:
    """Every job's row ended, with its WorkDir (slurmdbd records it some seconds late)."""
    rows = {row[0]: row for row in (line.split("|") for line in text.splitlines())}
    return all(
        i in rows and rows[i][1] in ("COMPLETED", "FAILED") and rows[i][workdir_at] for i in ids
    )


def main() -> None:
    backend = lab_backend()
    run = backend.connection.run
    jobs: dict[str, str] = {}
    for case, wrapped in WRAPPED.items():
        result = run(f"sbatch --parsable -o /dev/null --wrap={shlex.quote(wrapped)}")
        assert result.rc == 0, result.stderr
        jobs[case] = result.stdout.strip()
    for case, command in GPUQ.items():
        jobs[case] = slurm_job_id(backend.submit(request(command=command)).external_id)
    ids = list(jobs.values())
    deadline = time.time() + 60
    while True:
        squeue = run(commands.squeue(ids)).stdout
        sacct = run(commands.sacct(ids)).stdout
        if ended(squeue, ids, 3) and ended(sacct, ids, 5):
            break
        assert time.time() < deadline, "the jobs did not end, or slurmdbd did not record them"
        time.sleep(1)
    (DATA / "squeue_signals.txt").write_text(squeue)
    (DATA / "sacct_signals.txt").write_text(sacct)
    (DATA / "signals.json").write_text(json.dumps(jobs, indent=2) + "\n")
    print("captured into", DATA)


if __name__ == "__main__":
    main()
