"""The one small interface every backend implements, and the values that cross it.

Backends dispatch and observe; they never decide capacity (that is scheduler/'s job).
They import nothing from Django: the service converts its models to these dataclasses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


class BackendError(Exception):
    """A backend call failed. permanent=True: retrying cannot help (bad partition, host key
    changed, 422 from the API server); the job fails with this message. permanent=False:
    transient (connection refused, 5xx, controller not answering); the caller retries."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent


class PartialPoll(BackendError):
    """A poll that read some of its jobs and could not read the others (a Slurm account
    that cannot log in, a Kubernetes namespace that answers 403): `statuses` holds those it
    read; the others are unknown, not lost. The message says why (the cluster's sync error)."""

    def __init__(
        self, message: str, statuses: Mapping[str, JobStatus], *, permanent: bool = False
    ) -> None:
        super().__init__(message, permanent=permanent)
        self.statuses = dict(statuses)


@dataclass(frozen=True)
class ClusterConfig:
    """A cluster as backends see it. settings holds the kind-specific configuration
    (SSH host, kubeconfig, GRES map, namespaces...); secrets are resolved by the caller."""

    id: int
    name: str
    kind: str
    # repr=False: it may hold a private key or a kubeconfig token, and reprs end up in logs.
    settings: Mapping[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class MigInstanceInfo:
    gpu: int
    profile: str
    start: int
    size: int
    in_use: bool = False
    external_job: str | None = None


@dataclass(frozen=True)
class NodeInfo:
    name: str
    gpu_model: str
    gpus: int
    state: str = "up"  # up | drain | down
    pool: str | None = None
    mig: bool = False
    mig_instances: tuple[MigInstanceInfo, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""  # why it is drained/down, as the backend reports it
    # What the node offers jobs (Slurm's CPUTot and RealMemory, Kubernetes' allocatable cpu
    # and memory in MiB); None: unknown, no constraint. A job asking a larger share of them
    # than of the GPUs is charged the GPUs it makes unusable (jobs/snapshot.py, Footprints).
    cpus: int | None = None
    memory_mb: int | None = None


@dataclass(frozen=True)
class AllocatedNode:
    node: str
    gpus: tuple[int, ...] = ()
    mig_gpu: int | None = None
    mig_profile: str | None = None
    mig_start: int | None = None


@dataclass(frozen=True)
class DispatchRequest:
    """A validated job spec plus identity and the scheduler's placement."""

    job_id: str  # gpuq UUID as a string
    team: str
    user: str
    name: str
    kind: str  # training | agent
    command: tuple[str, ...] | str  # argv, or a shell string the user chose to give
    image: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    nodes: int = 1
    gpus_per_node: int = 0
    gpu_model: str | None = None
    mig_profile: str | None = None
    cpus_per_gpu: int | None = None
    memory_mb: int | None = None
    time_limit_s: int | None = None
    priority: str = "normal"
    retries_max: int = 0  # the retries the job has left (its spec's, less requeues so far)
    retry_on: tuple[str, ...] = ()  # node_failure, preemption
    checkpoint_dir: str | None = None
    checkpoint_interval_s: int | None = None
    nccl_debug: bool = False
    attempt: int = 1
    placement: tuple[AllocatedNode, ...] = ()
    array: ArrayTask | None = None
    # The grace gpuq's stops give the job (GPUQ_PREEMPTION_GRACE_S): a backend whose stop
    # cannot outlast a grace fixed at submit (a pod's terminationGracePeriodSeconds) sets it.
    stop_grace_s: float | None = None
    # An earlier submit of this attempt may have reached the cluster (its answer was lost, or
    # its worker died): the backend looks wider for what it made before creating anything.
    resubmit: bool = False


@dataclass(frozen=True)
class ArrayTask:
    """Which task of a job array (Slurm's --array) a job is."""

    array_id: str
    index: int
    count: int  # tasks in the array


def cpus_per_node(cpus_per_gpu: int, gpus_per_node: int) -> int:
    """The CPUs a job asks on each node (`cpus_per_gpu` per GPU; a job of no GPUs asks it
    once): what Slurm's --cpus-per-task, a pod's cpu request and gpuq's charge all count."""
    return cpus_per_gpu * max(1, gpus_per_node)


def memory_share_mb(
    node_memory_mb: int, node_gpus: int, node_cpus: int | None, gpus: float, cpus: int
) -> int | None:
    """The memory a job that gives none asks on a node (Slurm's --mem: under CR_*_Memory a
    job without it gets the whole node): its footprint's share. `gpus`: the GPUs it is
    charged there (its footprint, CPUs and memory charged in GPUs; a MIG slice its share of
    a GPU, compute slices / 7) times the node's memory per GPU. A job charged none (no GPUs,
    no CPUs or memory asked) gets its `cpus`' share of the node's memory instead: Slurm gives
    it those CPUs (1 unless it asks more). None: neither is known."""
    if gpus > 0 and node_gpus > 0:
        return int(node_memory_mb * gpus // node_gpus)
    if node_cpus:
        return node_memory_mb * cpus // node_cpus
    return None


def job_env(job: DispatchRequest) -> dict[str, str]:
    """The GPUQ_* variables every job sees on every backend (the backend adds placement:
    node rank, GPUs, MIG slice)."""
    env = {
        "GPUQ_JOB_ID": job.job_id,
        "GPUQ_JOB_NAME": job.name,
        "GPUQ_TEAM": job.team,
        "GPUQ_ATTEMPT": str(job.attempt),
    }
    if job.array is not None:  # as Slurm's SLURM_ARRAY_JOB_ID, _TASK_ID, _TASK_COUNT
        env["GPUQ_ARRAY_ID"] = job.array.array_id
        env["GPUQ_ARRAY_TASK_ID"] = str(job.array.index)
        env["GPUQ_ARRAY_TASK_COUNT"] = str(job.array.count)
    if job.checkpoint_dir:
        env["GPUQ_CHECKPOINT_DIR"] = job.checkpoint_dir
    if job.checkpoint_interval_s:
        env["GPUQ_CHECKPOINT_INTERVAL_S"] = str(job.checkpoint_interval_s)
    return env


@dataclass(frozen=True)
class SubmitResult:
    external_id: str
    adopted: bool = False  # an earlier, interrupted submit had already created it


class RemoteState:
    """What a backend can say about a job. The service maps these to Job.State."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    PREEMPTED = "preempted"
    NODE_FAILURE = "node_failure"
    LOST = "lost"  # the backend no longer knows the job

    TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED, TIMEOUT, PREEMPTED, NODE_FAILURE, LOST})


@dataclass(frozen=True)
class JobStatus:
    external_id: str
    state: str  # a RemoteState value
    exit_code: int | None = None
    reason: str = ""  # the backend's own words (Slurm pending reason, pod reason)
    native_state: str = ""  # e.g. "NODE_FAIL", "Evicted"
    # Whether an ended job ever ran, where the backend can tell (a cancel's end alone often
    # cannot: sacct's `CANCELLED 0:0` is the same whether it ran or not). None: unknown.
    started: bool | None = None
    # How many times the cluster restarted this attempt in place, on its own (Volcano's
    # maxRetry: the vcjob's retryCount); each uses one of the job's retries. 0 elsewhere.
    restarted_in_place: int = 0


@dataclass(frozen=True)
class LogChunk:
    data: bytes
    next_offset: int
    eof: bool = False  # the attempt is finished and nothing more will come
    # Which log of the attempt the bytes are of, when it can have several that each start
    # over at offset 0 (a container restarted in its pod, a Volcano gang recreated): the
    # backend's name for it; "" when an attempt has one log.
    source: str = ""
    # The cluster no longer keeps the log (a stopped attempt's pod deleted with it): nothing
    # of it can be read.
    gone: bool = False


class Backend(Protocol):
    kind: str

    def nodes(self) -> list[NodeInfo]:
        """Every node of the cluster that gpuq may place on, each with its state: one that
        stops answering is listed, down (Slurm's `down*`, a NotReady node). A node left out
        is no longer part of the cluster (removed from the local settings, slurm.conf or the
        partition, `kubectl delete node`): the sync drops it from the inventory. A list that
        could not be read whole raises BackendError, never returns part of it."""
        ...

    def submit(self, job: DispatchRequest) -> SubmitResult: ...

    def poll(self, external_ids: Sequence[str]) -> dict[str, JobStatus]:
        """One status per id, from as few remote calls as the backend allows. An id the
        backend no longer knows maps to RemoteState.LOST. PartialPoll: some ids could not be
        read (their statuses are left out), the others' are in it."""
        ...

    def cancel(self, external_id: str, grace_s: float = 30.0) -> bool:
        """Stop the job: TERM, then kill after grace_s. False when the backend can tell that
        the job had already ended on its own, so nothing was stopped (its end is its own:
        an exit 0 is a success, not a cancellation); True otherwise."""
        ...

    def logs(
        self, external_id: str, offset: int = 0, limit: int = 65536, stream: str = "stdout"
    ) -> LogChunk: ...

    def log_size(self, external_id: str, stream: str = "stdout") -> int | None:
        """The log's length in bytes when the backend can tell it without reading the log
        (a file's size: the job page starts a long finished log near its end); else None."""
        ...

    def close(self) -> None:
        """Let go of connections: the registry calls it on a backend it replaces."""
        ...
