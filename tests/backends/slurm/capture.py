"""Re-capture tests/backends/slurm/data/ from the real lab: `python -m tests.backends.slurm.capture`
as root with `deploy/slurm-lab/lab up` done. Takes about two minutes (a TIMEOUT needs 60-90 s).

Commands run as the submit user over SSH with the backend's own command builders, so the
captured formats are exactly what the parsers get; root only disturbs the lab (suspend, drain,
requeue, kill a slurmd, stop slurmctld and slurmdbd) and restores it with `lab up` at the end."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from queue_service.backends.slurm import commands, parsers, script
from queue_service.backends.slurm.backend import slurm_job_id

from .conftest import LAB, REPO, kill_node, lab_backend, request

DATA = Path(__file__).parent / "data"


def main() -> None:
    backend = lab_backend()
    run = backend.connection.run

    def sbatch(*args: str) -> str:
        result = run("sbatch --parsable " + " ".join(args))
        assert result.rc == 0, result.stderr
        return result.stdout.strip()

    def save(name: str, text: str) -> None:
        (DATA / name).write_text(text)

    jobs = {
        "timeout": sbatch("--time=0:01", "--no-requeue", "--wrap='sleep 300'"),
        "exit3": sbatch("--wrap='exit 3'"),
        "sigkill": sbatch("--wrap='kill -9 $$'"),
        "completed": sbatch("--wrap=true"),
        "cancelled": sbatch("--wrap='sleep 300'"),
        "suspended": sbatch("--wrap='sleep 300'"),
        "held": sbatch("--hold", "--wrap=true"),
        "fill": sbatch("--nodelist=gpu1", "--gres=gpu:a100:4", "--wrap='sleep 300'"),
        "resources": sbatch("--nodelist=gpu1", "--gres=gpu:a100:4", "--wrap='sleep 300'"),
        "mig": sbatch("--gres=gpu:1g.10gb:3", "--wrap='sleep 300'"),
        "node_fail": sbatch("--nodelist=gpu3", "--no-requeue", "--wrap='sleep 300'"),
        "requeued": sbatch("--requeue", "--nodelist=gpu2", "--wrap='sleep 300'"),
        "held_cancelled": sbatch("--hold", "--wrap=true"),
        # Runs, is requeued, and is cancelled by its own user (as gpuq cancels) while it waits
        # to run again: its last accounting record shows no nodes.
        "requeued_cancelled": sbatch("--requeue", "--nodelist=gpu2", "--wrap='sleep 300'"),
    }
    # Cancelled by its own user before slurmdbd recorded it waiting: sacct's Start is then
    # the cancel's time, its NodeList `None assigned` (`resources`, cancelled after it
    # waited, has Start `None`).
    run(commands.cancel(jobs["held_cancelled"]))
    gpuq_job = request(command=("true",))
    lookup = {
        "job_id": slurm_job_id(backend.submit(gpuq_job).external_id),
        "job_dir": script.job_dir(backend.workdir(), gpuq_job),
    }
    time.sleep(3)
    run(commands.cancel(jobs["cancelled"]))
    subprocess.run(["scontrol", "suspend", jobs["suspended"]], check=True)
    subprocess.run(["scontrol", "requeue", jobs["requeued"]], check=True)
    subprocess.run(["scontrol", "requeue", jobs["requeued_cancelled"]], check=True)
    # Cancelled once slurmdbd has recorded its first run (REQUEUED, with its start and nodes).
    deadline = time.time() + 30
    while "REQUEUED" not in run(commands.sacct([jobs["requeued_cancelled"]])).stdout:
        assert time.time() < deadline, "slurmdbd never recorded the requeue"
        time.sleep(0.5)
    run(commands.cancel(jobs["requeued_cancelled"]))
    subprocess.run(
        ["scontrol", "update", "nodename=gpu2", "state=drain", "reason=maintenance | disk"],
        check=True,
    )
    time.sleep(2)
    live = run(commands.squeue(list(jobs.values())))
    save("squeue_live.txt", live.stdout)
    save("sinfo_mixed.txt", run(commands.sinfo("gpu")).stdout)
    # The second sinfo of `nodes()`: each node's CPUs and memory.
    save("sinfo_resources.txt", run(parsers.sinfo_resources("gpu")).stdout)
    subprocess.run(["scontrol", "update", "nodename=gpu2", "state=resume"], check=True)
    kill_node("gpu3")
    deadline = time.time() + 150
    while time.time() < deadline:
        states = run(commands.squeue([jobs["timeout"], jobs["node_fail"]])).stdout
        if "TIMEOUT" in states and "NODE_FAIL" in states:
            break
        time.sleep(5)
    save("sinfo_node_down.txt", run(commands.sinfo(None)).stdout)
    subprocess.run([str(LAB), "up"], check=True, capture_output=True)
    # `resources` before `fill`, whose end would let it start: it is cancelled while pending.
    for key in ("resources", "suspended", "fill", "mig", "requeued"):
        subprocess.run(["scancel", jobs[key]], check=False)
    subprocess.run(["scontrol", "release", jobs["held"]], check=False)
    time.sleep(4)
    save("squeue_final.txt", run(commands.squeue(list(jobs.values()))).stdout)
    save("sacct_final.txt", run(commands.sacct(list(jobs.values()))).stdout)
    # The same without -D: only each id's last record, as sacct shows by default.
    last_records = f"sacct -n -P -X -j {commands.job_ids(list(jobs.values()))}"
    save(
        "sacct_final_without_duplicates.txt",
        run(f"{last_records} -o {commands.SACCT_FIELDS}").stdout,
    )
    name = script.job_name(gpuq_job.job_id)
    user = backend.settings.user
    save("lookup_squeue.txt", run(commands.lookup_squeue(name, user)).stdout)
    save("lookup_sacct.txt", run(commands.lookup_sacct(name, user)).stdout)
    save("lookup.json", json.dumps(lookup, indent=2) + "\n")
    one_unknown = run(commands.squeue(["999999"]))
    save("squeue_unknown_id.stderr.txt", one_unknown.stderr)

    for name, args in {
        "bad_partition": ("-p nope", "--wrap=true"),
        "bad_account": ("-A nope", "--wrap=true"),
        "bad_gres": ("--gres=gpu:h100:1", "--wrap=true"),
    }.items():
        save(f"sbatch_{name}.stderr.txt", run("sbatch --parsable " + " ".join(args)).stderr)
    subprocess.run(["pkill", "-F", "/run/slurm/slurmctld.pid"], check=True)
    time.sleep(3)
    save("sbatch_controller_down.stderr.txt", run("sbatch --parsable --wrap=true").stderr)
    save("squeue_controller_down.stderr.txt", run(commands.squeue([jobs["exit3"]])).stderr)
    subprocess.run([str(LAB), "up"], check=True, capture_output=True)
    capture_slurmdbd_down()
    save("jobs.json", json.dumps(jobs, indent=2) + "\n")
    print("captured into", DATA.relative_to(REPO))


def capture_slurmdbd_down() -> None:
    """What sacct says while slurmdbd is down (the controller still answers squeue)."""
    run = lab_backend().connection.run
    subprocess.run(["pkill", "-F", "/run/slurm/slurmdbd.pid"], check=True)
    time.sleep(2)
    try:
        down = run(commands.sacct(["1"]))
        assert down.rc != 0, down.stdout
        (DATA / "sacct_slurmdbd_down.stderr.txt").write_text(down.stderr)
    finally:
        subprocess.run([str(LAB), "up"], check=True, capture_output=True)


if __name__ == "__main__":
    main()
