"""The scheduler's input and output: immutable, standard library only (frozen dataclasses;
Reason and Wait, made once per waiting job, are NamedTuples).

They have slots: a cycle reads a few hundred thousand of them and writes one Wait per pending
job, and without a per-instance dict each is one object for the garbage collector, not two
(at 100k pending jobs that was about a fifth of a call: bench/scheduler_bench.py).

A Snapshot is everything `schedule()` may look at; Decisions is everything it may say.
Times are float seconds on one clock chosen by the caller (epoch seconds in the service,
simulated seconds in the simulator). Fields may be added with defaults; none may be removed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

ANY_MODEL = "*"


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    preemptible: bool


DEFAULT_PRIORITY_CLASSES: tuple[PriorityClass, ...] = (
    PriorityClass("high", 1000, False),
    PriorityClass("normal", 100, True),
    PriorityClass("low", 10, True),
)


@dataclass(frozen=True, slots=True)
class Quota:
    """A team's quota for one GPU model, or for any model with gpu_model == "*".

    Counts are GPUs; a MIG slice counts as compute_slices / 7 (/ 4 on A30).
    borrowing_limit None means unlimited borrowing; lending_limit None means all of
    the idle nominal quota may be lent.
    """

    gpu_model: str
    nominal: float
    borrowing_limit: float | None = 0.0
    lending_limit: float | None = None
    max_running_jobs: int | None = None


@dataclass(frozen=True, slots=True)
class UsageBucket:
    """GPU-seconds a team consumed in a period ending at `at` (for fair-share decay)."""

    at: float
    gpu_seconds: float


@dataclass(frozen=True, slots=True)
class Team:
    name: str
    weight: float = 1.0
    quotas: tuple[Quota, ...] = ()
    # Raw usage history; the scheduler decays it with Policy.fair_share_half_life_s.
    usage: tuple[UsageBucket, ...] = ()


@dataclass(frozen=True, slots=True)
class MigInstance:
    """An existing MIG GPU instance on one physical GPU.

    start/size are in memory-slice units (NVML placement). job_id is the job holding it,
    or None when it is free.
    """

    profile: str
    start: int
    size: int
    job_id: str | None = None


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    # For a MIG-enabled GPU: its instances (empty = no instances, may be laid out when idle).
    mig_instances: tuple[MigInstance, ...] = ()
    usable: bool = True  # False e.g. when a relayout failed; the reason is in Node.labels


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    gpu_model: str
    gpus: int
    pool: str | None = None
    mig: bool = False
    # "up" accepts work; "drain" runs what it has but takes nothing new; "down" has nothing.
    state: str = "up"
    labels: tuple[tuple[str, str], ...] = ()
    # Per-GPU MIG state for mig nodes (len == gpus); empty for whole-GPU nodes.
    mig_gpus: tuple[Gpu, ...] = ()
    # The cluster the node belongs to (node names are unique across the snapshot).
    cluster: str | None = None
    # Its MIG layout is the cluster's to change (Slurm; Kubernetes without named layouts):
    # jobs take the instances there are, and a new layout is only proposed (advisory).
    mig_fixed: bool = False


@dataclass(frozen=True, slots=True)
class MigSlot:
    """A MIG instance allocated to a job: GPU index on the node, profile, placement start."""

    gpu: int
    profile: str
    start: int
    size: int


@dataclass(frozen=True, slots=True)
class NodeAlloc:
    node: str
    gpus: tuple[int, ...] = ()
    mig: MigSlot | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    allocs: tuple[NodeAlloc, ...]

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(a.node for a in self.allocs)


@dataclass(frozen=True, slots=True)
class JobRequest:
    """The shape and identity of a job, shared by pending and running jobs."""

    id: str
    team: str
    priority: str  # PriorityClass.name
    submit_time: float
    nodes: int = 1
    gpus_per_node: int = 1
    gpu_model: str | None = None  # None = any model
    mig_profile: str | None = None  # then nodes == 1 and one slice is needed
    time_limit_s: float | None = None
    pool: str | None = None  # required node pool, if any
    kind: str = "training"  # "training" | "agent"
    cluster: str | None = None  # when set, only nodes with Node.cluster == cluster qualify


@dataclass(frozen=True, slots=True)
class PendingJob:
    request: JobRequest
    # Runs so far (a preempted job waiting again has had one); informational, no rule reads it.
    attempts: int = 0
    # The nodes the last cycle preempted jobs on for it (Decisions.preempting): it goes
    # there first once they are free, so that the GPUs freed for it are not taken by another
    # preemptor and its preemption made again (a slice job: the GPU emptied for it there is
    # held for it, through its relayout, until it starts; or the one instance freed for it).
    preempting_on: tuple[str, ...] = ()
    # How many times the queue preempted the job (RunningJob.preemptions likewise):
    # Policy.protect_after_preemptions reads it.
    preemptions: int = 0


@dataclass(frozen=True, slots=True)
class RunningJob:
    request: JobRequest
    start_time: float
    placement: Placement
    gpu_model: str  # the model it actually runs on
    # Set when a preemption was already decided and the job is in its grace period.
    preempting_since: float | None = None
    # How many times the job was preempted before this run (Policy.max_priority_preemptions).
    preemptions: int = 0


@dataclass(frozen=True, slots=True)
class MigModelTable:
    """A site's MIG profile table for one GPU model, overriding the built-in one (e.g. from
    what `nvidia-smi mig -lgip` reports on its nodes). Rows: (name, compute slices, memory
    slices, max instances, placement starts, placement size)."""

    model: str
    compute_slices: int
    memory_slices: int
    profiles: tuple[tuple[str, int, int, int, tuple[int, ...], int], ...]
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]
    pending: tuple[PendingJob, ...]
    running: tuple[RunningJob, ...] = ()
    priority_classes: tuple[PriorityClass, ...] = DEFAULT_PRIORITY_CLASSES
    mig_tables: tuple[MigModelTable, ...] = ()


@dataclass(frozen=True, slots=True)
class Policy:
    fair_share_half_life_s: float = 7 * 24 * 3600.0
    preemption_grace_s: float = 30.0
    # Protects a job from *priority* preemption for this long after it starts (never from reclaim).
    min_runtime_s: float = 0.0
    # A job preempted this many times is not preempted for priority again, only reclaimed
    # (LSF's MAX_JOB_PREEMPT): the most recently started job is the cheapest victim, so
    # without a cap a long low-class job restarts again and again and never finishes.
    # None: no cap.
    max_priority_preemptions: int | None = 2
    # A job the queue preempted this many times (reclaim or priority) is protected: it starts
    # again only within its team's nominal quota, as a non-preemptible class does, and is no
    # victim again. So no job is thrown away over and over (ping-pong), and no guarantee is
    # lost for it: it never borrows, so a reclaim never needs it. A job larger than its
    # team's nominal could then never start: it stays unprotected. None: no protection.
    protect_after_preemptions: int | None = 1
    # A priority preemption must be worth it: the victims' work since they started (GPU-
    # seconds) at most this many times what the job would otherwise wait (its GPUs times
    # the time until running jobs' limits make room). Otherwise it waits; a job about to
    # free its GPUs is not killed to gain minutes. None: no such check. Reclaim: never.
    # 0.5, not 1: the wait is read from time limits, which users pad (jobs tend to end well
    # before them), so half the wait by limits is about the real one (docs/BENCHMARKS.md).
    preemption_loss_ratio: float | None = 0.5
    # Whether a job of a preemptible class preempts lower classes for priority (Kubernetes'
    # preemptionPolicy PreemptLowerPriority, against Never). False: only classes that cannot
    # be preempted do; a preemptible job still reclaims its team's nominal quota. Such a job
    # may itself be displaced next, and on generated workloads these preemptions cost more
    # utilization and mean wait than they save (docs/BENCHMARKS.md, eighth session).
    preemptible_classes_preempt: bool = False
    backfill: bool = True
    preemption: bool = True
    quotas: bool = True  # False for the fifo/backfill baselines
    fair_share: bool = True
    mig_repartition: bool = True
    # "gpuq" (full policy), "fifo" or "backfill" (baselines).
    name: str = "gpuq"
    # False for the baselines: plain submit order, priority classes ignored.
    priorities: bool = True
    # Bounds the victim searches of one cycle; jobs beyond it try again next cycle.
    max_preemption_searches: int = 16
    # A single-node job goes first to a node it does not keep busy past its running jobs'
    # limits (capacity.fit_by_end); False: plain best fit, as the baselines place.
    pack_by_end: bool = True
    # A whole-GPU job refused quota that has waited this long (and fits its team's nominal,
    # its start known from its team's time limits) holds that nominal against its team's
    # later jobs, as one waiting for nodes does, so a gang is not passed for days by its
    # team's smaller jobs (Slurm's bf_min_age_reserve). None: never (Kueue's
    # BestEffortFIFO): holding idles quota, which cost utilization on generated workloads
    # (docs/BENCHMARKS.md, thirty-ninth session).
    quota_hold_after_s: float | None = None

    def __post_init__(self) -> None:
        # Usage decays as 2^(-age / half-life): zero would divide by zero mid-cycle.
        if not self.fair_share_half_life_s > 0:
            raise ValueError(
                f"fair_share_half_life_s must be positive, not {self.fair_share_half_life_s!r}"
            )
        hold = self.quota_hold_after_s
        if hold is not None and not (0 <= hold < float("inf")):
            raise ValueError(f"quota_hold_after_s must be a number >= 0 or None, not {hold!r}")
        # 0 would protect every job before its first preemption: no job could ever borrow.
        after = self.protect_after_preemptions
        if after is not None and after < 1:
            raise ValueError(f"protect_after_preemptions must be at least 1 or None, not {after!r}")


# Reason and Wait are NamedTuples, immutable like the dataclasses here but built by
# tuple.__new__: a cycle makes one Wait per pending job and one Reason per job waiting for
# capacity, and a frozen dataclass sets each field through object.__setattr__ (1.1 us
# against 0.3 us per Wait: some 80 ms of a 100k call).
class Reason(NamedTuple):
    """Why a job does not start now: a code for machines, a sentence for people."""

    code: str  # e.g. "quota_exhausted", "no_capacity", "behind_higher_priority", "mig_unavailable"
    message: str
    details: tuple[tuple[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": dict(self.details)}


@dataclass(frozen=True, slots=True)
class Start:
    job_id: str
    placement: Placement
    gpu_model: str
    borrowed: bool = False  # runs (partly) on another team's idle nominal quota


@dataclass(frozen=True, slots=True)
class Preemption:
    job_id: str
    by_job_id: str
    kind: str  # "reclaim" | "priority"
    message: str  # "preempted by job X: team A reclaimed its nominal A100 quota"


class Wait(NamedTuple):
    job_id: str
    reason: Reason
    position: int  # 1-based position in scheduling order among pending jobs
    estimated_start: float | None = None
    # True when free GPUs are held for this job (its EASY reservation) until estimated_start.
    reserved: bool = False


@dataclass(frozen=True, slots=True)
class MigRelayout:
    node: str
    gpu: int
    instances: tuple[MigInstance, ...]  # the new layout, job_id None
    message: str
    # Proposed for a node whose layout gpuq cannot change (Node.mig_fixed): no job waits
    # for it; an admin may apply it.
    advisory: bool = False


@dataclass(frozen=True, slots=True)
class Decisions:
    starts: tuple[Start, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    waits: tuple[Wait, ...] = ()
    relayouts: tuple[MigRelayout, ...] = ()
    # Free-form counters for observability ("considered", "groups_skipped", ...).
    stats: tuple[tuple[str, float], ...] = field(default=())
    # Jobs waiting for their victims to leave (or for the relayout of the GPU they emptied,
    # or for their quota, keeping what their preemption freed), with the nodes they will run
    # on (their Wait reason's "on_nodes"): the caller hands these back as
    # PendingJob.preempting_on.
    preempting: tuple[tuple[str, tuple[str, ...]], ...] = ()
