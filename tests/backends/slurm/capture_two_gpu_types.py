"""Capture data/sinfo_two_gpu_types.txt: `python -m tests.backends.slurm.capture_two_gpu_types`
as root, with the lab's munge running (`deploy/slurm-lab/lab up`). Takes about 15 seconds.

The lab's nodes have one GPU type each, and changing its slurm.conf would disturb everyone using
it, so this starts a throw-away Slurm of its own (SLURM_CONF in a temporary directory, its own
ports, no accounting) with two nodes of two GPU types (`Gres=gpu:a100:4,gpu:v100:2`, and the
same listed the other way round), runs jobs on them, captures what `nodes()` reads, and stops
it. The fake GPU devices are the lab's."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from queue_service.backends.slurm import commands, parsers

DATA = Path(__file__).parent / "data"
DEVICES = "/var/lib/slurm-lab/dev"

SLURM_CONF = """\
ClusterName=twotypes
SlurmctldHost=localhost
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=6917
SlurmdPort=6918
StateSaveLocation={dir}/ctld
SlurmdSpoolDir={dir}/d/%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
SlurmdParameters=config_overrides
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
GresTypes=gpu
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
NodeName=mixed1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=17101 CPUs=8 RealMemory=16000 \
Gres=gpu:a100:4,gpu:v100:2 Features=a100,v100 State=UNKNOWN
NodeName=mixed2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=17102 CPUs=8 RealMemory=16000 \
Gres=gpu:v100:2,gpu:a100:4 State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
GRES_CONF = f"""\
AutoDetect=off
NodeName=mixed[1-2] Name=gpu Type=a100 File={DEVICES}/nvidia[0-3]
NodeName=mixed[1-2] Name=gpu Type=v100 File={DEVICES}/nvidia[4-5]
"""


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="slurm-two-types-") as tmp:
        base = Path(tmp)
        os.chmod(base, 0o755)  # noqa: S103 - slurmctld runs as the slurm user
        (base / "ctld").mkdir()
        (base / "d").mkdir()
        subprocess.run(["chown", "slurm:slurm", str(base / "ctld")], check=True)
        (base / "slurm.conf").write_text(SLURM_CONF.format(dir=base))
        (base / "gres.conf").write_text(GRES_CONF)
        env = {**os.environ, "SLURM_CONF": str(base / "slurm.conf")}

        def run(command: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                shlex.split(command), env=env, cwd=base, capture_output=True, text=True
            )

        try:
            run("/usr/sbin/slurmctld")
            for node in ("mixed1", "mixed2"):
                run(f"/usr/sbin/slurmd -N {node}")
            deadline = time.time() + 30
            while run("sinfo -h -N -o %T").stdout.split() != ["idle", "idle"]:
                assert time.time() < deadline, run("sinfo -N").stdout
                time.sleep(0.5)
            for node, gres in (("mixed1", "a100:2"), ("mixed1", "v100:1"), ("mixed2", "6")):
                submitted = run(
                    f"sbatch -w {node} --gres=gpu:{gres} -o /dev/null --wrap 'sleep 60'"
                )
                assert submitted.returncode == 0, submitted.stderr
            time.sleep(3)
            (DATA / "sinfo_two_gpu_types.txt").write_text(run(commands.sinfo(None)).stdout)
            (DATA / "sinfo_two_gpu_types_resources.txt").write_text(
                run(parsers.sinfo_resources(None)).stdout
            )
            # More GPUs of one type than the node has of it, though it has as many in all.
            refused = run("sbatch -w mixed1 --gres=gpu:a100:6 -o /dev/null --wrap true")
            assert refused.returncode != 0
            (DATA / "sbatch_two_gpu_types_a100_6.stderr.txt").write_text(refused.stderr)
        finally:
            run("scancel -u root")
            time.sleep(2)
            for pid_file in sorted(base.glob("*.pid")):
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid_file.read_text()), signal.SIGTERM)
            time.sleep(3)
    print("captured into", DATA)


if __name__ == "__main__":
    main()
