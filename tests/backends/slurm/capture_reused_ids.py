"""Capture data/*reused_id* from the real lab: `python -m tests.backends.slurm.capture_reused_ids`
as root with `deploy/slurm-lab/lab up` done and no job in the lab. Takes about six minutes.

Four gpuq jobs run (three are requeued with `scontrol requeue`); once slurmctld has purged
them (MinJobAge), the lab's ids are made to wrap onto theirs (FirstJobId and MaxJobId, then
`scontrol reconfigure`; slurm.conf is restored at once after) and four other gpuq jobs get
the same ids, while slurmdbd keeps the first four's records: what a wrap at MaxJobId, or a
rebuilt lab whose slurmctld state was wiped, leaves in accounting."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from queue_service.backends.base import DispatchRequest
from queue_service.backends.slurm import commands, script
from queue_service.backends.slurm.backend import slurm_job_id

from .conftest import REPO, lab_backend, request

DATA = Path(__file__).parent / "data"
CONF = Path("/etc/slurm/slurm.conf")
# Every field that could tell the jobs of one id apart, to show which cannot.
EVERY_FIELD = (
    "JobIDRaw,DBIndex,JobName,Submit,Eligible,Start,End,State,ExitCode,NodeList,WorkDir,Reason"
)


def until(what: str, done: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.time() + timeout_s
    while not done():
        assert time.time() < deadline, what
        time.sleep(0.5)


def main() -> None:
    backend = lab_backend(requeue=True)
    run = backend.connection.run

    def state(job_id: str) -> str:
        return run(f"squeue -h -a -t all -j {job_id} -o %T").stdout.strip()

    def accounted(job_ids: list[str], fields: str = EVERY_FIELD) -> str:
        return run(f"sacct -n -P -X -D -j {commands.job_ids(job_ids)} -o {fields}").stdout

    def submit(job: DispatchRequest) -> str:
        return slurm_job_id(backend.submit(job).external_id)

    def submit_held(job: DispatchRequest) -> str:
        """As backend.submit, held: sbatch's own options beat the script's."""
        assert backend.connection.make_dir(script.job_dir(backend.workdir(), job))
        text = script.render(job, backend.script_options(job.team), backend.workdir())
        result = run("sbatch --parsable --hold", stdin=text.encode())
        assert result.rc == 0, result.stderr
        return result.stdout.strip()

    def requeue_and_cancel(job_id: str, *, at_once: bool = False, rerun: bool = False) -> None:
        until("running", lambda: state(job_id) == "RUNNING")
        time.sleep(2)
        subprocess.run(["scontrol", "requeue", job_id], check=True)
        until("requeued", lambda: state(job_id) == "PENDING")
        if not at_once:
            until("REQUEUED recorded", lambda: "REQUEUED" in accounted([job_id]), 30)
        if rerun:  # run again now, not after the 120 s Slurm holds a requeued job back
            subprocess.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"], check=True)
            until("running again", lambda: state(job_id) == "RUNNING")
            time.sleep(3)
        run(commands.cancel(job_id))

    sleeper = ("sleep", "300")
    older = [backend.submit(request()).external_id]
    older += [backend.submit(request(command=sleeper)).external_id for _ in range(3)]
    old = [slurm_job_id(i) for i in older]
    assert [int(i) for i in old] == list(range(int(old[0]), int(old[0]) + 4)), old
    requeue_and_cancel(old[1], rerun=True)
    requeue_and_cancel(old[2])
    requeue_and_cancel(old[3], at_once=True)
    until("purged", lambda: not run("squeue -h -a -t all").stdout.strip(), 600)

    saved = Path(tempfile.mkdtemp()) / "slurm.conf"
    shutil.copy2(CONF, saved)
    try:
        CONF.write_text(CONF.read_text() + f"FirstJobId={old[0]}\nMaxJobId={int(old[-1]) + 1}\n")
        subprocess.run(["scontrol", "reconfigure"], check=True)
        time.sleep(2)
        jobs = {"cancelled_at_once": submit_held(request(command=sleeper))}
        run(commands.cancel(jobs["cancelled_at_once"]))
        # Before slurmctld gives slurmdbd the job's details: no WorkDir yet.
        just_cancelled = run(commands.sacct([jobs["cancelled_at_once"]])).stdout
        jobs["cancelled_waiting"] = submit_held(request(command=sleeper))
        jobs["completed"] = submit(request())
        jobs["requeued_cancelled_at_once"] = submit(request(command=sleeper))
    finally:
        shutil.copy2(saved, CONF)
        subprocess.run(["scontrol", "reconfigure"], check=True)
    assert list(jobs.values()) == old, (jobs, old)
    until("recorded waiting", lambda: "PENDING" in accounted([jobs["cancelled_waiting"]]))
    run(commands.cancel(jobs["cancelled_waiting"]))
    requeue_and_cancel(jobs["requeued_cancelled_at_once"], at_once=True)
    requeued_just_cancelled = run(commands.sacct([jobs["requeued_cancelled_at_once"]])).stdout
    time.sleep(8)  # slurmctld sends the details of the jobs cancelled at once

    def save(name: str, text: str) -> None:
        (DATA / name).write_text(text)

    save("sacct_reused_id_cancelled_at_once.txt", just_cancelled)
    save("sacct_reused_id_requeued_cancelled_at_once.txt", requeued_just_cancelled)
    save("sacct_reused_ids.txt", run(commands.sacct(old)).stdout)
    save("sacct_reused_ids_every_field.txt", accounted(old))
    save("squeue_reused_ids.txt", run(commands.squeue(old)).stdout)
    save("reused_ids.json", json.dumps(jobs, indent=2) + "\n")
    # The older jobs' external ids: gpuq may still follow one after its id is another job's.
    save("reused_ids_older.json", json.dumps(older, indent=2) + "\n")
    print("captured into", DATA.relative_to(REPO))


if __name__ == "__main__":
    main()
