"""The services that talk to backends: dispatch an admitted job, follow a cluster's jobs and
inventory, stop a job. Each is safe to run twice: they start with a conditional transition or
read the state they act on, and backends' submit adopts what an interrupted call created."""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from queue_service.backends import BackendError, ClusterConfig, get_backend
from queue_service.backends.base import (
    AllocatedNode,
    ArrayTask,
    DispatchRequest,
    JobStatus,
    LogChunk,
    NodeInfo,
    PartialPoll,
    RemoteState,
    cpus_per_node,
    memory_share_mb,
)
from queue_service.backends.local import default_dir_name as local_dir_name
from queue_service.clusters.models import Cluster, Node
from queue_service.clusters.services import reaching_error_summary

from .models import Job, JobEvent
from .notify import deliver_due
from .services import (
    CLUSTER_HOLDS,
    StaleState,
    cancelled_by,
    cancelled_reason,
    hold_run,
    note,
    record_unseen_run,
    request_cycle,
    rerun_held,
    stopping_reason,
    transition,
    unplaced,
)
from .spec import LAUNCHER_ENV_PREFIXES, checkpoint_dir_of, launcher_option

log = logging.getLogger(__name__)
S = Job.State

REMOTE_TO_STATE = {
    RemoteState.SUCCEEDED: S.SUCCEEDED,
    RemoteState.FAILED: S.FAILED,
    RemoteState.CANCELLED: S.CANCELLED,
    RemoteState.TIMEOUT: S.TIMEOUT,
    RemoteState.LOST: S.LOST,
}
# Remote endings that a retry policy may turn into a new attempt.
RETRYABLE = {RemoteState.NODE_FAILURE: "node_failure", RemoteState.PREEMPTED: "preemption"}
# An event: the cluster restarted the attempt in place (details: attempt, count).
RESTARTED_IN_PLACE = "restarted_in_place"


def cluster_config(cluster: Cluster) -> ClusterConfig:
    options = dict(cluster.settings)
    if cluster.kind == "local" and not options.get("workdir"):
        # The service's GPUQ_LOCAL_WORKDIR (its _FILE form included); backends import no Django.
        # By id, not name: a rename in the admin must not move its running jobs (local.py).
        options["workdir"] = str(settings.GPUQ_LOCAL_WORKDIR / local_dir_name(cluster.pk))
    return ClusterConfig(id=cluster.pk, name=cluster.name, kind=cluster.kind, settings=options)


def backend_for(cluster: Cluster) -> Any:
    return get_backend(cluster_config(cluster))


def shown_error(exc: BackendError, what: str) -> str:
    """A backend's error as a job's reason and events (which the job's whole team reads) may
    say it: the cluster's answer about the job as it is (sbatch's "Invalid account", an API
    server's 422); an error in how gpuq reaches the cluster (SSH, an HTTP connection, a
    timeout, a setting's error quoting a kubeconfig or an account) as the summary the
    clusters API shows everyone, since its own words name the cluster's host and gpuq's
    account there. Those go to the server's log (`what`:
    whose error)."""
    summary = reaching_error_summary(exc.message)
    if summary is None:
        return exc.message
    log.warning("%s: %s", what, exc.message)
    return summary


def dispatch_request(job: Job, resubmit: bool = False) -> DispatchRequest:
    """The backend's view of an admitted job. The scheduler may have placed more GPUs per
    node than the job asks (its footprint: CPUs or memory charged in GPUs); those are held
    idle, and the backend is given only the job's own, the first of each node's. A Slurm job
    that gives no memory asks for its footprint's share of the node's (the least over its
    nodes; a MIG slice's share of a GPU, a job charged no GPU its CPUs'), so that Slurm never
    hands it the whole node (SelectTypeParameters=CR_*_Memory)."""
    spec = job.spec
    command = spec["command"]
    checkpoint = spec.get("checkpoint") or {}
    retries = spec.get("retries") or {}
    own = spec["gpus_per_node"]
    memory_mb = spec.get("memory")
    if memory_mb is None and job.cluster is not None and job.cluster.kind == "slurm":
        memory_mb = _footprint_memory_mb(job)
    placement = tuple(
        AllocatedNode(
            node=a["node"],
            gpus=tuple(a.get("gpus", ()))[:own],
            mig_gpu=(a.get("mig") or {}).get("gpu"),
            mig_profile=(a.get("mig") or {}).get("profile"),
            mig_start=(a.get("mig") or {}).get("start"),
        )
        for a in job.placement
    )
    return DispatchRequest(
        job_id=str(job.id),
        team=job.team.slug,
        user=job.user.get_username(),
        name=job.name,
        kind=job.kind,
        command=tuple(command) if isinstance(command, list) else command,
        image=spec.get("image"),
        env=handed_env(spec),
        nodes=spec["nodes"],
        gpus_per_node=spec["gpus_per_node"],
        gpu_model=job.gpu_model or spec.get("gpu_model"),
        # The placed slice as its node names it (`7g.79gb` for a `7g.80gb` request): the
        # resource or GRES the cluster offers.
        mig_profile=next((a.mig_profile for a in placement if a.mig_profile), None)
        or spec.get("mig_profile"),
        cpus_per_gpu=spec.get("cpus_per_gpu"),
        memory_mb=memory_mb,
        time_limit_s=spec.get("time_limit"),
        priority=job.priority_class.name,
        # What is left of the spec's retries after the requeues and restarts in place so far
        # that used one (_end_or_requeue; not the cycle's own preemptions): a cluster that
        # retries in place (Volcano's maxRetry) must not start them afresh.
        retries_max=max(0, int(retries.get("max", 0)) - retries_used(job)),
        retry_on=tuple(retries.get("on", ())),
        checkpoint_dir=checkpoint_dir_of(
            checkpoint["dir"],
            str(job.id),
            None if job.array_id is None else str(job.array_id),
            job.array_index,
        )
        if checkpoint.get("dir")
        else None,
        checkpoint_interval_s=checkpoint.get("interval"),
        nccl_debug=bool(spec.get("nccl_debug")),
        attempt=max(job.attempts, 1),
        placement=placement,
        array=(
            None
            if job.array is None or job.array_index is None
            else ArrayTask(str(job.array_id), job.array_index, job.array.size)
        ),
        stop_grace_s=settings.GPUQ_PREEMPTION_GRACE_S,
        resubmit=resubmit,
    )


def handed_env(spec: dict[str, Any]) -> dict[str, str]:
    """The spec's env less the names Slurm's commands read as their own options: a job
    stored before the spec refused them keeps them in its spec, but no cluster gets them
    (on the lab, `SRUN_EXPORT_ENV=NONE` started gpuq's srun without PATH). Every kind alike,
    as the rule is the spec's; the job is told once (_tell_env_dropped)."""
    return {k: v for k, v in (spec.get("env") or {}).items() if launcher_option(k) is None}


def _footprint_memory_mb(job: Job) -> int | None:
    """The share of each of its nodes' memory the job's footprint holds (memory_share_mb):
    the GPUs it holds there, a MIG slice its share of a GPU (`Job.gpus`: compute slices /
    7), a job holding none the CPUs Slurm gives it. The least over its nodes; None when a
    node's memory is unknown."""
    spec = job.spec
    cpus = cpus_per_node(spec.get("cpus_per_gpu") or 1, spec["gpus_per_node"])
    names = [a["node"] for a in job.placement]
    nodes = {
        n.name: n
        for n in Node.objects.filter(cluster_id=job.cluster_id, name__in=names).only(
            "name", "gpus", "cpus", "memory_mb"
        )
    }
    shares = []
    for a in job.placement:
        node = nodes.get(a["node"])
        if node is None or not node.memory_mb:
            return None
        gpus = job.gpus if a.get("mig") else len(a.get("gpus", ()))
        share = memory_share_mb(node.memory_mb, node.gpus, node.cpus, gpus, cpus)
        if share is None:
            return None
        shares.append(share)
    return min(shares, default=None)


def dispatch_job(job_id: str) -> None:
    """Hand an admitted job to its cluster's backend.

    1. admitted -> dispatching (conditional: a second worker stops here); or, for a job whose
       last submit failed transiently, claim the retry (a conditional UPDATE of its reason);
    2. backend.submit (idempotent by the job's unique name: adopts what an earlier submit of
       the attempt created; a retry is marked `resubmit`, for a backend that must look wider);
    3. dispatching -> queued with the external id, or the stop of a job cancelled meanwhile
       (a submit answered after its job moved on to another attempt: its workload stopped).
       A transient error leaves the job dispatching for a retry: the cluster may have the
       job, and only a submit of the same attempt can tell. A permanent one fails the job
       with the backend's message (cancels it, if it was cancelled meanwhile)."""
    job = Job.objects.select_related("cluster", "team", "user", "priority_class", "array").get(
        pk=job_id
    )
    first = job.state == S.ADMITTED
    if first:
        gone = _placement_gone(job)
        # Only the admission read: one undone meanwhile and made again (placed elsewhere) is
        # another task's to hand over.
        admission = {"admitted_at": job.admitted_at}
        try:
            if gone is not None:
                # Placed on what is no longer there to take it: placed again, not failed.
                transition(
                    job,
                    S.PENDING,
                    expect=admission,
                    code="placement_gone",
                    message=gone,
                    reason=_reason("placement_gone", gone),
                    **unplaced(job),
                )
                request_cycle()
                return
            transition(
                job, S.DISPATCHING, expect=admission, code="dispatching", attempts=job.attempts + 1
            )
        except StaleState:
            return
    elif not _claim(job, RETRY):
        return
    submit_admitted(job, resubmit=not first)


def _placement_gone(job: Job) -> str | None:
    """Why an admitted job's placement no longer stands (its cluster was disabled, or a node
    left it or is draining since the cycle placed it), or None."""
    if job.cluster is None:
        return None
    if not job.cluster.enabled:
        return f"its cluster {job.cluster.name} was disabled before the job was handed to it"
    names = {a["node"] for a in job.placement}
    up = set(
        Node.objects.filter(cluster=job.cluster, name__in=names, state=Node.State.UP).values_list(
            "name", flat=True
        )
    )
    if names - up:
        left = ", ".join(sorted(names - up))
        return (
            f"node {left} of {job.cluster.name} stopped taking work before the job was handed to it"
        )
    return None


RETRY = "dispatch_retry"  # the reason of a job whose last submit failed transiently
# A dispatch may be under way, or may have left a workload behind, in these states until the
# backend has named the job (external_id): a retry submits the same attempt again.
UNNAMED = (S.DISPATCHING, S.CANCELLING, S.SUSPENDING)


def retries_due() -> Any:
    """Jobs whose dispatch is to be retried: claimable by dispatch_job."""
    return Job.objects.filter(state__in=UNNAMED, external_id="", reason__code=RETRY)


# The embedded loop's pause before a job's n-th retry of one submit (Celery's autoretry
# backs off on its own): a cluster that stays down is not asked every loop, nor does each
# job's timeline gain a note every second.
RETRY_BACKOFF_S = (0, 5, 15, 30, 60, 120, 300)


def retries_due_now(now: datetime) -> list[str]:
    """The ids of retries_due() whose backoff has passed: counted by the job's failed
    submits since it was admitted, from the last of them (not from the job's updated_at,
    which any edit moves: an owner's edits must not put the retry off)."""
    admitted = dict(retries_due().values_list("pk", "admitted_at"))
    tries: dict[Any, int] = {}
    last: dict[Any, datetime] = {}
    events = JobEvent.objects.filter(job_id__in=list(admitted), code=RETRY)
    for job_id, at, details in events.values_list("job_id", "at", "details"):
        since = admitted[job_id]
        if since is None or at < since:
            continue
        # A retry's note repeated is one event with `repeats` and `last_at` (services.note).
        details = details if isinstance(details, dict) else {}
        tries[job_id] = tries.get(job_id, 0) + int(details.get("repeats", 1))
        when = parse_datetime(str(details.get("last_at") or "")) or at
        last[job_id] = max(when, last.get(job_id, when))
    final = len(RETRY_BACKOFF_S) - 1
    return [
        str(pk)
        for pk in admitted
        if pk not in last
        or last[pk] <= now - timedelta(seconds=RETRY_BACKOFF_S[min(tries[pk] - 1, final)])
    ]


def cancel_wait_reason(job: Job, code: str, error: str | None = None) -> dict[str, Any]:
    """The reason of a cancelled job whose dispatch is under way or in doubt: who cancelled it,
    and why it is not cancelled yet (the cluster may have it: it is stopped there once found,
    never left running unseen); `code` is the dispatch's own (a retry is claimed by it)."""
    by = cancelled_by(job)
    said = f"cancelled by {by}" if by else "cancelled on request"
    cluster = job.cluster
    name = cluster.name if cluster is not None else "its cluster"
    if error is None:
        message = f"{said}; the job is being handed to {name}: it is stopped there once named"
    else:
        message = (
            f"{said}; {name} did not answer whether it has the job ({error}): it is asked"
            " again, with backoff, and the job stopped there once found"
        )
    if cluster is not None and not cluster.enabled:
        message += f"; {name} is disabled (no new work goes there), but the job may be there"
    details = {"by": by, "cluster": error}
    return {"code": code, "message": message, "details": details}


def say_cancel_waits(job: Job) -> None:
    """Write the reason of a job cancelled while unnamed (cancel_wait_reason), keeping its
    dispatch's code: a conditional UPDATE on the code and updated_at read, so that a retry's
    claim or failure meanwhile (which writes its own such reason) is never undone. A job whose
    last submit failed but whose reason said something else (its suspend's) quotes that
    failure all the same."""
    for _ in range(3):
        job.refresh_from_db(fields=["state", "external_id", "reason", "updated_at", "cluster"])
        if job.state != S.CANCELLING or job.external_id:
            return
        was = job.reason or {}
        code, error = was.get("code", ""), None
        if code == RETRY:  # the last submit's error: as _submit_failed wrote it
            error = (was.get("details") or {}).get("cluster") or str(
                was.get("message", "")
            ).removeprefix("will retry: ")
        else:
            error = _last_submit_error(job)
        reason = cancel_wait_reason(job, code, error)
        if Job.objects.filter(
            pk=job.pk,
            state=S.CANCELLING,
            external_id="",
            updated_at=job.updated_at,
            reason__code=code,
        ).update(reason=reason):
            job.reason = reason
            return


def _last_submit_error(job: Job) -> str | None:
    """The error of the job's last submit, if that failed transiently and no dispatch was
    taken up since (as its RETRY note said it, already fit to show)."""
    last = (
        job.events.filter(
            Q(code__in=(RETRY, "dispatch_resumed", "dispatched")) | Q(to_state=S.DISPATCHING)
        )
        .order_by("-at", "-id")
        .values_list("code", "message")
        .first()
    )
    if last is None or last[0] != RETRY:
        return None
    return str(last[1]).removeprefix("will retry: ")


def _claim(job: Job, reason_code: str | None) -> bool:
    """Take over an unnamed job's dispatch: one conditional UPDATE (on its reason's code, or
    on updated_at when None), so two workers never submit it at once."""
    if job.state not in UNNAMED or job.external_id:
        return False
    rows = Job.objects.filter(pk=job.pk, state=job.state, external_id="")
    if reason_code is None:
        rows = rows.filter(updated_at=job.updated_at)
    else:
        rows = rows.filter(reason__code=reason_code)
    now = timezone.now()
    # A suspended job keeps saying who suspended it (its claim goes by updated_at; a claim
    # by the retry's reason code must change the reason, so that it is taken once).
    if job.state == S.SUSPENDING and reason_code is None:
        reason = job.reason
    elif job.state == S.CANCELLING:
        reason = cancel_wait_reason(job, "dispatching")
    else:
        reason = _reason("dispatching", "handing the job to its cluster again")
    if rows.update(reason=reason, updated_at=now) != 1:
        return False
    job.reason, job.updated_at = reason, now
    return True


def submit_admitted(job: Job, resubmit: bool = False) -> None:
    """`resubmit`: an earlier submit of the job's attempt may have reached the cluster."""
    assert job.cluster is not None
    attempt = job.attempts
    began = timezone.now()  # what made the workload began then, at the earliest (_made_at)
    try:
        result = backend_for(job.cluster).submit(dispatch_request(job, resubmit))
    except BackendError as exc:
        _submit_failed(job, exc)
        if not exc.permanent:
            raise  # the caller retries with backoff (Celery's autoretry, or the next loop)
        return
    # Named only if the job is still this attempt's (a submit over SSH can take long enough
    # for the job to be stopped, admitted again and handed over as its next attempt).
    if not Job.objects.filter(
        pk=job.pk,
        state__in=UNNAMED,
        attempts=attempt,
        external_id__in=("", result.external_id),
    ).update(external_id=result.external_id):
        job.refresh_from_db(fields=["attempts", "external_id"])
        if (job.attempts, job.external_id) != (attempt, result.external_id):
            _stop_late_workload(job, attempt, result.external_id)
        return  # else another submit of this attempt named it (and went on)
    job.external_id = result.external_id
    _tell_image_unused(job)
    _tell_env_dropped(job)
    message = f"{'adopted' if result.adopted else 'submitted as'} {result.external_id}"
    details = {"submit_began": began.isoformat()}
    job.refresh_from_db(fields=["state", "updated_at"])
    if job.state == S.DISPATCHING:
        try:
            transition(
                job,
                S.QUEUED,
                code="dispatched",
                message=message,
                details=details,
                reason=_reason("dispatched", "accepted by the cluster; waiting to start"),
            )
            return
        except StaleState:
            job.refresh_from_db()
    if job.state in (S.CANCELLING, S.SUSPENDING):  # asked to stop while being handed over
        note(job, "dispatched", message, details)
        request_stop(job)


def _tell_image_unused(job: Job) -> None:
    """The local backend has no containers: a job that names an image is told, once, that
    its command runs on this machine as it is."""
    image = job.spec.get("image")
    if not image or job.cluster is None or job.cluster.kind != Cluster.Kind.LOCAL:
        return
    if not job.events.filter(code="image_ignored").exists():
        note(
            job,
            "image_ignored",
            f"cluster {job.cluster.name} runs the command on this machine, without containers:"
            f" image {image} is not used",
        )


def _tell_env_dropped(job: Job) -> None:
    """A job stored with env names refused since (handed_env) is told, once, which were
    left out and why: it runs, without them, rather than failing for a rule it predates."""
    dropped = sorted(set(job.spec.get("env") or {}) - set(handed_env(job.spec)))
    if not dropped or job.events.filter(code="env_dropped").exists():
        return
    by_prefix: dict[str, list[str]] = {}
    for name in dropped:
        prefix = next(p for p in LAUNCHER_ENV_PREFIXES if name.startswith(p))
        by_prefix.setdefault(prefix, []).append(name)
    why = {p: LAUNCHER_ENV_PREFIXES[p] for p in by_prefix}
    said = "; ".join(f"{', '.join(names)}: {why[p]}" for p, names in by_prefix.items())
    name = job.cluster.name if job.cluster is not None else "its cluster"
    note(
        job,
        "env_dropped",
        f"handed to {name} without {', '.join(dropped)} of its env, names refused in a job's"
        f" env since it was stored: {said}",
        {"names": dropped, "why": why},
    )


def _stop_late_workload(job: Job, attempt: int, external_id: str) -> None:
    """A submit answered after its job moved on: no attempt of the job follows what it made,
    so it is stopped at once (never left running unseen), and the job's timeline says so.
    A cluster that cannot be asked now logs it; the workload carries the job's id."""
    assert job.cluster is not None
    message = f"attempt {attempt}'s submit answered late ({external_id}): stopped there"
    try:
        backend_for(job.cluster).cancel(external_id, grace_s=settings.GPUQ_PREEMPTION_GRACE_S)
    except BackendError as exc:
        log.warning("job %s: %s, but the stop failed: %s", job.pk, message, exc.message)
        message = f"attempt {attempt}'s submit answered late ({external_id}); its stop failed"
    note(job, "late_submit_stopped", message)


def _submit_failed(job: Job, exc: BackendError) -> None:
    """The job as the failed submit leaves it, read afresh: a user may have cancelled it
    while the backend was asked."""
    error = shown_error(exc, f"job {job.pk}: its submit failed")
    for _ in range(3):
        job.refresh_from_db()
        if job.state not in UNNAMED or job.external_id:
            return
        if not exc.permanent:
            # It stays where it is, with the retry's reason: a cancel now waits for the
            # retry to find (or place) the job on the cluster and stop it. A suspend keeps
            # saying who suspended it; the sync resumes its dispatch once it is stale.
            if job.state != S.SUSPENDING:
                reason = (
                    cancel_wait_reason(job, RETRY, error)
                    if job.state == S.CANCELLING
                    else _reason(RETRY, f"will retry: {error}")
                )
                if not Job.objects.filter(pk=job.pk, state=job.state, external_id="").update(
                    reason=reason, updated_at=timezone.now()
                ):
                    continue  # moved meanwhile (cancelled, suspended): its retry's reason anew
            note(job, RETRY, f"will retry: {error}")
            return
        if job.state == S.CANCELLING:
            # Nothing reached the cluster: the cancel ends it, in the words of who asked.
            reason = cancelled_reason(job, {"cluster": {"refused": error}})
            message = f"{reason['message']}; the cluster refused it: {error}"
            if _try(job, S.CANCELLED, code="cancelled", message=message, reason=reason):
                return
            continue
        elif job.state == S.SUSPENDING:
            # Nothing ran: it waits suspended as asked, and a resume places it again.
            if _try(
                job,
                S.SUSPENDED,
                code="suspended",
                message=f"suspended; the cluster refused it meanwhile: {error}",
                placement=[],
            ):
                return
            continue
        else:
            to, code, message = S.FAILED, "dispatch_failed", error
        if _try(job, to, code=code, message=message, reason=_reason(code, message)):
            return


def request_stop(job: Job) -> None:
    """Stop a cancelling or preempting job on its backend, after the surrounding commit."""
    if not job.external_id:
        # Still being handed over: submit_admitted (or the retry) stops it once the backend
        # names it. A cancel says meanwhile what it waits for.
        if job.state == S.CANCELLING:
            say_cancel_waits(job)
        return
    if settings.CELERY_BROKER_URL:
        from .tasks import cancel_job

        job_id = str(job.pk)

        def enqueue() -> None:
            try:
                cancel_job.delay(job_id)
            except Exception:  # the broker is down: the stop is recorded, the sync resends it
                log.warning("job %s: could not enqueue its stop", job_id, exc_info=True)

        transaction.on_commit(enqueue)
    else:
        # robust: one victim's failed stop must not drop the other hooks of the commit (the
        # cycle's other stops, its dispatches); the sync sends a lost stop again.
        transaction.on_commit(lambda: stop_job(str(job.pk)), robust=True)


STOP_SENT = "stop_sent"  # an event: a stop of this attempt went to the cluster
STOP_SENT_AGAIN = "stop sent again"  # its message, after the attempt's first


def stop_job(job_id: str) -> None:
    """Stop a stopping job on its backend. Safe to run twice: a repeat (the task delivered
    again, the sync's re-send) after a stop the cluster answered finds the job ended by that
    stop, and the end is the stop's. After a stop that failed on its way (an error leaves
    unknown whether it arrived), a job found ended keeps its own end. One delivered while
    another's stop is under way (sent and not failed: unanswered, or answered since this one
    was sent) leaves an end it finds to that stop (or to the sync, which counts it the
    stop's): it may be that stop's."""
    job = Job.objects.select_related("cluster").get(pk=job_id)
    if job.state not in Job.STOPPING or not job.external_id:
        return
    assert job.cluster is not None
    grace = settings.GPUQ_PREEMPTION_GRACE_S
    try:
        backend = backend_for(job.cluster)
    except BackendError as exc:  # its settings: nothing was sent
        _stop_failed(job, exc)
        if not exc.permanent:
            raise
        return
    repeat, sent = _note_stop(job, grace)
    _charge_before_stop(job, backend)
    delivered = False
    try:
        stopping = backend.cancel(job.external_id, grace_s=grace)
        # The cluster answered: this stop reached it (an error leaves that unknown, and the
        # job's own end must not then be taken for the stop's). One that stopped nothing (the
        # job had ended, or was ending, on its own) is no stop its end can be taken for.
        answered = {**sent.details, "delivered": True, **({} if stopping else ENDED_FIRST)}
        JobEvent.objects.filter(pk=sent.pk).update(details=answered)
        delivered = True
        _stop_taken(job, grace)
        if stopping:
            return
        status = backend.poll([job.external_id]).get(job.external_id)
    except BackendError as exc:
        if not delivered:  # no longer under way: a delivery meanwhile need not wait for it
            # A refusal (permanent: a 403) stopped nothing, so no end can be its doing.
            failed = {"failed": True, **(REFUSED if exc.permanent else {})}
            JobEvent.objects.filter(pk=sent.pk).update(details={**sent.details, **failed})
        _stop_failed(job, exc)
        if not exc.permanent:
            raise
        return
    if status is None or status.state not in RemoteState.TERMINAL:
        return
    if repeat:
        _apply_status(job, status)
        return
    if _other_stop_under_way(job, sent, grace):
        # The task delivered twice at once: the other delivery's stop may be what ended it
        # (Slurm's returns only once it sees the end). That one records the end, or the sync.
        return
    # It had ended on its own before the first stop reached it (gpuq's sync had not seen it
    # yet): its end is its own, so an exit 0 is a success, not a cancellation.
    note(job, "ended_before_stop", "it had already ended when the stop reached the cluster")
    _apply_status(job, status, stopped=False)


# On a `stop_sent` event whose stop the cluster answered with "nothing to stop": the job had
# ended, or was ending, on its own (a Kubernetes Job failing by itself, a Volcano gang
# completing); such a stop never counts as what ended it.
ENDED_FIRST = {"ended_first": True}
# On one the cluster refused (a permanent error, not sent again since: _refold drops it).
REFUSED = {"refused": True}


def _stops_that_count(job: Job) -> QuerySet[JobEvent]:
    """The attempt's `stop_sent` events, but those that stopped nothing."""
    # has_key: a key compared in SQL is NULL where it is missing, and NOT NULL excludes too.
    return (
        job.events.filter(code=STOP_SENT, details__attempt=job.attempts)
        .exclude(details__has_key="ended_first")
        .exclude(details__has_key="refused")
    )


def _other_stop_under_way(job: Job, sent: JobEvent, grace: float) -> bool:
    """Whether another stop of this attempt may be what ended the job, for a stop noted when
    none of the attempt had been answered (not a repeat): one answered since (`delivered`
    after this one's _note_stop: it was under way then), or one still under way (neither
    answered nor failed, and last sent within a stop's time limit, the task's: a worker that
    died mid-stop leaves its event so)."""
    since = timezone.now() - timedelta(seconds=grace + STOP_UNDER_WAY_S)
    others = (
        _stops_that_count(job)
        .exclude(pk=sent.pk)
        .exclude(details__has_key="failed")
        .values_list("at", "details")
    )
    return any(details.get("delivered") or _sent_at(at, details) >= since for at, details in others)


def _sent_at(at: datetime, details: dict[str, Any]) -> datetime:
    """When the last of the stops a `stop_sent` event counts was sent (_note_stop)."""
    last = details.get("last_at")
    return datetime.fromisoformat(last) if isinstance(last, str) else at


# How long a stop may be under way beyond the grace: its Celery task's time limit (tasks.py).
STOP_UNDER_WAY_S = 120


STOP_REFUSED = "stop_refused"  # the reason of a cancelling job whose stop the cluster refused


def _stop_failed(job: Job, exc: BackendError) -> None:
    """A stop that failed (to be retried) or that the cluster refused. A cancel's says who
    asked, and one refused leaves the job cancelling with why: it is still on the cluster
    (the sync sends the stop again while it runs; an end before one gets through is its own)."""
    code = "stop_failed" if exc.permanent else "stop_retry"
    error = shown_error(exc, f"job {job.pk}: its stop failed")
    by = cancelled_by(job) if job.state == S.CANCELLING else None
    if by is None:
        note(job, code, error, {"cluster": error})
        return
    details = {"by": by, "cluster": error}
    if not exc.permanent:
        note(job, code, f"the stop {by} asked for failed, sent again: {error}", details)
        return
    note(job, code, f"the cluster refused the stop {by} asked for: {error}", details)
    Job.objects.filter(pk=job.pk, state=S.CANCELLING, external_id=job.external_id).update(
        reason={
            "code": STOP_REFUSED,
            "message": f"cancelled by {by}; the cluster refused the stop: {error}",
            "details": details,
        }
    )


def _stop_taken(job: Job, grace: float) -> None:
    """A stop the cluster answered, of a job whose reason still says that the cluster refused
    the last one: it no longer holds (conditional on that reason, so nothing later is undone)."""
    if job.state != S.CANCELLING or (job.reason or {}).get("code") != STOP_REFUSED:
        return
    reason = stopping_reason(cancelled_by(job))
    reason["message"] += f" (it has {grace:g} s to end after TERM)"
    Job.objects.filter(
        pk=job.pk, state=S.CANCELLING, external_id=job.external_id, reason__code=STOP_REFUSED
    ).update(reason=reason)


def _charge_before_stop(job: Job, backend: Any) -> None:
    """A job asked to stop before any sync saw it running (queued, or being handed over, as
    far as gpuq knew) may run on the cluster all the same: asked first, so that a run the
    stop ends is charged (the end a stop leaves seldom tells whether the job had started).
    A failed look is no reason not to stop it."""
    if not _unseen(job):
        return
    try:
        status = backend.poll([job.external_id]).get(job.external_id)
    except BackendError as exc:
        log.warning("job %s: could not look whether it runs before its stop: %s", job.pk, exc)
        return
    if status is not None and status.state == RemoteState.RUNNING:
        record_unseen_run(job, _earliest_start(job))


def _unseen(job: Job) -> bool:
    """No sync saw it running since it was handed over or its cluster held it waiting: being
    stopped, or held (`CLUSTER_HOLDS`), with no open run of this attempt."""
    if job.state not in Job.STOPPING and not (
        job.state == S.RUNNING and job.reason.get("code") == CLUSTER_HOLDS
    ):
        return False
    return not job.runs.filter(attempt=max(job.attempts, 1), ended_at__isnull=True).exists()


def _ran(status: JobStatus) -> bool:
    """Whether the end a cluster reports may be that of a job that ran: any but lost, unless
    its backend can tell it never started (squeue's pending reason, sacct's start and node
    list, the local cluster's cancel before the start, a Kubernetes workload whose pods never
    started: a node failure or a cancel of a job still waiting there). Where nothing tells
    (a workload deleted by hand), it is charged: a run missed is lost for good, and the
    charge runs only from when the job was handed over."""
    if status.state not in RemoteState.TERMINAL or status.state == RemoteState.LOST:
        return False
    # A preemption ends only a run (a queued job cannot move to preempted without one).
    return status.started is not False or status.state == RemoteState.PREEMPTED


def _note_stop(job: Job, grace: float) -> tuple[bool, JobEvent]:
    """Record a stop about to be sent: whether a stop of this attempt reached the cluster
    before (the event is marked `delivered` once the cluster answers), and the event. Under
    the job's row lock, so that two deliveries at once read one history. A stop sent again
    after the last one failed, with nothing in the timeline since but that failure's note, is
    counted on that one's event (`repeats`, `last_at`; it is under way again): a cluster that
    keeps failing or refusing stops does not add an event per re-send."""
    with transaction.atomic():
        list(Job.objects.select_for_update().filter(pk=job.pk).values_list("pk"))
        earlier = job.events.filter(code=STOP_SENT, details__attempt=job.attempts)
        delivered = _stops_that_count(job).filter(details__delivered=True).exists()
        last = earlier.order_by("-at", "-id").first()
        if last is not None and _refold(job, last):
            return delivered, last
        message = (
            STOP_SENT_AGAIN if last is not None else f"stop sent ({grace:g} s to end after TERM)"
        )
        event = JobEvent.objects.create(
            job=job,
            code=STOP_SENT,
            message=message,
            details={"attempt": job.attempts, "delivered": False},
        )
    return delivered, event


def _refold(job: Job, last: JobEvent) -> bool:
    """Count a stop sent again on `last`, the attempt's last `stop_sent`, if that was sent
    again too and failed (neither answered nor under way: nothing reads it but as a stop that
    was sent), and nothing but stop failure notes came after it. True if it did."""
    before = last.details or {}
    if last.message != STOP_SENT_AGAIN or not before.get("failed") or before.get("delivered"):
        return False
    after = job.events.filter(Q(at__gt=last.at) | Q(at=last.at, pk__gt=last.pk))
    if after.exclude(code__in=("stop_retry", "stop_failed")).exists():
        return False
    again = {
        "attempt": before.get("attempt"),
        "delivered": False,
        "repeats": int(before.get("repeats", 1)) + 1,
        "last_at": timezone.now().isoformat(),
    }
    if not JobEvent.objects.filter(pk=last.pk, details=last.details).update(details=again):
        return False
    last.details = again
    return True


def sync_cluster(cluster_id: int) -> dict[str, int]:
    """Refresh a cluster's inventory and its jobs' states: one `nodes()` and one `poll()`."""
    cluster = Cluster.objects.get(pk=cluster_id)
    counts = {"nodes": 0, "polled": 0, "changed": 0}
    sync_error = ""
    try:
        backend = backend_for(cluster)  # unusable settings fail here: the cluster page says so
        inventory = backend.nodes()
        counts["nodes"] = len(inventory)
        _store_inventory(cluster, inventory)
        jobs = list(
            Job.objects.filter(cluster=cluster, state__in=Job.ON_BACKEND)
            .exclude(external_id="")
            .select_related("priority_class", "team", "user", "cluster")
        )
        # What the poll saw is as of its start: a job handed over after it is not in it.
        polled_at = timezone.now()
        try:
            statuses = backend.poll([j.external_id for j in jobs]) if jobs else {}
        except PartialPoll as partial:
            # Some jobs could not be read (one Slurm account cannot log in): the others are
            # followed, those stay as they are, and the cluster page says why.
            statuses, sync_error = partial.statuses, partial.message
    except BackendError as exc:
        Cluster.objects.filter(pk=cluster.pk).update(last_sync_error=exc.message)
        raise
    counts["polled"] = len(jobs)
    for job in jobs:
        status = statuses.get(job.external_id)
        try:
            if status is not None and _apply_status(job, status, stopped=_stop_sent(job)):
                counts["changed"] += 1
            elif _stop_overdue(job, status):
                # The stop was lost (its worker died) or did not take. Sent as a task of its
                # own: a stop may wait out the grace, which would hold up this whole sync.
                send_stop_again(job)
        except ValueError:
            # A move the state table does not allow is our bug; it must not stop the sync
            # of every other job of the cluster, every time.
            log.exception("job %s: cannot record %s", job.pk, status)
    _redispatch_stale(cluster)
    if sync_error:
        # Not a sync that saw every job: the last sync's time would charge a job of the
        # unread account, first seen ended, from a sync that never saw it waiting.
        Cluster.objects.filter(pk=cluster.pk).update(last_sync_error=sync_error)
    else:
        Cluster.objects.filter(pk=cluster.pk).update(last_sync_at=polled_at, last_sync_error="")
    if counts["changed"]:
        request_cycle()
    return counts


def _stop_sent(job: Job) -> bool:
    """Whether a stopping job's end may be its stop's: a stop of this attempt was sent, or is
    on its way (noted before it is sent), and the cluster did not refuse it. Before that (a
    stop task still queued) the job ended by itself, and its end is its own, as when the stop
    finds it ended."""
    if job.state not in Job.STOPPING:
        return True  # not read for a job not being stopped
    return _stops_that_count(job).exists()


def send_stop_again(job: Job) -> None:
    """The sync's second stop of a job: a task (Celery), or in the embedded mode a thread of
    its own, started after the surrounding commit. Never inline: a stop may wait out the
    grace on the cluster (Slurm's TERM, a wait for the end, then scancel), and every other job
    of the cluster, every other cluster, the cycle and dispatch would wait for it. A thread
    that dies with its process leaves the stop lost: sent again once overdue."""
    if settings.CELERY_BROKER_URL or not job.external_id:
        request_stop(job)
        return
    job_id = str(job.pk)
    transaction.on_commit(
        lambda: threading.Thread(
            target=_stop_apart, args=(job_id,), name=f"gpuq-stop-{job_id}", daemon=True
        ).start()
    )


def _stop_apart(job_id: str) -> None:
    try:
        stop_job(job_id)
    except BackendError as exc:
        log.warning("job %s: its stop failed, and is sent again later: %s", job_id, exc.message)
    except Exception:
        log.exception("job %s: its stop failed", job_id)
    finally:
        connection.close()  # the thread's own connection


def _store_inventory(cluster: Cluster, inventory: list[NodeInfo]) -> None:
    seen = set()
    for info in inventory:
        seen.add(info.name)
        Node.objects.update_or_create(
            cluster=cluster,
            name=info.name,
            defaults={
                "gpu_model": info.gpu_model,
                "gpus": info.gpus,
                "pool": info.pool or "",
                "state": info.state,
                "reason": info.reason[:256],
                "labels": dict(info.labels),
                "mig_enabled": info.mig,
                "cpus": info.cpus,
                "memory_mb": info.memory_mb,
                "mig": [
                    {
                        "gpu": m.gpu,
                        "profile": m.profile,
                        "start": m.start,
                        "size": m.size,
                        "in_use": m.in_use,
                        "external_job": m.external_job,
                    }
                    for m in info.mig_instances
                ],
            },
        )
    # A node the backend no longer reports was removed from the cluster (nodes() lists one
    # that stops answering, down): it leaves the inventory, as it leaves sinfo and kubectl
    # get nodes. While a job is still placed on it, it stays, down, for the GPU map.
    gone = Node.objects.filter(cluster=cluster).exclude(name__in=seen)
    placed = {
        a.get("node")
        for placement in Job.objects.filter(cluster=cluster, state__in=Job.ACTIVE).values_list(
            "placement", flat=True
        )
        for a in placement or ()
        if isinstance(a, dict) and a.get("node")
    }
    gone.exclude(name__in=placed).delete()
    gone.filter(name__in=placed).update(
        state=Node.State.DOWN, reason="no longer reported by the cluster"
    )


def _apply_status(job: Job, status: JobStatus, *, stopped: bool = True) -> bool:
    """Record what the backend reports. `stopped`: a cancelling or preempting job that ends
    ended because it was asked to (False: the backend said it had ended before)."""
    remote = status.state
    fields: dict[str, Any] = {"remote_state": status.native_state or remote}
    # A poll answers for the attempt read: it must not end a later attempt of the job.
    as_read = _read_attempt(job)
    if status.restarted_in_place:
        _note_restarts(job, status.restarted_in_place)
    try:
        if remote == RemoteState.QUEUED:
            # Only a job still waiting on the cluster says so in the cluster's words: one being
            # stopped keeps why (its suspend, its preemption), and a stale read never replaces
            # a later attempt's reason.
            if (
                status.reason
                and job.state in (S.QUEUED, S.DISPATCHING)
                and job.reason.get("message") != status.reason
            ):
                _as_read(job).update(reason=_reason("backend_pending", status.reason), **fields)
            if job.state == S.RUNNING:
                # Put back to wait by the cluster itself (Kueue's eviction, a gang restarted in
                # place, Slurm's requeue): the cluster still holds it, so it stays running
                # here, saying so until it runs again.
                # Its run ends meanwhile: the team is not charged for the wait.
                said = status.reason or status.native_state or remote
                reason = _reason(CLUSTER_HOLDS, f"the cluster holds it waiting: {said}")
                if (job.reason, job.remote_state) != (reason, fields["remote_state"]):
                    hold_run(job, _as_read(job), timezone.now(), said=said, reason=reason, **fields)
            elif job.state in Job.STOPPING and not _unseen(job):
                # Being stopped (its stop refused or not yet taken), it is put back to wait all
                # the same: its run ends too, and it keeps why it is being stopped.
                said = status.reason or status.native_state or remote
                hold_run(job, _as_read(job), timezone.now(), said=said, **fields)
            return False
        if remote == RemoteState.RUNNING:
            if job.state == S.RUNNING and job.reason.get("code") == CLUSTER_HOLDS:
                rerun_held(job, _as_read(job), timezone.now(), reason={}, **fields)
            if job.state in (S.QUEUED, S.DISPATCHING):
                transition(
                    job,
                    S.RUNNING,
                    expect=as_read,
                    code="running",
                    message=status.reason,
                    started_at=timezone.now(),
                    reason={},
                    **fields,
                )
                return True
            if _unseen(job):  # it started before it was asked to stop, unseen until now
                record_unseen_run(job, _earliest_start(job))
            return False
        if job.state in (S.QUEUED, S.DISPATCHING) and _ran(status):
            # It started and ended between two polls: record the start, so the timeline
            # and usage accounting hold (not for a job cancelled on the cluster while it
            # waited there: that end leaves no exit code, and it never ran).
            transition(
                job,
                S.RUNNING,
                expect=as_read,
                code="running",
                message="started and ended between polls",
                started_at=_earliest_start(job),
                reason={},
            )
        elif _ran(status) and _unseen(job):
            # Asked to stop while gpuq knew it queued, or held waiting by its cluster, it had
            # started (again) meanwhile: its run is charged as one seen, up to the end recorded
            # now.
            record_unseen_run(job, _earliest_start(job))
        if stopped and job.state == S.SUSPENDING and remote != RemoteState.TIMEOUT:
            # However it ended once asked to stop (a clean exit after its checkpoint, the
            # cluster's kill), it waits suspended, holding nothing; its exit code, cluster and
            # backend id are kept, so the last run's logs stay readable until it is resumed.
            transition(
                job,
                S.SUSPENDED,
                expect=as_read,
                code="suspended",
                message=_suspended_says(remote, status.native_state),
                exit_code=status.exit_code,
                placement=[],
                **fields,
            )
            return True
        if remote in RETRYABLE and job.state in (S.CANCELLING, S.SUSPENDING):
            # Asked to end or to wait: a preemption or node failure on the cluster meanwhile
            # does not put it back in the queue.
            if job.state == S.SUSPENDING:
                target, fields["placement"] = S.SUSPENDED, []
            else:
                target = S.CANCELLED
                fields["reason"] = cancelled_reason(job, {"cluster": _said(status)})
            transition(
                job,
                target,
                expect=as_read,
                code=RETRYABLE[remote],
                message=f"{status.reason or status.native_state or remote} while being stopped",
                exit_code=status.exit_code,
                **fields,
            )
            return True
        if remote in RETRYABLE:
            return _end_or_requeue(job, status, RETRYABLE[remote], fields, as_read)
        target = REMOTE_TO_STATE[remote]
        code, message = remote, status.reason or status.native_state
        reason = _reason(remote, status.reason)
        # A job told to stop may catch SIGTERM and exit by itself (0 after a checkpoint, or
        # non-zero): it still ended because we asked. Its exit code is kept, and the reason is
        # gpuq's (who cancelled it), not the cluster's name for the end (Slurm's `CANCELLED by
        # 0`, a pod's Error), which the reason's details keep.
        if stopped and job.state == S.CANCELLING and target != S.TIMEOUT:
            target = S.CANCELLED
            reason = cancelled_reason(job, {"cluster": _said(status)})
            code = "cancelled"
            said = status.reason or status.native_state or remote
            message = f"{reason['message']}; the cluster reported: {said}"
        if stopped and job.state == S.PREEMPTING and target != S.TIMEOUT:
            return _end_or_requeue(job, status, "preemption", fields, as_read)
        transition(
            job,
            target,
            expect=as_read,
            code=code,
            message=message,
            exit_code=status.exit_code,
            reason=reason,
            **fields,
        )
        return True
    except StaleState:
        return False


def _said(status: JobStatus) -> dict[str, Any]:
    """What the cluster reported of an end, for a reason's details."""
    return {
        "state": status.state,
        "native_state": status.native_state,
        "reason": status.reason,
        "exit_code": status.exit_code,
    }


# On the requeue event of a job the cycle preempted (JobEvent.details): a requeue that uses
# no retry.
OWN_PREEMPTION = "own_preemption"


def requeues_counted(job: Job) -> int:
    """The requeues that used a retry (not the attempts, which suspends also add to; not the
    requeues after the cycle's own preemptions)."""
    requeues = job.events.filter(code__startswith="requeued_")
    return int(requeues.exclude(details__has_key=OWN_PREEMPTION).count())


def _restarts_in_place(job: Job) -> dict[int, int]:
    """The restarts in place noted, per attempt: the highest count noted of each (two syncs
    may note the same count)."""
    seen: dict[int, int] = {}
    for details in job.events.filter(code=RESTARTED_IN_PLACE).values_list("details", flat=True):
        attempt, count = int(details.get("attempt", 0)), int(details.get("count", 0))
        seen[attempt] = max(seen.get(attempt, 0), count)
    return seen


def retries_used(job: Job) -> int:
    """The requeues that used a retry and the restarts its clusters made in place (each a
    retry)."""
    return requeues_counted(job) + sum(_restarts_in_place(job).values())


def _note_restarts(job: Job, count: int) -> None:
    """A note per new count of the polled attempt's restarts in place: retries_used counts
    them, also once the attempt is over."""
    if count > _restarts_in_place(job).get(job.attempts, 0):
        # Only Volcano restarts a job in place on its own (maxRetry).
        note(
            job,
            RESTARTED_IN_PLACE,
            f"restarted in place by Volcano ({count})",
            {"attempt": job.attempts, "count": count},
        )


def _end_or_requeue(
    job: Job, status: JobStatus, cause: str, fields: dict[str, Any], as_read: dict[str, Any]
) -> bool:
    retries = job.spec.get("retries") or {}
    if cause == "preemption":
        # Ours: why it stopped (the cycle's sentence, its reason while it left), not how the
        # backend saw the stop ("cancelled"). The cluster's own: the cluster's words (also
        # after the cluster held it waiting, which is no reason for the end).
        ours = job.reason or {}
        if ours.get("code") == CLUSTER_HOLDS:
            ours = {}
        message = ours.get("message") or status.reason or "preempted"
    else:
        message = status.reason or cause.replace("_", " ")
    # Only the cycle's preemptions make a job `preempting`: a stop the queue chose (a reclaim,
    # a priority) is no failure, and requeues whenever `on` allows, using no retry (as Kueue and
    # Slurm's PreemptMode=REQUEUE requeue every time). One the cluster made on its own counts.
    decided = cause == "preemption" and job.state == S.PREEMPTING
    used = retries_used(job)  # the restarts in place of this attempt noted by _apply_status
    if cause in retries.get("on", ()) and (decided or used < int(retries.get("max", 0))):
        by = (job.reason or {}).get("details") or {}
        transition(
            job,
            S.PENDING,
            expect=as_read,
            code=f"requeued_{cause}",
            message=f"{message}; requeued (attempt {job.attempts + 1})",
            details={OWN_PREEMPTION: True, **{k: by[k] for k in ("by_job", "kind") if k in by}}
            if decided
            else None,
            reason=_reason("requeued", f"requeued after {cause.replace('_', ' ')}"),
            # Not the polled fields: what the cluster said of the attempt that ended (its
            # `remote_state`) is not said of the next while it waits.
            **unplaced(job),
        )
        return True
    target = S.PREEMPTED if cause == "preemption" else S.FAILED
    transition(
        job,
        target,
        expect=as_read,
        code=cause,
        message=message,
        exit_code=status.exit_code,
        reason=_reason(cause, message),
        **fields,
    )
    return True


def apply_mig_layout(node_id: int, config: str) -> None:
    """Ask a Kubernetes cluster's GPU Operator for a named MIG layout on one node. Following
    it needs nothing more: inventory reports the node drained while the MIG manager works,
    up with the new slices on success, drained with the reason on failure."""
    node = Node.objects.select_related("cluster").get(pk=node_id)
    if node.cluster.kind != Cluster.Kind.KUBERNETES:
        # Named layouts are the GPU Operator's: a local or Slurm node has none.
        log.error("node %s of %s: no named MIG layout to apply", node.name, node.cluster.name)
        return
    try:
        backend_for(node.cluster).apply_mig_layout(node.name, config)
    except BackendError as exc:
        Node.objects.filter(pk=node_id).update(
            state=Node.State.DRAIN,
            reason=(
                f"MIG reconfiguration to {config!r} failed:"
                f" {shown_error(exc, f'node {node.name} of {node.cluster.name}')}"
            )[:256],
        )
        if not exc.permanent:
            raise


def _suspended_says(remote: str, native: str | None) -> str:
    # The cluster's "cancelled" is the stop itself; said, it reads as the job cancelled.
    how = "" if remote == RemoteState.CANCELLED else f" (it ended {native or remote})"
    return f"stopped as asked{how}; suspended until resumed"


def _earliest_start(job: Job) -> datetime:
    """When a job whose start no sync saw began, at the earliest: when its attempt's dispatch
    began (the cluster may start it as soon as it is asked, before the answer is recorded),
    or the cluster's last sync if that saw it waiting (it polled the job once it was queued).
    Its run counts from there: never less than it ran, more only by what it waited on the
    cluster unseen."""
    now = timezone.now()
    latest: dict[str, datetime] = {}
    for state, at in (
        job.events.filter(to_state__in=(S.QUEUED, S.DISPATCHING))
        .order_by("-at", "-id")
        .values_list("to_state", "at")
    ):
        latest.setdefault(state, at)
        if len(latest) == 2:
            break
    dispatched, queued = latest.get(S.DISPATCHING), latest.get(S.QUEUED)
    start = (dispatched and _made_at(job, dispatched)) or queued or now
    synced = job.cluster.last_sync_at if job.cluster is not None else None
    if (
        synced is not None
        and queued is not None
        and (dispatched is None or queued >= dispatched)  # this attempt's
        and synced > queued
    ):
        start = max(start, synced)
    # A run of this attempt ended when its cluster held it waiting: it ran again after that,
    # and after the last sync that saw it still held.
    held = (
        job.runs.filter(attempt=max(job.attempts, 1), ended_at__isnull=False)
        .order_by("-ended_at")
        .values_list("ended_at", flat=True)
        .first()
    )
    if held is not None:
        start = max(held, synced) if synced is not None else held
    return min(start, now)


def _made_at(job: Job, dispatched: datetime) -> datetime:
    """When the submit that made the attempt's workload (dispatched then) began, at the
    earliest. One adopted may be any of the attempt's submits' (a lost answer is no proof of
    a lost create): from the dispatch. One submitted afresh ("submitted as") is the last
    submit's: from when it began (`submit_began`), or, in an event written before that was
    recorded, after the note of the last submit that failed or was interrupted."""
    events = job.events.filter(at__gte=dispatched).order_by("at", "id")
    made = events.filter(code="dispatched").values_list("at", "message", "details").first()
    if made is None or not str(made[1]).startswith("submitted as"):
        return dispatched
    began = made[2].get("submit_began") if isinstance(made[2], dict) else None
    if began and (when := parse_datetime(str(began))) is not None:
        return min(max(when, dispatched), made[0])  # recorded by submit_admitted
    start = dispatched
    notes = events.filter(code__in=(RETRY, "dispatch_resumed"), at__lte=made[0])
    for at, details in notes.values_list("at", "details"):
        # A note repeated is one event, its last repeat in `last_at` (services.note).
        last = details.get("last_at") if isinstance(details, dict) else None
        start = max(start, parse_datetime(str(last or "")) or at)
    return min(start, made[0])


def _stop_overdue(job: Job, status: JobStatus | None) -> bool:
    """A stopping job still alive a grace (and half a minute) after it was asked to stop, or
    after the last stop sent: once per such span, not on every sync."""
    if job.state not in Job.STOPPING or status is None or status.state in RemoteState.TERMINAL:
        return False
    overdue = timezone.now() - timedelta(seconds=settings.GPUQ_PREEMPTION_GRACE_S + 30)
    # From its first stop: a write since (its emails changed, a cancel of a victim, which
    # sends no second stop) does not put the resend off.
    if (job.stopping_since or job.updated_at) >= overdue:
        return False
    last = job.events.filter(code=STOP_SENT).order_by("-at", "-id").values_list("at", "details")
    sent = last.first()
    return sent is None or _sent_at(*sent) < overdue


def _redispatch_stale(cluster: Cluster) -> None:
    """A worker that died between submit and recording the result leaves a job dispatching,
    or cancelling once its owner cancelled it, without an external id; submit again (the
    backend adopts the earlier submission), then stop it if it was cancelled."""
    cutoff = timezone.now() - timedelta(seconds=settings.GPUQ_DISPATCH_STALE_S)
    for job in Job.objects.filter(
        cluster=cluster, state__in=UNNAMED, external_id="", updated_at__lt=cutoff
    ).select_related("cluster", "team", "user", "priority_class", "array"):
        if not _claim(job, None):
            continue
        note(job, "dispatch_resumed", "resuming an interrupted dispatch")
        try:
            submit_admitted(job, resubmit=True)
        except BackendError:
            continue  # left for a retry


# A terabyte into a log: beyond it, offsets only break the backends' seeks (SFTP packs them
# in 64 bits, the local backend's seek refuses them).
MAX_LOG_OFFSET = 2**40


def read_logs(
    job: Job, *, offset: int, limit: int, stream: str, attempt: int | None = None
) -> LogChunk:
    """The log of the job's attempt `attempt` (by default its latest) from `offset`. Its eof
    is the attempt's: a suspend or a requeue ends an attempt, not the job. An attempt the
    job no longer names (back in the queue, or followed by another) is read by the id its
    run kept, so that what it wrote last stays readable."""
    if not 0 <= offset <= MAX_LOG_OFFSET:
        raise ValueError(f"a log offset runs from 0 to {MAX_LOG_OFFSET}")
    number = job.attempts if attempt is None else attempt
    where = _attempt_on_cluster(job, number)
    if isinstance(where, bool):
        # Nothing of it to read: none will come once a later attempt began or the job
        # ended. An attempt that ran yet has no id left (its cluster deleted, or it ran
        # before runs kept ids) is gone.
        ended = number < job.attempts or job.state in Job.TERMINAL
        return LogChunk(b"", offset, eof=ended, gone=ended and where)
    cluster, external_id = where
    try:
        return backend_for(cluster).logs(external_id, offset=offset, limit=limit, stream=stream)
    except BackendError as exc:  # shown to whoever reads the logs: no host or account
        raise BackendError(
            shown_error(exc, f"job {job.pk}: reading its logs failed"), permanent=exc.permanent
        ) from None


def log_size(job: Job, *, stream: str, attempt: int | None = None) -> int | None:
    """The length of an attempt's log (by default the latest's) when its backend can tell it
    without reading it (a file's size), else None."""
    where = _attempt_on_cluster(job, job.attempts if attempt is None else attempt)
    if isinstance(where, bool):
        return None
    cluster, external_id = where
    try:
        return backend_for(cluster).log_size(external_id, stream=stream)
    except BackendError as exc:
        raise BackendError(
            shown_error(exc, f"job {job.pk}: reading its log's size failed"),
            permanent=exc.permanent,
        ) from None


def _attempt_on_cluster(job: Job, number: int) -> tuple[Cluster, str] | bool:
    """The cluster and external id of the job's attempt `number`: the job's own for its
    latest, else the one its run kept. Without one: whether the attempt ran all the same."""
    if number == job.attempts and job.external_id and job.cluster is not None:
        return job.cluster, job.external_id
    runs = list(job.runs.filter(attempt=number).select_related("cluster"))
    for run in reversed(runs):
        if run.external_id and run.cluster is not None:
            return run.cluster, run.external_id
    return bool(runs)


def _try(job: Job, to: str, **kwargs: Any) -> bool:
    try:
        transition(job, to, **kwargs)
        return True
    except StaleState:
        return False


def _as_read(job: Job) -> QuerySet[Job]:
    """The job's row if still as it was read: a stale read never writes onto a later attempt."""
    return Job.objects.filter(pk=job.pk, state=job.state, **_read_attempt(job))


def _read_attempt(job: Job) -> dict[str, Any]:
    """The attempt a read of the job saw, for transition(expect=...)."""
    return {"attempts": job.attempts, "external_id": job.external_id}


def _reason(code: str, message: str) -> dict[str, Any]:
    return {"code": code, "message": message, "details": {}}


def clusters_to_sync() -> Any:
    """Enabled clusters, and disabled ones while jobs of theirs are there (or being handed
    over): disabling a cluster stops new work going to it, not the following of its jobs."""
    there = Job.objects.filter(cluster=OuterRef("pk"), state__in=Job.ON_BACKEND)
    return Cluster.objects.filter(Q(enabled=True) | Q(Exists(there))).order_by("pk")


def enqueue_syncs(send_sync: Any, send_dispatch: Any) -> int:
    """Beat's periodic fan-out: a sync per cluster, and a new dispatch for admitted jobs
    whose dispatch message was lost (their retry would otherwise never come)."""
    ids = list(clusters_to_sync().values_list("pk", flat=True))
    for cluster_id in ids:
        send_sync(cluster_id)
    cutoff = timezone.now() - timedelta(seconds=settings.GPUQ_DISPATCH_STALE_S)
    lost = Job.objects.filter(state=S.ADMITTED) | retries_due()
    for job_id in lost.filter(updated_at__lt=cutoff).values_list("pk", flat=True):
        send_dispatch(str(job_id))
    return len(ids)


def run_once(*, notifications: bool = True) -> dict[str, Any]:
    """Everything the Celery beat + worker do, once, inline: sync every cluster, run a cycle,
    dispatch what it admitted, send due notifications (unless the caller sends them in a
    thread of its own, as gpuq_worker does). For the embedded mode and for debugging without
    Celery."""
    from .snapshot import run_cycle

    synced = 0
    for cluster in clusters_to_sync():
        try:
            sync_cluster(cluster.pk)
            synced += 1
        except BackendError as exc:
            log.warning("sync of %s failed: %s", cluster.name, exc.message)
        except Exception as exc:
            # Our bug, or a backend's answer no parser expected: the other clusters and the
            # cycle still run, and the cluster page says what failed.
            log.exception("sync of %s failed", cluster.name)
            Cluster.objects.filter(pk=cluster.pk).update(
                last_sync_error=f"{type(exc).__name__}: {exc}"[:1000]
            )
    summary = run_cycle()
    admitted = [str(pk) for pk in Job.objects.filter(state=S.ADMITTED).values_list("pk", flat=True)]
    for job_id in admitted + retries_due_now(timezone.now()):
        try:
            dispatch_job(str(job_id))
        except BackendError as exc:
            log.warning("dispatch of %s will be retried: %s", job_id, exc.message)
    summary["synced"] = synced
    if notifications:
        summary["notifications"] = deliver_due()
    return summary
