"""Pure parsers for what Slurm's commands print, and the mapping of Slurm's words to gpuq's.

Formats are the ones `commands.py` asks for, and `sinfo_resources` here (`|`-separated, no
header); every parser is tested against output captured from the real lab in
tests/backends/slurm/data/.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from queue_service.backends.base import (
    BackendError,
    JobStatus,
    MigInstanceInfo,
    NodeInfo,
    RemoteState,
)
from scheduler import mig

# Slurm job state -> (gpuq state, reason shown when Slurm gives none).
STATES: dict[str, tuple[str, str]] = {
    "PENDING": (RemoteState.QUEUED, ""),
    "CONFIGURING": (RemoteState.QUEUED, "nodes are being configured"),
    "REQUEUED": (RemoteState.QUEUED, "requeued by Slurm"),
    "REQUEUE_FED": (RemoteState.QUEUED, "requeued by Slurm"),
    "REQUEUE_HOLD": (RemoteState.QUEUED, "requeued and held by Slurm"),
    "SPECIAL_EXIT": (RemoteState.QUEUED, "held by Slurm after a special exit"),
    "RESV_DEL_HOLD": (RemoteState.QUEUED, "held: its reservation was deleted"),
    "SUSPENDED": (RemoteState.QUEUED, "suspended by Slurm"),
    "STOPPED": (RemoteState.QUEUED, "stopped by Slurm"),
    "RUNNING": (RemoteState.RUNNING, ""),
    # The job's processes are done but Slurm has not finished cleaning up; the final
    # state (and exit code) comes with the next poll.
    "COMPLETING": (RemoteState.RUNNING, ""),
    "SIGNALING": (RemoteState.RUNNING, ""),
    "STAGE_OUT": (RemoteState.RUNNING, ""),
    "RESIZING": (RemoteState.RUNNING, ""),
    "COMPLETED": (RemoteState.SUCCEEDED, ""),
    "FAILED": (RemoteState.FAILED, ""),
    "OUT_OF_MEMORY": (RemoteState.FAILED, "out of memory"),
    "CANCELLED": (RemoteState.CANCELLED, ""),
    "TIMEOUT": (RemoteState.TIMEOUT, "time limit reached"),
    "DEADLINE": (RemoteState.TIMEOUT, "deadline reached"),
    "NODE_FAIL": (RemoteState.NODE_FAILURE, "a node of the job failed"),
    "BOOT_FAIL": (RemoteState.NODE_FAILURE, "a node failed to boot"),
    "PREEMPTED": (RemoteState.PREEMPTED, "preempted by Slurm"),
    "REVOKED": (RemoteState.LOST, "revoked: the job runs on another cluster of the federation"),
}
# Reasons that always replace Slurm's own words, because these say more.
_OWN_REASON = {"OUT_OF_MEMORY", "SUSPENDED", "STOPPED", "CONFIGURING"}

_GRES = re.compile(
    r"(?P<name>[A-Za-z0-9_]+)(?::(?P<type>[^:,()]+))?:(?P<count>\d+)(?:\((?P<extra>[^)]*)\))?"
)
_MIG_PROFILE = re.compile(r"\d+g\.\d+gb(?:\+me)?")

# Without a known MIG geometry for the node's model, slices are packed by compute slices onto
# GPUs of this many, the A100/H100 family's count.
_FALLBACK_COMPUTE_SLICES = 7


# Linux's signal numbers (Slurm's nodes run Linux), to name what killed a job.
_SIGNALS = dict(
    enumerate(
        (
            "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV",
            "USR2", "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN",
            "TTOU", "URG", "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS",
        ),
        start=1,
    )
)  # fmt: skip
# Slurm's SIG_OOM (253): what slurmstepd reports for a step the OOM killer struck (by
# SIGKILL) instead of its status; as a signal (253 & 0x7f), ExitCode `0:125`.
_SIG_OOM = 125


# Signals that kill a job's process in practice (a crash, the OOM killer, a stop): a folded
# sacct code of one of these is worth the note; exit 1 or 2 read as SIGHUP or SIGINT is not.
_KILLING = frozenset({4, 6, 7, 8, 9, 11, 15})


def signal_name(number: int) -> str:
    if number in _SIGNALS:
        return f"SIG{_SIGNALS[number]}"
    return f"SIGRTMIN+{number - 34}" if 34 <= number <= 64 else f"signal {number}"


class Exit(NamedTuple):
    """A job's end as the shell convention reads it: `code` is 128 + N for a process killed by
    signal N (`signal`). `folded`: sacct's `N:0`, which is exit N or 128 + N (sacct prints an
    exit code of 128 or more less 128: exit 137 reads `9:0`, as exit 9 does)."""

    code: int
    signal: int = 0
    folded: bool = False


def _killed(signal: int) -> Exit:
    signal = 9 if signal == _SIG_OOM else signal
    return Exit(128 + signal, signal)


def sacct_exit(text: str) -> Exit | None:
    """sacct's `code:signal`: `3:0` is exit 3 (or 131, folded), `0:9` is death by signal 9
    (128 + 9)."""
    code, _, signal = text.strip().partition(":")
    if not code.isdigit():
        return None
    if signal.isdigit() and int(signal) and not int(code):
        return _killed(int(signal))
    return Exit(int(code), folded=0 < int(code) < 128)


def wait_status_exit(text: str) -> Exit | None:
    """squeue's exit_code is the raw wait status, exact: 768 is exit 3, 35072 exit 137, 9
    death by signal 9."""
    if not text.strip().isdigit():
        return None
    status = int(text)
    return _killed(status & 0x7F) if status & 0x7F else Exit(status >> 8)


def describe_exit(end: Exit | None) -> str:
    """A failed job's end as a Slurm user reads it, naming the signal; "" when Slurm's own
    reason says as much."""
    if end is None or not end.code:
        return ""
    if end.signal:
        return f"killed by signal {end.signal} ({signal_name(end.signal)})"
    if end.folded and end.code in _KILLING:
        more = end.code + 128
        return (
            f"exit code {end.code} or {more}: sacct cannot tell them apart"
            f" ({more}: a process killed by {signal_name(end.code)})"
        )
    if 128 < end.code <= 128 + 64:
        signal = end.code - 128
        return f"exit code {end.code}: a process killed by {signal_name(signal)} (128 + {signal})"
    return ""


def job_status(
    external_id: str, native: str, reason: str, exit_code: int | None, exit_said: str = ""
) -> JobStatus:
    """A JobStatus from Slurm's state (sacct's `CANCELLED by 1001` included) and reason.
    `exit_said` (describe_exit) replaces a failed job's reason: Slurm's is `JobLaunchFailure`
    for a batch script killed by a signal, `NonZeroExitCode` for exit 137."""
    word, _, rest = native.strip().partition(" ")
    state, default_reason = STATES.get(word, (RemoteState.QUEUED, f"unknown Slurm state {word}"))
    slurm_reason = "" if reason.strip() in ("", "None", "(null)") else reason.strip()
    text = default_reason if word in _OWN_REASON or not slurm_reason else slurm_reason
    if word == "CANCELLED" and rest.startswith("by "):
        text = f"cancelled by uid {rest[3:].strip()}"
    if word == "FAILED" and exit_said:
        text = exit_said
    terminal = state in RemoteState.TERMINAL
    started = None
    if word == "CANCELLED":
        # squeue: a job scancelled while it ran ends with its signal's wait status (15), one
        # cancelled while it waited with 0 and its pending reason; sacct says 0:0 for both.
        if exit_code:
            started = True
        elif slurm_reason:
            started = False
    return JobStatus(
        external_id=external_id,
        state=state,
        exit_code=exit_code if terminal else None,
        reason=text,
        native_state=word,
        started=started,
    )


def _rows(text: str, fields: int) -> Iterable[list[str]]:
    """`|`-separated rows of exactly `fields` fields; the last may itself contain `|` (free
    text). Other lines (sacct's "accounting storage is disabled") are not rows."""
    for line in text.split("\n"):
        row = line.split("|", fields - 1)
        if len(row) == fields:
            yield row


def dir_name(path: str) -> str:
    """A WorkDir's last part: gpuq names each attempt's directory `<uuid>.<attempt>`."""
    return path.strip().rstrip("/").rpartition("/")[2]


def parse_squeue(text: str, attempts: Mapping[str, str] | None = None) -> dict[str, JobStatus]:
    """`squeue -O JobID:|,State:|,exit_code:|,WorkDir:|,Reason:` rows. A row of an id that
    `attempts` ({id: the attempt gpuq submitted as it}) names is left out unless its WorkDir
    is that attempt's directory: Slurm gave the id to another job since (ids wrap at
    MaxJobId, and restart at 1 when slurmctld's state is wiped)."""
    found: dict[str, JobStatus] = {}
    for job_id, state, exit_code, workdir, reason in _rows(text, 5):
        attempt = (attempts or {}).get(job_id, "")
        if attempt and dir_name(workdir) != attempt:
            continue
        end = wait_status_exit(exit_code)
        found[job_id] = job_status(
            job_id, state, reason, None if end is None else end.code, describe_exit(end)
        )
    return found


def squeue_workdirs(text: str) -> dict[str, str]:
    """{id: WorkDir} of the same squeue rows: which job has each id now."""
    return {row[0]: row[3].strip() for row in _rows(text, 5)}


def only_unknown_ids(stderr: str) -> bool:
    """squeue -j with a single id Slurm no longer knows fails with this (more ids do not)."""
    return "Invalid job id specified" in stderr


# sacct's Start of a job that has not started, and its NodeList of a job given no nodes.
_NO_START = frozenset({"", "None", "Unknown"})
_NO_NODES = frozenset({"", "None assigned"})


def _record_ran(start: str, nodes: str) -> bool:
    return start.strip() not in _NO_START and nodes.strip() not in _NO_NODES


def parse_sacct(
    text: str,
    workdirs: Mapping[str, str] | None = None,
    *,
    displaced: Container[str] = (),
) -> dict[str, JobStatus]:
    """`sacct -n -P -X -D -o JobIDRaw,State,ExitCode,Start,NodeList,WorkDir,Reason` rows:
    every record of each id, oldest first. A job's state, exit code and reason are its last
    record's. It ran if any of its records had a start and nodes: its end cannot tell
    (`CANCELLED by <uid>|0:0` either way), and nor can Start alone. A job cancelled while it
    waited has Start `None`, unless slurmdbd had not yet recorded it waiting: then Start is
    the time of the cancel, and only NodeList (`None assigned`) says it never ran. A job
    Slurm requeued (`REQUEUED`; `NODE_FAIL` after a node failure) keeps each run in a
    record of its own, so one cancelled while it waited to run again ran, though its last
    record says otherwise.

    The job's records are those with its last record's WorkDir: -D also lists older jobs
    that had the id, and gpuq gives each attempt a directory of its own. For a few seconds
    after a job that slurmdbd had no record of its current wait is cancelled, that last
    record has no WorkDir (and is named `allocation`), and before slurmdbd has any record of
    a new job, every record is an older job's: `workdirs` ({id: its WorkDir, from squeue,
    which still shows such jobs, or the attempt that names it}) tells them apart, by the
    directory's name; without it, the last record's WorkDir is taken, and where there is
    none, whether an earlier record that ran was this job's is unknown. Such a last record
    without WorkDir (slurmdbd also has none for a few seconds after a submit or a start) is
    not the job's when squeue shows its id as another job's (`displaced`): it is that job's."""
    records: dict[str, list[list[str]]] = {}
    for row in _rows(text, 7):
        records.setdefault(row[0], []).append(row)
    found: dict[str, JobStatus] = {}
    for job_id, rows in records.items():
        known = dir_name((workdirs or {}).get(job_id, ""))
        if known:
            # The job's directory, from squeue: its records are those in it, and a last one
            # without any (its cancel, just recorded); none while slurmdbd has no record of it
            # yet, when every record is an older job's.
            rows = [
                row
                for i, row in enumerate(rows)
                if dir_name(row[5]) == known
                or (i == len(rows) - 1 and not row[5].strip() and job_id not in displaced)
            ]
            if not rows:
                continue
        _, state, exit_code, _, _, workdir, reason = rows[-1]
        end = sacct_exit(exit_code)
        status = job_status(
            job_id, state, reason, None if end is None else end.code, describe_exit(end)
        )
        workdir = known or dir_name(workdir)
        earlier = [row for row in rows[:-1] if workdir and dir_name(row[5]) == workdir]
        own = [*earlier, rows[-1]]
        if any(_record_ran(row[3], row[4]) for row in own):
            status = dataclasses.replace(status, started=True)
        elif not workdir and any(_record_ran(row[3], row[4]) for row in rows):
            status = dataclasses.replace(status, started=None)
        elif status.state in RemoteState.TERMINAL:
            status = dataclasses.replace(status, started=False)
        found[job_id] = status
    return found


def parse_lookup(text: str) -> dict[str, str]:
    """`JobID|WorkDir` rows (squeue or sacct) -> {workdir: job id}, latest job last."""
    found: dict[str, str] = {}
    for job_id, workdir in _rows(text, 2):
        found[workdir.strip()] = job_id.strip()
    return found


def parse_sbatch(stdout: str) -> str:
    """`sbatch --parsable` prints `id` or `id;cluster`."""
    job_id = stdout.strip().split(";", 1)[0]
    if not job_id.isdigit():
        raise BackendError(f"sbatch printed no job id: {stdout.strip()[:200]!r}")
    return job_id


_TRANSIENT = (
    "unable to contact slurm controller",
    "socket timed out",
    "connection refused",
    "connection reset",
    "zero bytes were transmitted",
    "temporarily unable to accept job",
    "try again",
    "slurmdbd",
    "problem talking to the database",
    # A limit on how many jobs the submit account (by default every team's) has in Slurm
    # (QOSMaxSubmitJobPerUserLimit, AssocMaxSubmitJobLimit, QOSGrpSubmitJobsLimit...): the
    # same sbatch succeeds once some of them end.
    "maxsubmitjob",
    "grpsubmitjob",
)


def command_error(what: str, stderr: str, rc: int, *, rejection_is_permanent: bool) -> BackendError:
    """Classify a failed Slurm command. The controller not answering is transient. For sbatch
    (rejection_is_permanent) anything else is Slurm refusing this job, which retrying cannot
    change: bad partition, invalid account, unsatisfiable request. A negative `rc` is no exit
    status at all (SSHConnection.run's -1: the connection dropped, or the command was killed):
    the command may have done its work (an sbatch may have made the job), so transient."""
    if rc < 0:
        said = " ".join(stderr.split())[:500]
        return BackendError(
            f"{what} gave no exit status (the connection dropped or the command was killed)"
            + (f": {said}" if said else "")
        )
    message = " ".join(stderr.split())[:500] or f"exit status {rc}"
    transient = any(marker in message.lower() for marker in _TRANSIENT)
    return BackendError(
        f"{what} failed: {message}", permanent=rejection_is_permanent and not transient
    )


# sinfo(1)'s suffixes of a node state that keep new jobs off it while its own run on: `$` a
# reservation with the MAINT flag, `!` a power down pending, `%` being powered down. `~`
# (powered off to save power) is not one: Slurm powers such a node up for the job it is given.
_NO_NEW_WORK_SUFFIXES = "$!%"


def _node_state(state_long: str) -> str:
    """down (no job runs there), drain (its jobs run on, no new ones: failing, a node in a
    reservation other jobs may not use, in maintenance, powering down) or up. `*`: not
    responding."""
    text = state_long.strip().lower()
    base = text.rstrip("*~#!%$@^-")
    suffixes = text[len(base) :]
    if "*" in suffixes:
        return "down"
    if base.startswith("failing"):  # before "fail": its jobs still run
        return "drain"
    if base.startswith(("down", "fail", "inval", "unknown", "future")):
        return "down"
    if "drain" in base or base.startswith(("maint", "reboot", "reserved")):
        return "drain"
    if any(s in _NO_NEW_WORK_SUFFIXES for s in suffixes):
        return "drain"
    return "up"


def _indices(idx: str) -> set[int]:
    found: set[int] = set()
    for part in idx.split(","):
        low, _, high = part.partition("-")
        if low.isdigit():
            found.update(range(int(low), int(high or low) + 1))
    return found


@dataclass(frozen=True)
class _Gres:
    gres_type: str | None
    count: int


def _gpu_gres(text: str) -> list[_Gres]:
    return [
        _Gres(m.group("type"), int(m.group("count")))
        for m in _GRES.finditer(text)
        if m.group("name") == "gpu"
    ]


def _used_indices(text: str) -> set[int]:
    used: set[int] = set()
    for m in _GRES.finditer(text):
        extra = m.group("extra") or ""
        if m.group("name") == "gpu" and extra.startswith("IDX:"):
            used |= _indices(extra[4:])
    return used


def _profile(name: str) -> str | None:
    match = _MIG_PROFILE.search(name)
    return match.group(0) if match else None


# Steps the packing search may take per layout before it falls back to greedy first fit;
# the layouts of real nodes (8 GPUs of up to 7 slices) take at most a few thousand.
_PACK_BUDGET = 20000


class _OverBudget(Exception):
    pass


def _group_slices(profiles: list[str], fits: Callable[[list[str]], bool]) -> list[list[str]]:
    """`profiles` grouped per GPU, on as few GPUs as `fits` allows (Slurm lists GRES by type,
    so which slices share a GPU is lost). A search over what remains, as counts per profile:
    the GPU holding the largest remaining slice takes a layout that no remaining slice could
    be added to (one that could is never needed: moving that slice there costs no GPU).
    Past its budget, greedy first fit, largest first. A profile no GPU can hold alone (not
    in the model's table) gets a GPU of its own."""
    kinds = sorted(set(profiles), key=lambda p: (-_compute(p), p))
    alone = [p for p in kinds if not fits([p])]
    kinds = [p for p in kinds if p not in alone]
    layouts: list[tuple[int, ...]] = []
    available = [profiles.count(p) for p in kinds]

    def enumerate_layouts(i: int, counts: tuple[int, ...], held: list[str]) -> None:
        if i == len(kinds):
            if held:
                layouts.append(counts)
            return
        n, trial = 0, held
        while True:
            enumerate_layouts(i + 1, (*counts, n), trial)
            n += 1
            trial = [*trial, kinds[i]]
            # Removing a slice from a valid layout leaves a valid one: stop at the first miss.
            if n > available[i] or not fits(trial):
                return

    enumerate_layouts(0, (), [])
    layout_set = set(layouts)
    compute = [_compute(k) for k in kinds]
    # Fullest layouts first: the first packing found is then usually a tight one.
    layouts.sort(key=lambda layout: -sum(n * c for n, c in zip(layout, compute, strict=True)))
    per_gpu = max(
        (sum(n * c for n, c in zip(lay, compute, strict=True)) for lay in layouts), default=1
    )
    most = [max(lay[i] for lay in layouts) for i in range(len(kinds))]

    def lower(rest: tuple[int, ...]) -> int:
        by_compute = -(-sum(r * c for r, c in zip(rest, compute, strict=True)) // per_gpu)
        return max(by_compute, *(-(-r // m) for r, m in zip(rest, most, strict=True)))

    failed: dict[tuple[int, ...], int] = {}  # remainders that do not fit on this many GPUs
    steps = [0]

    def pack(rest: tuple[int, ...], k: int) -> list[tuple[int, ...]] | None:
        first = next((i for i, n in enumerate(rest) if n), None)
        if first is None:
            return []
        if k <= failed.get(rest, 0) or lower(rest) > k:
            return None
        steps[0] += 1
        if steps[0] > _PACK_BUDGET:
            raise _OverBudget
        for layout in layouts:
            if layout[first] == 0 or any(n > r for n, r in zip(layout, rest, strict=True)):
                continue
            left = tuple(r - n for r, n in zip(rest, layout, strict=True))
            if any(
                left[i] and (*layout[:i], layout[i] + 1, *layout[i + 1 :]) in layout_set
                for i in range(len(kinds))
            ):
                continue  # not maximal
            found = pack(left, k - 1)
            if found is not None:
                return [layout, *found]
        failed[rest] = k
        return None

    rest = tuple(available)
    try:
        chosen: list[tuple[int, ...]] | None = None
        k = lower(rest) if kinds else 0
        while chosen is None:
            chosen = pack(rest, k)
            k += 1
        gpus = [[p for p, n in zip(kinds, lay, strict=True) for _ in range(n)] for lay in chosen]
    except _OverBudget:
        gpus = []
        for profile in (p for p in kinds for _ in range(profiles.count(p))):
            for gpu in gpus:
                if fits([*gpu, profile]):
                    gpu.append(profile)
                    break
            else:
                gpus.append([profile])
    return gpus + [[p] for p in alone for _ in range(profiles.count(p))]


def _compute(profile: str) -> int:
    return mig.parse_profile(profile).compute


@lru_cache(maxsize=1024)
def _gpus_for(gpu_model: str, profiles: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """The slices' profiles per GPU (nodes of one cluster mostly share a layout: cached)."""
    table = mig.geometry(gpu_model)

    def fits(held: list[str]) -> bool:
        if table is not None:
            return mig.place(table, held) is not None
        return sum(_compute(p) for p in held) <= _FALLBACK_COMPUTE_SLICES

    groups = _group_slices(list(profiles), fits) if profiles else []
    return tuple(tuple(gpu) for gpu in groups)


def pack_mig(
    gpu_model: str, slices: list[tuple[str, bool]], first_gpu: int
) -> tuple[int, tuple[MigInstanceInfo, ...]]:
    """Slurm reports slices (profile, in use), not the GPUs they live on: pack them onto as
    few GPUs as the model's MIG geometry allows. Returns (GPUs, instances)."""
    table = mig.geometry(gpu_model)
    gpus = _gpus_for(gpu_model, tuple(sorted(p for p, _ in slices)))
    # Slices of one profile are interchangeable: hand out their in-use flags in GRES order.
    flags: dict[str, list[bool]] = {}
    for profile, in_use in slices:
        flags.setdefault(profile, []).append(in_use)
    instances: list[MigInstanceInfo] = []
    for offset, held in enumerate(gpus):
        placed = mig.place(table, held) if table is not None else None
        if placed is None:
            # Unknown geometry: one slice after another, sized by compute slices.
            layout, start = [], 0
            for profile in held:
                size = _compute(profile)
                layout.append((profile, start, size))
                start += size
        else:
            # Back to the names Slurm reported (the table may spell one `7g.80gb`, not `7g.79gb`).
            names: dict[str, list[str]] = {}
            for profile in held:
                spec = table.profile(profile) if table is not None else None
                names.setdefault(spec.name if spec else profile, []).append(profile)
            layout = sorted(
                ((names[p.profile].pop(0), p.start, p.size) for p in placed), key=lambda x: x[1]
            )
        for profile, start, size in layout:
            in_use = flags[profile].pop(0)
            instances.append(MigInstanceInfo(first_gpu + offset, profile, start, size, in_use))
    return len(gpus), tuple(instances)


def mig_gres_types(text: str, gres_map: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The same sinfo rows -> {node: {MIG profile: the node's own GRES type of it}}: the
    profile parse_sinfo offers a slice as (`1g.10gb`) is often not a type the node has
    (a site's `a100_1g.10gb`, or `h100_1g.10gb` beside an A100 node's), and a job must ask
    for the type its node has."""
    to_name = {gres_type: name for name, gres_type in gres_map.items()}
    found: dict[str, dict[str, str]] = {}
    for row in _rows(text, 7):
        types = found.setdefault(row[0], {})
        for g in _gpu_gres(row[2]):
            if g.gres_type and (profile := _profile(to_name.get(g.gres_type, g.gres_type))):
                types.setdefault(profile, g.gres_type)
    return found


def gpu_gres_types(text: str, gres_map: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The same sinfo rows -> {node: {GPU model: the node's GRES type of its whole GPUs}}. A
    model a node lists no type for (untyped GPUs, `Gres=gpu:4`, whose model comes from a
    feature or is "unknown") is asked for as `gpu:N`: Slurm refuses any type the node lacks."""
    to_name = {gres_type: name for name, gres_type in gres_map.items()}
    found: dict[str, dict[str, str]] = {}
    for row in _rows(text, 7):
        types = found.setdefault(row[0], {})
        for g in _gpu_gres(row[2]):
            if g.gres_type and not _profile(model := to_name.get(g.gres_type, g.gres_type)):
                types.setdefault(model, g.gres_type)
    return found


# A node's CPUs (CPUTot) and memory (RealMemory, MB): what gpuq charges CPUs and memory by.
SINFO_RESOURCES_FORMAT = "NodeList:|,CPUs:|,Memory:"


def sinfo_resources(partition: str | None) -> str:
    where = f" -p {shlex.quote(partition)}" if partition else ""
    return f"sinfo -h -N{where} -O {shlex.quote(SINFO_RESOURCES_FORMAT)}"


def parse_sinfo_resources(text: str) -> dict[str, tuple[int | None, int | None]]:
    """`sinfo -N -O NodeList:|,CPUs:|,Memory:` rows -> {node: (CPUs, memory MB)}. Slurm's
    default RealMemory is 1 (a node whose memory is not configured): unknown, as is anything
    not a number."""
    found: dict[str, tuple[int | None, int | None]] = {}
    for name, cpus, memory in _rows(text, 3):
        cpus, memory = cpus.strip(), memory.strip()
        found[name.strip()] = (
            int(cpus) if cpus.isdigit() and int(cpus) > 0 else None,
            int(memory) if memory.isdigit() and int(memory) > 1 else None,
        )
    return found


def parse_sinfo(
    text: str,
    gres_map: Mapping[str, str],
    resources: Mapping[str, tuple[int | None, int | None]] | None = None,
) -> list[NodeInfo]:
    """`sinfo -N -O NodeList:|,StateLong:|,Gres:|,GresUsed:|,Features:|,PartitionName:|,Reason:`
    rows -> one NodeInfo per node (a node in several partitions appears once).

    GRES types are reverse-mapped through gres_map (unmapped types keep their own name). A
    node whose GRES types are MIG profiles is mig=True; its GPU model comes from a node feature
    that gres_map knows (e.g. Features=a100 with {"A100-SXM4-80GB": "a100"}). CPUs and memory
    come from `resources` (parse_sinfo_resources); a node it does not name has them unknown."""
    resources = resources or {}
    to_name = {gres_type: name for name, gres_type in gres_map.items()}
    rows: dict[str, list[str]] = {}
    for row in _rows(text, 7):
        if row[0] in rows:
            rows[row[0]][5] += "," + row[5]
        else:
            rows[row[0]] = row
    nodes = []
    for name, state, gres_text, used_text, features, partitions, reason in rows.values():
        feature_list = [f for f in features.split(",") if f and f != "(null)"]
        used = _used_indices(used_text)
        # Whole GPUs per model (None: untyped) and the GRES type it was listed as, in order.
        whole: dict[str | None, int] = {}
        listed: dict[str | None, str | None] = {}
        slices, index = [], 0
        for g in _gpu_gres(gres_text):
            mapped = to_name.get(g.gres_type, g.gres_type) if g.gres_type else None
            profile = _profile(mapped) if mapped else None
            if profile:
                slices += [(profile, i in used) for i in range(index, index + g.count)]
            else:
                whole[mapped] = whole.get(mapped, 0) + g.count
                listed.setdefault(mapped, g.gres_type)
            index += g.count
        # The scheduler's node has one GPU model: the one it has most GPUs of (the first
        # listed on a tie). The others are not counted as that model: a job would be placed
        # on GPUs Slurm does not give it.
        main = max(whole, key=whole.__getitem__, default=None)
        counted = whole.get(main, 0)
        feature_models = [
            to_name.get(f, f)
            for f in feature_list
            if (f in to_name or f in gres_map) and not _profile(to_name.get(f, f))
        ]
        models = [main] if main else []
        gpu_model = next(iter(models + feature_models), "unknown" if (whole or slices) else "")
        mig_gpus, instances = pack_mig(gpu_model, slices, counted)
        notes = ["" if reason.strip() in ("none", "") else reason.strip()]
        if len(whole) > 1:
            skipped = ", ".join(
                f"gpu:{listed[m]}:{n}" + (f" ({m})" if m != listed[m] else "")
                if m
                else f"gpu:{n} (untyped)"
                for m, n in whole.items()
                if m != main
            )
            notes.append(
                f"gpuq counts only its {counted} {gpu_model} GPUs (one GPU model per node):"
                f" not {skipped}"
            )
        nodes.append(
            NodeInfo(
                name=name,
                gpu_model=gpu_model,
                gpus=counted + mig_gpus,
                state=_node_state(state),
                mig=bool(slices),
                mig_instances=instances,
                labels={"slurm.partitions": partitions, "slurm.features": ",".join(feature_list)},
                reason="; ".join(n for n in notes if n),
                cpus=resources.get(name, (None, None))[0],
                memory_mb=resources.get(name, (None, None))[1],
            )
        )
    return nodes
