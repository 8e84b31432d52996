"""The command lines gpuq runs on the login node: pure builders.

No user text ever reaches these lines: job ids are Slurm's digits, paths are gpuq's own (workdir
setting + gpuq job id, validated), and every value is quoted anyway. The batch script itself
travels on stdin. The login shell must be a POSIX shell (bash, dash, zsh, ksh); each line runs
under coreutils `timeout` and `sh -c` there (`ssh.remote_command`).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from queue_service.backends.base import BackendError

# Reason last: it is free text, and the parsers split only up to it. WorkDir: whether the job
# with the id is still the attempt gpuq submitted (`parsers.parse_squeue`).
SQUEUE_FORMAT = "JobID:|,State:|,exit_code:|,WorkDir:|,Reason:"
# Start and NodeList: whether an ended job ever ran (its end cannot tell: a job cancelled
# while it waited and one cancelled while it ran both end `CANCELLED by <uid>|0:0`).
# WorkDir: which records of an id are this job's (see `sacct`).
SACCT_FIELDS = "JobIDRaw,State,ExitCode,Start,NodeList,WorkDir,Reason"
# The squeue that asks only which directory each job runs in (`lookup_squeue`).
WORKDIR_FORMAT = "JobID:|,WorkDir:"
SINFO_FORMAT = "NodeList:|,StateLong:|,Gres:|,GresUsed:|,Features:|,PartitionName:|,Reason:"
# How far back sacct looks for an earlier submission of the same attempt.
LOOKUP_WINDOW = "now-30days"

# The script arrives on stdin. sbatch is the whole command line, so no shell forks for it
# (`timeout`'s one fork is all): under load each extra process costs about as much as sbatch.
SUBMIT = "sbatch --parsable"


def job_ids(external_ids: Sequence[str]) -> str:
    for job_id in external_ids:
        if not job_id.isdigit():
            raise BackendError(f"{job_id!r} is not a Slurm job id", permanent=True)
    return ",".join(external_ids)


# Ids per squeue or sacct: Linux takes no argument over 128 KiB (MAX_ARG_STRLEN), and `-j`'s
# list is one; 8,000 ids of up to 10 digits are 88 kB.
IDS_PER_CALL = 8000


def id_chunks(ids: Sequence[str]) -> list[Sequence[str]]:
    return [ids[i : i + IDS_PER_CALL] for i in range(0, len(ids), IDS_PER_CALL)]


def squeue(external_ids: Sequence[str]) -> str:
    """All states (finished jobs stay for MinJobAge): one call for every id."""
    return f"squeue -h -a -t all -j {job_ids(external_ids)} -O {shlex.quote(SQUEUE_FORMAT)}"


def sacct(external_ids: Sequence[str]) -> str:
    """Every record of each job (-D, --duplicates), oldest first, not only its last: a run
    that Slurm requeued (a node failure, `scontrol requeue`) has a record of its own, and the
    last record of a job cancelled while it waited for its next run shows no nodes.

    -D also lists older jobs that had the same id (ids restart at 1 when Slurm's state is
    wiped while slurmdbd keeps its records, and wrap at MaxJobId). WorkDir tells them apart
    (`parsers.parse_sacct`): gpuq gives each attempt a directory of its own. Submit cannot:
    Slurm resets it at every requeue. Nor can the name, nor -S without the time of our
    first submit, which poll does not have."""
    return f"sacct -n -P -X -D -j {job_ids(external_ids)} -o {SACCT_FIELDS}"


def sinfo(partition: str | None) -> str:
    where = f" -p {shlex.quote(partition)}" if partition else ""
    return f"sinfo -h -N{where} -O {shlex.quote(SINFO_FORMAT)}"


def _one_user(user: str) -> str:
    # `--user=` takes a comma-separated list: a name with a comma would widen the lookup.
    if not user or "," in user:
        raise BackendError(f"{user!r} is not one user name", permanent=True)
    return shlex.quote(user)


# The lookups of a submit in doubt ask for the submit account's jobs only: squeue lists every
# user's, and a job's name and WorkDir are visible to all, so another user's job could carry
# both (and sacct run by root or an admin lists every user's too).
def lookup_squeue(name: str, user: str) -> str:
    return (
        f"squeue -h -a -t all --user={_one_user(user)} --name={shlex.quote(name)}"
        f" -O {shlex.quote(WORKDIR_FORMAT)}"
    )


def lookup_sacct(name: str, user: str) -> str:
    return (
        f"sacct -n -P -X --user={_one_user(user)} --name={shlex.quote(name)}"
        f" -S {LOOKUP_WINDOW} -o JobIDRaw,WorkDir"
    )


def terminate(external_id: str) -> str:
    """TERM to the batch step and every step: the job may save state and exit by itself."""
    return f"scancel --signal=TERM --full {job_ids([external_id])}"


def cancel(external_id: str) -> str:
    """Slurm's own cancel: TERM, KILL after KillWait, and the state CANCELLED."""
    return f"scancel {job_ids([external_id])}"
