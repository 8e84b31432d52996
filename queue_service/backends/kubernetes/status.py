"""Pure status mappers: a workload object (batch/v1 Job or Volcano Job, as the API server
returns it) and its pods in, a gpuq JobStatus out.

Judgement calls (docs/kubernetes.md explains them):
- a pod disrupted by the scheduler (DisruptionTarget PreemptionByScheduler) -> PREEMPTED;
  by the kubelet (node-pressure eviction, reason Evicted; a refusal at admission), the taint
  manager, pod GC or a drain (Eviction API) -> NODE_FAILURE; both are retried by gpuq per
  the job's retry policy;
- ImagePullBackOff / ErrImagePull / CreateContainerConfigError / CreateContainerError ->
  QUEUED with the reason for `image_pull_grace_s` after the pod was created, then FAILED
  (InvalidImageName at once);
- Unschedulable -> QUEUED with the scheduler's message;
- a Volcano Job Failed has used up its restarts in place (maxRetry, on PodEvicted): FAILED,
  once the pods Volcano deletes at the last retry are gone (RUNNING "stopping" until then);
  one Terminated by its PodFailed (or unretried PodEvicted) policy ends by the cause its pods
  show, as a batch Job: TIMEOUT, a disruption's NODE_FAILURE or PREEMPTED (the service's retry
  policy then applies), FAILED with the exit code; a pod deleted leaves none: NODE_FAILURE;
- a workload that finished keeps its end when deleted afterwards (the TTL controller; gpuq's
  finalizer holds it until reported); one being deleted or aborted is RUNNING while any of its
  pods still runs or waits (their GPUs are not free yet; QUEUED if none of them ever started),
  then CANCELLED (deleted) or QUEUED (a Volcano Job aborted without a deletion: suspended on
  the cluster, `vcctl job suspend`, to run again once resumed); so is a failing batch Job,
  then FAILED;
- a pod whose node is gone (bound to, or pinned to, a node the backend found missing; PodGC's
  DeletionByPodGC; the long-deprecated phase Unknown) -> NODE_FAILURE, and the workload is
  deleted: no kubelet will run it again, and a gang Volcano restarts in place stays pinned to
  the missing node for ever; so is a pod being deleted (the taint eviction controller's, once
  its unreachable toleration ran out) on a node that is unreachable (not Ready, tainted
  node.kubernetes.io/unreachable): no kubelet confirms its end, so it stays terminating, and
  `Running`, until the node comes back or is deleted. An unreachable node whose pods are not
  being deleted (yet) ends nothing: it may come back. So is a pod the taint manager is
  deleting (DeletionByTaintManager) from a node whose kubelet reports it NotReady (tainted
  node.kubernetes.io/not-ready): a hung runtime may never stop it; a pod deleted there for
  another reason is waited for, since that kubelet still confirms what it stops;
- a suspended batch Job (Kueue's eviction or preemption) -> QUEUED, before any node loss: the
  Job controller deletes its pods, so one stuck on a lost node goes because of the suspension;
- `started` on an end, where the objects tell: a container that ran, the Job's `ready` or
  `succeeded` counts, Volcano's phase history (`status.conditions`) says True; a batch Job never
  started by its controller (no `status.startTime`: Kueue still held it), a Volcano Job that was
  never Running, or gpuq's stop that found no pod started (STOPPED_UNSTARTED) says False."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..base import JobStatus, RemoteState
from .manifests import CONTAINER, HOSTNAME_LABEL

Obj = Mapping[str, Any]

TAINT_EVICTION = "DeletionByTaintManager"  # the taint eviction controller's DisruptionTarget
PREEMPTION_REASONS = frozenset({"PreemptionByScheduler", "PreemptionByKubeScheduler"})
PULL_PROBLEMS = frozenset(
    {"ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError", "CreateContainerError"}
)
# A pod its node's kubelet refused at admission (kubelet.rejectPod: phase Failed, this reason,
# "Pod was rejected: ..."; no container ever created): the device plugin failed to allocate,
# or the node has less than the scheduler counted (`OutOf<resource>`).
ADMISSION_REJECTIONS = frozenset({"UnexpectedAdmissionError", "NodeAffinity", "InvalidNodeInfo"})
FATAL_WAITING = frozenset({"InvalidImageName", "ErrImageNeverPull"})
LIVE_PHASES = frozenset({"Pending", "Running"})
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
VOLCANO_RAN = frozenset({"Running", "Completing", "Completed"})
# Set by cancel() on a workload whose pods it found never started, just before deleting it:
# a batch/v1 Job keeps no record of whether its deleted pods ran.
STOPPED_UNSTARTED = "gpuq.io/stopped-before-start"


@dataclass(frozen=True)
class Observation:
    """The status to report; `stop` when the object still runs on the cluster although gpuq
    now considers the job finished (e.g. an image that never pulls): the backend deletes it.
    `ended_first` when the workload ended by itself before any deletion reached it, or is
    ending by itself (a failing Job, a Volcano Job completing) while its last pods stop: a
    stop now would stop nothing."""

    status: JobStatus
    stop: bool = False
    ended_first: bool = False


def _get(obj: Obj | None, *path: str) -> Any:
    cur: Any = obj
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def _ts(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _true_conditions(obj: Obj) -> dict[str, Obj]:
    conditions = _get(obj, "status", "conditions") or []
    return {c["type"]: c for c in conditions if c.get("status") == "True" and "type" in c}


def _main_status(pod: Obj) -> Obj:
    """The job's own container's status: the kubelet lists containers by name, so an injected
    sidecar (istio-proxy, say) may come first."""
    statuses = _get(pod, "status", "containerStatuses") or []
    named = [c for c in statuses if c.get("name") == CONTAINER]
    return named[0] if named else (statuses[0] if statuses else {})


def _disruption(pod: Obj) -> tuple[str, str, str] | None:
    """(state, reason, native) when the pod was taken away rather than failing by itself."""
    name = _get(pod, "metadata", "name")
    pod_reason = _get(pod, "status", "reason") or ""
    for cond in _get(pod, "status", "conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            why = cond.get("reason", "")
            message = cond.get("message") or why
            if why in PREEMPTION_REASONS:
                return RemoteState.PREEMPTED, f"pod {name} preempted: {message}", why
            word = "evicted" if pod_reason == "Evicted" or "Eviction" in why else "disrupted"
            return RemoteState.NODE_FAILURE, f"pod {name} {word}: {message}", pod_reason or why
    if pod_reason in ("Evicted", "NodeLost", "NodeShutdown"):
        message = _get(pod, "status", "message") or pod_reason
        return RemoteState.NODE_FAILURE, f"pod {name} {pod_reason.lower()}: {message}", pod_reason
    if _get(pod, "status", "phase") == "Failed" and (
        pod_reason in ADMISSION_REJECTIONS or pod_reason.startswith("OutOf")
    ):
        message = _get(pod, "status", "message") or pod_reason
        refused = f"pod {name} refused by its node ({pod_reason}): {message}"
        return RemoteState.NODE_FAILURE, refused, pod_reason
    return None


def _terminated(pod: Obj) -> Obj | None:
    term = _get(_main_status(pod), "state", "terminated")
    return term if isinstance(term, Mapping) else None


def _failure(pods: Sequence[Obj]) -> tuple[int | None, str, str]:
    """Exit code, reason and native reason of the pod that failed first."""
    failed = [p for p in pods if (t := _terminated(p)) is not None and t.get("exitCode", 0) != 0]
    if not failed:
        return None, "", ""
    pod = min(
        failed,
        key=lambda p: (_ts((_terminated(p) or {}).get("finishedAt")) or 0, _name(p)),
    )
    term = _terminated(pod) or {}
    code = term.get("exitCode")
    native = term.get("reason") or "Error"
    where = f"pod {_name(pod)}"
    if native == "OOMKilled":
        return code, f"out of memory (OOMKilled) in {where}, exit code {code}", native
    message = term.get("message")
    detail = f": {message.strip()}" if isinstance(message, str) and message.strip() else ""
    return code, f"exit code {code} in {where} ({native}){detail}", native


def _name(pod: Obj) -> str:
    return str(_get(pod, "metadata", "name") or "")


def _deadline(pods: Sequence[Obj]) -> Obj | None:
    """A pod its kubelet ended at its activeDeadlineSeconds (gpuq's time limit), if any."""
    return next(
        (p for p in sorted(pods, key=_name) if _get(p, "status", "reason") == "DeadlineExceeded"),
        None,
    )


def _timed_out(pod: Obj) -> str:
    message = _get(pod, "status", "message") or "DeadlineExceeded"
    return f"time limit reached in pod {_name(pod)}: {message}"


def _pending(pods: Sequence[Obj], now: float, grace: float) -> tuple[str, str, bool] | None:
    """Why pods do not run yet: (reason, native, fatal). Image and config problems turn
    fatal after `grace` seconds; scheduling problems never do (capacity may free up)."""
    for pod in sorted(pods, key=_name):
        waiting = _get(_main_status(pod), "state", "waiting") or {}
        why = waiting.get("reason", "")
        if why in FATAL_WAITING or why in PULL_PROBLEMS:
            created = _ts(_get(pod, "metadata", "creationTimestamp")) or now
            fatal = why in FATAL_WAITING or now - created >= grace
            message = waiting.get("message") or why
            return f"{why} in pod {_name(pod)}: {message}", why, fatal
    for pod in sorted(pods, key=_name):
        for cond in _get(pod, "status", "conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                why = cond.get("reason") or "Unschedulable"
                return f"{why}: {cond.get('message') or 'waiting for a node'}", why, False
    return None


def _pod_started(pod: Obj) -> bool:
    """Whether the job's own container ever ran in this pod (not only the pod bound, which
    `status.startTime` says: the kubelet sets it before pulling the image)."""
    main = _main_status(pod)
    if main.get("started") or "running" in (main.get("state") or {}):
        return True
    if int(main.get("restartCount") or 0):
        return True
    for key in ("state", "lastState"):
        term = _get(main, key, "terminated")
        # A container that could not start is terminated with no (or the zero) startedAt.
        at = _ts(term.get("startedAt")) if isinstance(term, Mapping) else None
        if at is not None and at > 0:
            return True
    return False


def pinned_nodes(pod: Obj) -> frozenset[str]:
    """The nodes a pod can run on: the one it is bound to, else those gpuq's placement pins
    it to (a hostname nodeSelector, or required node affinity over the gang's nodes)."""
    bound = _get(pod, "spec", "nodeName")
    if bound:
        return frozenset({str(bound)})
    names: set[str] = set()
    selector = _get(pod, "spec", "nodeSelector", HOSTNAME_LABEL)
    if selector:
        names.add(str(selector))
    affinity = _get(
        pod, "spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"
    )
    for term in _get(affinity, "nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == HOSTNAME_LABEL and expr.get("operator") == "In":
                names.update(str(v) for v in expr.get("values") or [])
    return frozenset(names)


def nodes_wanted(pods: Sequence[Obj]) -> frozenset[str]:
    """The nodes that pods which have not ended run on or wait for: the ones whose absence
    the backend looks for."""
    out: set[str] = set()
    for pod in pods:
        if _get(pod, "status", "phase") not in TERMINAL_PHASES:
            out |= pinned_nodes(pod)
    return frozenset(out)


def nodes_deleting(pods: Sequence[Obj]) -> frozenset[str]:
    """The nodes that pods being deleted (not ended) are bound to: whether such a pod is lost
    depends on its node's state now (_lost)."""
    return frozenset(
        str(node)
        for p in pods
        if (node := _get(p, "spec", "nodeName"))
        and _get(p, "metadata", "deletionTimestamp")
        and _get(p, "status", "phase") not in TERMINAL_PHASES
    )


@dataclass(frozen=True)
class _Nodes:
    """What the backend found of the nodes pods are on: deleted; marked unreachable (Ready
    Unknown, tainted node.kubernetes.io/unreachable); reported NotReady by their kubelet and
    tainted node.kubernetes.io/not-ready (inventory.unreachable, inventory.not_ready)."""

    gone: Set[str] = frozenset()
    unreachable: Set[str] = frozenset()
    not_ready: Set[str] = frozenset()


def _lost(pod: Obj, nodes: _Nodes) -> tuple[str, str] | None:
    """(reason, native) when the pod's node is gone: no kubelet will run or stop it, and a
    gang pinned to that node can never be placed again; or when the pod is being deleted on a
    node that is unreachable: no kubelet confirms that it stopped, so it stays terminating
    (phase Running) for as long as the node stays away; or when the taint manager is deleting
    it from a NotReady node (past the pods' toleration of the not-ready taint)."""
    name = _name(pod)
    for cond in _get(pod, "status", "conditions") or []:
        if (
            cond.get("type") == "DisruptionTarget"
            and cond.get("status") == "True"
            and cond.get("reason") == "DeletionByPodGC"  # PodGC: the pod's node was deleted
        ):
            message = cond.get("message") or "its node no longer exists"
            return f"pod {name} lost: {message}", "DeletionByPodGC"
    phase = _get(pod, "status", "phase")
    if phase in TERMINAL_PHASES:
        return None  # its end is its own
    if phase == "Unknown":  # not set by kubelets since 2015, but still in the API
        return f"pod {name}: state Unknown (its node stopped reporting)", "NodeLost"
    bound = _get(pod, "spec", "nodeName")
    if bound:
        if bound in nodes.gone:
            return f"pod {name}: its node {bound} no longer exists", "NodeLost"
        if not _get(pod, "metadata", "deletionTimestamp"):
            return None
        why, native = _disruption_cause(pod)
        if bound in nodes.unreachable:
            reason = (
                f"pod {name} lost: its node {bound} is unreachable and the pod is being deleted"
            )
            return (f"{reason} ({why})" if why else reason), native or "NodeLost"
        # That kubelet still reports and confirms the stops it can make: only the taint
        # manager's deletion says that the node failed (a hung runtime keeps the pod there).
        if bound in nodes.not_ready and native == TAINT_EVICTION:
            reason = f"pod {name} lost: its node {bound} is not ready and the pod is being deleted"
            return f"{reason} ({why})", native
        return None
    missing = sorted(pinned_nodes(pod) & nodes.gone)
    if missing:
        return f"pod {name} waits for node {missing[0]}, which no longer exists", "NodeLost"
    return None


def _disruption_cause(pod: Obj) -> tuple[str, str]:
    """(message, reason) of the pod's DisruptionTarget condition, if it has one."""
    for cond in _get(pod, "status", "conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return str(cond.get("message") or ""), str(cond.get("reason") or "")
    return "", ""


def _node_lost(eid: str, pods: Sequence[Obj], nodes: _Nodes) -> Observation | None:
    for pod in sorted(pods, key=_name):
        lost = _lost(pod, nodes)
        if lost is not None:
            reason, native = lost
            return Observation(
                JobStatus(eid, RemoteState.NODE_FAILURE, reason=reason, native_state=native),
                stop=True,
            )
    return None


def _stopping(eid: str, pods: Sequence[Obj], native: str, nodes: _Nodes) -> Observation | None:
    """A stopped workload whose pods still run (or wait) within their grace period has not
    ended: RUNNING, which changes nothing for a job being stopped, until they are gone (QUEUED
    when none of its pods ever started: such a wait is no run). A pod whose node is gone is
    not waited for: no kubelet will stop it, and its GPUs went with the node; nor is one
    lost on an unreachable or NotReady node (_lost): no kubelet there confirms its end."""
    live = [
        p for p in pods if _get(p, "status", "phase") in LIVE_PHASES and _lost(p, nodes) is None
    ]
    if not live:
        return None
    reason = f"stopping: {len(live)} pod{'s' if len(live) > 1 else ''} not stopped yet"
    state = RemoteState.RUNNING if any(_pod_started(p) for p in pods) else RemoteState.QUEUED
    return Observation(JobStatus(eid, state, reason=reason, native_state=native))


def started(kind: str, job: Obj, pods: Sequence[Obj]) -> bool | None:
    """Whether the workload ever ran, as far as its objects tell; None when they cannot (a
    batch/v1 Job whose pods are gone keeps no record of them)."""
    if any(_pod_started(p) for p in pods):
        return True
    status = _get(job, "status") or {}
    if kind == "vcjob":
        if int(status.get("running") or 0) or int(status.get("succeeded") or 0):
            return True
        history = status.get("conditions")  # every phase the job went through
        if isinstance(history, list) and history:
            return any(c.get("status") in VOLCANO_RAN for c in history)
    else:
        if int(status.get("ready") or 0) or int(status.get("succeeded") or 0):
            return True
        if not status.get("startTime"):  # its controller never started it (Kueue held it)
            return False
        # backoffLimit 0: each index has one pod, ever (a lost one fails the Job).
        want = int(_get(job, "spec", "parallelism") or 1)
        if len(pods) >= want:
            return False
    if (_get(job, "metadata", "annotations") or {}).get(STOPPED_UNSTARTED):
        return False
    return None


def _ended_first(obj: Obj, ended_at: Any) -> bool:
    """Whether the end came before the deletion, if any: the TTL controller deletes a finished
    workload, while gpuq's deletion comes before the end it causes. The same second cannot be
    told apart and counts as a stop."""
    deleted = _ts(_get(obj, "metadata", "deletionTimestamp"))
    if deleted is None:
        return True
    ended = _ts(ended_at)
    return ended is not None and ended < deleted


def _pods_running(pods: Sequence[Obj], want: int) -> int:
    live = [p for p in pods if _get(p, "status", "phase") in ("Running", "Succeeded")]
    return min(len(live), want)


def _waiting(
    eid: str, pods: Sequence[Obj], now: float, grace: float, default: str, native: str
) -> Observation:
    pending = _pending(pods, now, grace)
    if pending is None:
        return Observation(JobStatus(eid, RemoteState.QUEUED, reason=default, native_state=native))
    reason, why, fatal = pending
    if fatal:
        return Observation(
            JobStatus(eid, RemoteState.FAILED, reason=reason, native_state=why),
            stop=True,
            ended_first=True,
        )
    return Observation(JobStatus(eid, RemoteState.QUEUED, reason=reason, native_state=why))


def batch_job_status(
    eid: str,
    job: Obj | None,
    pods: Sequence[Obj],
    *,
    now: float,
    image_pull_grace_s: float,
    gone_nodes: Set[str] = frozenset(),
    unreachable_nodes: Set[str] = frozenset(),
    not_ready_nodes: Set[str] = frozenset(),
) -> Observation:
    if job is None:
        return Observation(JobStatus(eid, RemoteState.LOST, reason="the Job no longer exists"))
    conds = _true_conditions(job)
    deleting = bool(_get(job, "metadata", "deletionTimestamp"))
    nodes = _Nodes(gone_nodes, unreachable_nodes, not_ready_nodes)
    stopping = _stopping(eid, pods, "Terminating", nodes) if deleting else None
    if stopping is not None:
        return stopping
    done = conds.get("Complete") or conds.get("SuccessCriteriaMet")
    if done is not None:
        # SuccessCriteriaMet (Kubernetes 1.31+) comes before Complete, while the controller
        # still deletes the pods left over, as FailureTarget before Failed.
        ended_first = _ended_first(job, done.get("lastTransitionTime"))
        native = str(done.get("type") or "Complete")
        if (ending := _stopping(eid, pods, native, nodes)) is not None:
            return dataclasses.replace(ending, ended_first=ended_first)
        return Observation(
            JobStatus(eid, RemoteState.SUCCEEDED, exit_code=0, native_state=native),
            ended_first=ended_first,
        )
    failed = conds.get("Failed") or conds.get("FailureTarget")
    if failed is not None:
        # The controller marks a Job failing (FailureTarget; Failed too before Kubernetes
        # 1.31, kubernetes#123775), then deletes its other pods: their GPUs are busy until
        # they are gone, and their exit codes are known only then.
        ended_first = _ended_first(job, failed.get("lastTransitionTime"))
        if (failing := _stopping(eid, pods, "Failing", nodes)) is not None:
            return dataclasses.replace(failing, ended_first=ended_first)
        return Observation(_failed_job(eid, failed, pods), ended_first=ended_first)
    if deleting:
        return Observation(
            JobStatus(eid, RemoteState.CANCELLED, reason="deleted", native_state="Terminating")
        )
    if "Suspended" in conds or _get(job, "spec", "suspend"):
        # Before any node loss: the Job controller deletes a suspended Job's pods, so one
        # stuck on a lost node goes because Kueue took the job back, which Kueue resumes.
        message = "suspended: waiting for admission by Kueue"
        return Observation(
            JobStatus(eid, RemoteState.QUEUED, reason=message, native_state="Suspended")
        )
    if (lost := _node_lost(eid, pods, nodes)) is not None:
        return lost
    if (ended := _pod_failed(pods)) is not None:
        # A pod has failed and the Job controller has not said so yet (it counts a pod's end
        # some time after the kubelet reports it): with backoffLimit 0 and FailJob as its
        # pod failure policy's only action, the Job fails, as if FailureTarget were set.
        if (failing := _stopping(eid, pods, "Failing", nodes)) is not None:
            return dataclasses.replace(failing, ended_first=True)
        return Observation(_failed_job(eid, ended, pods), ended_first=True)
    want = int(_get(job, "spec", "parallelism") or 1)
    succeeded = sum(1 for p in pods if _get(p, "status", "phase") == "Succeeded")
    if succeeded >= want:
        # Every index succeeded (one pod each: backoffLimit 0) and the controller has not
        # said so yet: the same window as a failed pod's above; the Job completes.
        if (ending := _stopping(eid, pods, "Succeeded", nodes)) is not None:
            return dataclasses.replace(ending, ended_first=True)
        return Observation(
            JobStatus(eid, RemoteState.SUCCEEDED, exit_code=0, native_state="Succeeded"),
            ended_first=True,
        )
    running = _pods_running(pods, want)
    if running >= want:
        return Observation(JobStatus(eid, RemoteState.RUNNING, native_state="Running"))
    default = f"{running} of {want} pods running" if want > 1 else "waiting for the pod to start"
    return _waiting(eid, pods, now, image_pull_grace_s, default, "Pending")


def _pod_failed(pods: Sequence[Obj]) -> Obj | None:
    """A Failed condition as the Job controller will set it for a pod that failed, if one
    did (its reason: BackoffLimitExceeded, or PodFailurePolicy for a disrupted pod)."""
    failed = [p for p in pods if _get(p, "status", "phase") == "Failed"]
    if not failed:
        return None
    disrupted = any(_disruption(p) is not None for p in failed)
    why = "PodFailurePolicy" if disrupted else "BackoffLimitExceeded"
    return {"type": "Failed", "status": "True", "reason": why}


def _failed_job(eid: str, cond: Obj, pods: Sequence[Obj]) -> JobStatus:
    why = cond.get("reason", "")
    message = cond.get("message", "")
    for pod in sorted(pods, key=_name):
        disrupted = _disruption(pod)
        if disrupted is not None:
            state, reason, native = disrupted
            return JobStatus(eid, state, reason=reason, native_state=native)
    if why == "DeadlineExceeded":  # a Job's own deadline (gpuq's before it put them on pods)
        return JobStatus(eid, RemoteState.TIMEOUT, reason=message or why, native_state=why)
    # The pods carry the time limit: the Job fails as for any pod's failure (backoffLimit 0).
    if (late := _deadline(pods)) is not None:
        return JobStatus(
            eid, RemoteState.TIMEOUT, reason=_timed_out(late), native_state="DeadlineExceeded"
        )
    if why == "PodFailurePolicy" and "DisruptionTarget" in message:
        # The disrupted pod is gone: deletions come from preemption, drains or the taint
        # manager; only kubelet evictions leave the pod behind (handled above).
        return JobStatus(eid, RemoteState.PREEMPTED, reason=message, native_state=why)
    code, reason, native = _failure(pods)
    return JobStatus(
        eid,
        RemoteState.FAILED,
        exit_code=code,
        reason=reason or message or why,
        native_state=native or why,
    )


VOLCANO_ACTIVE = {"Running": RemoteState.RUNNING, "Completing": RemoteState.RUNNING}


def volcano_job_status(
    eid: str,
    job: Obj | None,
    pods: Sequence[Obj],
    *,
    now: float,
    image_pull_grace_s: float,
    gone_nodes: Set[str] = frozenset(),
    unreachable_nodes: Set[str] = frozenset(),
    not_ready_nodes: Set[str] = frozenset(),
) -> Observation:
    if job is None:
        return Observation(
            JobStatus(eid, RemoteState.LOST, reason="the Volcano Job no longer exists")
        )
    nodes = _Nodes(gone_nodes, unreachable_nodes, not_ready_nodes)
    phase = _get(job, "status", "state", "phase") or "Pending"
    message = _get(job, "status", "state", "message") or ""
    retries = int(_get(job, "status", "retryCount") or 0)
    deleting = bool(_get(job, "metadata", "deletionTimestamp"))
    # Aborted without a deletion: suspended on the cluster (`vcctl job suspend`; gpuq's stops
    # delete), to run again once resumed, as a Job Kueue suspends.
    suspended = not deleting and phase in ("Aborting", "Aborted")
    stopped = deleting or suspended
    if stopped and (stopping := _stopping(eid, pods, phase, nodes)) is not None:
        return stopping
    ended_first = _ended_first(job, _get(job, "status", "state", "lastTransitionTime"))
    if phase == "Completed":
        return Observation(
            JobStatus(eid, RemoteState.SUCCEEDED, exit_code=0, native_state=phase),
            ended_first=ended_first,
        )
    if phase == "Completing":
        # The master succeeded (TaskCompleted -> CompleteJob) and Volcano deletes the rest:
        # running while they stop, succeeded once only pods no kubelet can confirm are left
        # (lost: _lost), never a node failure: the work is done.
        if (completing := _stopping(eid, pods, phase, nodes)) is not None:
            return dataclasses.replace(completing, ended_first=ended_first)
        return Observation(
            JobStatus(eid, RemoteState.SUCCEEDED, exit_code=0, native_state=phase),
            ended_first=ended_first,
        )
    if phase in ("Failed", "Terminating", "Terminated"):
        # At the last retry Volcano deletes the gang's running pods and marks the job Failed
        # at once (state/restarting.go); TerminateJob deletes them and waits in Terminating
        # (state/terminating.go): their GPUs are busy until they are gone.
        if (failing := _stopping(eid, pods, phase, nodes)) is not None:
            return dataclasses.replace(failing, ended_first=ended_first)
        # Terminating with only pods no kubelet confirms left stays so: deleted, as for a
        # lost node (_node_lost).
        stuck = phase == "Terminating" and any(_lost(p, nodes) is not None for p in pods)
        return Observation(
            _failed_vcjob(eid, phase, message, job, pods, nodes),
            stop=stuck,
            ended_first=ended_first,
        )
    if suspended:
        said = f"suspended on the cluster (Volcano {phase}{': ' + message if message else ''})"
        return Observation(
            JobStatus(
                eid,
                RemoteState.QUEUED,
                reason=f"{said}; it runs again once resumed",
                native_state=phase,
            )
        )
    if stopped:
        return Observation(
            JobStatus(eid, RemoteState.CANCELLED, reason=message or phase, native_state=phase)
        )
    # Volcano restarts a gang in place when a pod is deleted (PodEvicted -> RestartJob), but
    # the new pods stay pinned to the same nodes: one that is gone would hold it for ever, and
    # one stuck terminating on an unreachable node keeps it Restarting (it recreates the gang
    # only once no pod is terminating).
    if (lost := _node_lost(eid, pods, nodes)) is not None:
        return lost
    if phase in VOLCANO_ACTIVE:
        state = RemoteState.RUNNING
        return Observation(JobStatus(eid, state, reason=message, native_state=phase))
    if phase == "Restarting" or retries:
        # The recreated gang may wait on an image or config that never comes, as a first one.
        pending = _pending(pods, now, image_pull_grace_s)
        if pending is not None and pending[2]:
            return _waiting(eid, pods, now, image_pull_grace_s, "", phase)
        cause = next((d[1] for p in pods if (d := _disruption(p))), "") or _failure(pods)[1]
        reason = f"restarting in place (retry {retries})" + (f" after {cause}" if cause else "")
        if pending is not None:
            reason += f"; {pending[0]}"
        return Observation(JobStatus(eid, RemoteState.QUEUED, reason=reason, native_state=phase))
    default = message or "waiting for the gang to be scheduled"
    return _waiting(eid, pods, now, image_pull_grace_s, default, phase)


def restarts_in_place(job: Obj) -> int:
    """The times Volcano restarted the gang in place: its retryCount, less the failure that
    used up maxRetry, which it counts too (RetryCount++, then Failed)."""
    retries = int(_get(job, "status", "retryCount") or 0)
    return max(retries - 1, 0) if _get(job, "status", "state", "phase") == "Failed" else retries


def _failed_vcjob(
    eid: str, phase: str, message: str, job: Obj, pods: Sequence[Obj], nodes: _Nodes
) -> JobStatus:
    restarts = restarts_in_place(job)
    suffix = f" (after {restarts} in-place restarts)" if restarts else ""
    if (late := _deadline(pods)) is not None:
        return JobStatus(
            eid, RemoteState.TIMEOUT, reason=_timed_out(late) + suffix, native_state=phase
        )
    code, reason, _ = _failure(pods)
    disruption = next((d for p in sorted(pods, key=_name) if (d := _disruption(p))), None)
    if disruption is not None and phase != "Failed":
        # Ended by TerminateJob: the cause is the service's to retry or not, as on a batch
        # Job. A Failed job has had its retries, in place.
        state, why, native = disruption
        return JobStatus(eid, state, reason=why + suffix, native_state=native)
    if disruption is None and code is None and phase != "Failed":
        if (lost := _node_lost(eid, pods, nodes)) is not None:
            return dataclasses.replace(lost.status, reason=lost.status.reason + suffix)
        # TerminateJob keeps a Failed pod, so none left means a pod was deleted: PodGC's after
        # it marked it Failed (its node deleted) when the job is retried in place, else any
        # deletion (PodEvicted; a preemption too): a node failure names it best.
        said = f"Volcano {phase}{': ' + message if message else ''}"
        why = f"a pod of the gang was deleted (node lost, drained or preempted; {said})"
        return JobStatus(eid, RemoteState.NODE_FAILURE, reason=why + suffix, native_state=phase)
    cause = (disruption[1] if disruption else "") or reason or message or phase
    code = None if disruption else code
    return JobStatus(
        eid, RemoteState.FAILED, exit_code=code, reason=cause + suffix, native_state=phase
    )


def observe(
    eid: str,
    kind: str,
    job: Obj | None,
    pods: Sequence[Obj],
    *,
    now: float,
    image_pull_grace_s: float,
    gone_nodes: Set[str] = frozenset(),
    unreachable_nodes: Set[str] = frozenset(),
    not_ready_nodes: Set[str] = frozenset(),
) -> Observation:
    """`gone_nodes`: nodes the backend found missing from the cluster; `unreachable_nodes`:
    nodes the node lifecycle controller marked unreachable (inventory.unreachable);
    `not_ready_nodes`: nodes their kubelet reports NotReady, tainted for it
    (inventory.not_ready)."""
    mapper = volcano_job_status if kind == "vcjob" else batch_job_status
    seen = mapper(
        eid,
        job,
        pods,
        now=now,
        image_pull_grace_s=image_pull_grace_s,
        gone_nodes=gone_nodes,
        unreachable_nodes=unreachable_nodes,
        not_ready_nodes=not_ready_nodes,
    )
    status = seen.status
    if kind == "vcjob" and job is not None and (restarts := restarts_in_place(job)):
        # On every status, not only an end: the service notes each restart as it sees it.
        seen = dataclasses.replace(
            seen, status=dataclasses.replace(status, restarted_in_place=restarts)
        )
        status = seen.status
    if job is None or status.state not in RemoteState.TERMINAL or status.started is not None:
        return seen
    return dataclasses.replace(
        seen, status=dataclasses.replace(status, started=started(kind, job, pods))
    )
