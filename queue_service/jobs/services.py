"""The only writers of jobs: submit, cancel, and every state transition.

Each transition is a conditional UPDATE (`filter(pk=..., state=OLD).update(...)`) that must
hit one row, plus a JobEvent; a transition that loses a race raises StaleState and changes
nothing, so two workers can never both move a job."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, QuerySet
from django.utils import timezone
from rest_framework.exceptions import PermissionDenied, ValidationError

from queue_service.clusters.models import Cluster
from queue_service.tenancy.models import Membership, Team
from queue_service.tenancy.services import site_sends_no_email
from scheduler.reasons import gpus_text

from . import notify
from .models import Job, JobArray, JobEvent, JobRun, PriorityClass, SchedulerLock
from .reports import GONE, array_states
from .spec import MAX_ARRAY_TEXT, ArraySpec, JobSpecSerializer, duration_text, parse_array

log = logging.getLogger(__name__)
S = Job.State
# The reason code of a running job its cluster put back to wait (dispatch._apply_status), and
# what its run ended by.
CLUSTER_HOLDS = "cluster_holds"

ALLOWED: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.ADMITTED, S.CANCELLED, S.FAILED, S.SUSPENDED}),
    S.ADMITTED: frozenset({S.DISPATCHING, S.PENDING, S.CANCELLED, S.FAILED, S.SUSPENDED}),
    # A job the cluster named but that was never recorded queued (its worker died between the
    # two writes) is followed by the sync: it may end there without having run.
    S.DISPATCHING: frozenset(
        {S.QUEUED, S.RUNNING, S.ADMITTED, S.PENDING, S.FAILED}
        | {S.CANCELLING, S.CANCELLED, S.SUSPENDING, S.TIMEOUT, S.LOST}
    ),
    S.QUEUED: frozenset(
        {S.RUNNING, S.PENDING, S.CANCELLING, S.PREEMPTING, S.SUSPENDING}
        | {S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMEOUT, S.LOST}
    ),
    S.RUNNING: frozenset(
        {S.PENDING, S.CANCELLING, S.PREEMPTING, S.SUSPENDING}
        | {S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMEOUT, S.LOST, S.PREEMPTED}
    ),
    S.PREEMPTING: frozenset(
        {S.PENDING, S.PREEMPTED, S.CANCELLING, S.SUSPENDING}
        | {S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMEOUT, S.LOST}
    ),
    S.CANCELLING: frozenset({S.CANCELLED, S.SUCCEEDED, S.FAILED, S.TIMEOUT, S.LOST}),
    S.SUSPENDING: frozenset(
        {S.SUSPENDED, S.CANCELLING, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMEOUT, S.LOST}
    ),
    S.SUSPENDED: frozenset({S.PENDING, S.CANCELLED}),
}
for _terminal in Job.TERMINAL:
    ALLOWED[_terminal] = frozenset()


class StaleState(Exception):
    """The job was not in the expected state: another worker moved it first."""


class JobConflict(Exception):
    """The request does not fit the job's state (e.g. cancelling a finished job)."""


def transition(
    job: Job,
    to: str,
    *,
    code: str = "",
    message: str = "",
    details: dict[str, Any] | None = None,
    expect: dict[str, Any] | None = None,
    **fields: Any,
) -> Job:
    """Move `job` from its current state to `to`, with `fields` updated in the same UPDATE;
    only while the row also still has the values in `expect` (e.g. the attempt a poll
    answered for), else StaleState."""
    frm = job.state
    if to not in ALLOWED[frm]:
        raise ValueError(f"job {job.id}: {frm} -> {to} is not a valid transition")
    now = timezone.now()
    fields.setdefault("updated_at", now)
    if to in Job.STOPPING and frm not in Job.STOPPING:
        fields.setdefault("stopping_since", now)
    elif frm in Job.STOPPING and to not in Job.STOPPING:
        fields.setdefault("stopping_since", None)
    if to in Job.TERMINAL:
        fields.setdefault("finished_at", now)
        fields.setdefault("queue_position", None)
        fields.setdefault("estimated_start", None)
    # Counted in the move's own UPDATE, so the count is the job's events to preempting.
    counted = {"preemptions": F("preemptions") + 1} if to == S.PREEMPTING else {}
    with transaction.atomic():
        hit = Job.objects.filter(pk=job.pk, state=frm, **(expect or {})).update(
            state=to, **fields, **counted
        )
        if hit != 1:
            raise StaleState(f"job {job.id} is no longer {frm}")
        if counted:
            # The row's count, not the expression: a later save() must not add it again.
            job.preemptions = Job.objects.values_list("preemptions", flat=True).get(pk=job.pk)
        JobEvent.objects.create(
            job=job, from_state=frm, to_state=to, code=code, message=message, details=details or {}
        )
        _record_run(job, frm, to, now, fields)
        notify.on_transition(job, frm, to, message, fields, code)
    job.state = to
    for key, value in fields.items():
        setattr(job, key, value)
    return job


def _record_run(job: Job, frm: str, to: str, now: Any, fields: dict[str, Any]) -> None:
    """A run starts when a job enters running and ends when it leaves the running states."""
    if to == S.RUNNING and frm not in Job.RUNNING_STATES:
        _open_run(job, fields.get("started_at") or now)
    elif frm in Job.RUNNING_STATES and to not in Job.RUNNING_STATES:
        JobRun.objects.filter(job=job, ended_at__isnull=True).update(ended_at=now, ended_by=to)


def _open_run(job: Job, started_at: Any) -> None:
    """The run of the job's current attempt, charged from `started_at` (its GPUs as placed)."""
    JobRun.objects.create(
        job=job,
        attempt=max(job.attempts, 1),
        team_id=job.team_id,
        user_id=job.user_id,
        cluster_id=job.cluster_id,
        external_id=job.external_id,
        gpus=job.gpus,
        gpu_model=job.gpu_model,
        placement=job.placement,
        started_at=started_at,
    )


def hold_run(job: Job, as_read: QuerySet[Job], now: datetime, *, said: str, **fields: Any) -> bool:
    """The cluster put a running job back to wait while holding it (Kueue's eviction, Slurm's
    requeue): it stays running, `fields` saying so, but its run ends now, so its team is not
    charged for the wait; the timeline says so once, in the cluster's words (`said`). Only
    while the job is still as read (`as_read` hits its row); True if it was."""
    with transaction.atomic():
        if as_read.update(**fields) != 1:
            return False
        ended = JobRun.objects.filter(job=job, ended_at__isnull=True).update(
            ended_at=now, ended_by=CLUSTER_HOLDS
        )
        if ended:
            note(
                job,
                CLUSTER_HOLDS,
                f"the cluster holds it waiting: {said}; its run ends (the wait is not charged)",
                {"attempt": max(job.attempts, 1)},
            )
    return True


def rerun_held(job: Job, as_read: QuerySet[Job], now: datetime, **fields: Any) -> bool:
    """A job the cluster held waiting runs again: a new run of the same attempt is charged from
    now, and the timeline says so. Once (its row locked: two syncs that see it at once open
    one run); True if this call found it still as read."""
    with transaction.atomic():
        if not list(as_read.select_for_update().values_list("pk")):
            return False
        as_read.update(**fields)
        if not job.runs.filter(ended_at__isnull=True).exists():
            _open_run(job, now)
            note(
                job,
                "cluster_runs_again",
                "the cluster runs it again: a new run of the same attempt counts from now",
                {"attempt": max(job.attempts, 1)},
            )
    return True


def record_unseen_run(job: Job, started_at: datetime) -> bool:
    """Open the run of a job that no sync saw running since it was handed over or its cluster
    held it waiting (being stopped, or held), once its cluster tells it ran (seen running now,
    or an end only a run leaves): it is charged from `started_at` like any other run, and its
    run ends with the job's move out of the running states. Only while it has no open run and
    is still where it was read (its row locked: a sync and a stop that learn it at once open
    one run). True if it opened one."""
    attempt = max(job.attempts, 1)
    with transaction.atomic():
        same = Job.objects.select_for_update().filter(
            pk=job.pk, state=job.state, attempts=job.attempts
        )
        if (
            not list(same.values_list("pk"))
            or job.runs.filter(attempt=attempt, ended_at__isnull=True).exists()
        ):
            return False
        held = job.runs.filter(attempt=attempt).exists()
        _open_run(job, started_at)
        if not held:  # a held job keeps its first start
            # Not updated_at: the stop's clock (overdue) runs on.
            same.update(started_at=started_at)
        note(
            job,
            "ran_unseen",
            (
                "it ran again on the cluster after it was held waiting (no sync saw it running):"
                " its run counts from when it was last seen waiting"
            )
            if held
            else (
                "it had started on the cluster before it was asked to stop (no sync saw it"
                " running): its run counts from when it was handed over or last seen waiting"
            ),
            {"attempt": attempt, "started_at": started_at.isoformat()},
        )
    if not held:
        job.started_at = started_at
    return True


# Notes a retry writes again and again while a cluster stays down (Celery retries a submit
# every minute; the embedded sync resumes a stale one, then it fails again; the sync sends a
# stop the cluster fails or refuses again): a repeat of one of the job's last two events,
# with only such notes after it, is counted on it, not added.
FOLDED_NOTES = frozenset({"dispatch_retry", "dispatch_resumed", "stop_retry", "stop_failed"})
# A stop's failure repeated is counted across the events of the stops sent again in between
# (`stop_sent`, whose own repeats dispatch._note_stop counts on one event): each failure
# follows the send it reports.
FOLDED_ACROSS: dict[str, frozenset[str]] = {
    "stop_retry": frozenset({"stop_sent"}),
    "stop_failed": frozenset({"stop_sent"}),
}


def note(job: Job, code: str, message: str, details: dict[str, Any] | None = None) -> None:
    """An event without a transition (e.g. a transient dispatch error that will be retried).
    A repeat, for the codes in FOLDED_NOTES, becomes `repeats` and `last_at` in the details of
    the event it repeats."""
    details = details or {}
    if code not in FOLDED_NOTES:
        JobEvent.objects.create(job=job, code=code, message=message, details=details)
        return
    with transaction.atomic():
        # The job's row lock serializes read-then-fold-or-insert: concurrent repeats, one event.
        list(Job.objects.select_for_update().filter(pk=job.pk).values_list("pk"))
        if not _fold(job, code, message, details):
            JobEvent.objects.create(job=job, code=code, message=message, details=details)


def _fold(job: Job, code: str, message: str, details: dict[str, Any]) -> bool:
    """Count a note on the event it repeats, if there is one (see FOLDED_NOTES); the caller
    holds the job's row lock. True if it was counted."""
    across = FOLDED_ACROSS.get(code, frozenset())
    latest = job.events.order_by("-at", "-id").only("id", "code", "message", "details")
    seen = 0
    for last in latest[:6]:
        if last.code in across:
            continue
        if last.code not in FOLDED_NOTES or seen == 2:
            return False
        seen += 1
        if last.code != code or last.message != message:
            continue
        before = last.details or {}
        repeated = {
            **before,
            **details,
            "repeats": int(before.get("repeats", 1)) + 1,
            "last_at": timezone.now().isoformat(),
        }
        return bool(JobEvent.objects.filter(pk=last.pk).update(details=repeated))
    return False


# --- submit ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Submitted:
    job: Job
    created: bool


def member_teams(user: Any) -> list[Team]:
    return list(Team.objects.filter(memberships__user=user).order_by("slug"))


def resolve_team(user: Any, slug: str | None) -> Team:
    teams = member_teams(user)
    if slug is None:
        if len(teams) == 1:
            return teams[0]
        if not teams:
            raise ValidationError({"team": ["you are not a member of any team"]})
        raise ValidationError(
            {
                "team": [
                    f"you belong to several teams; name one of: {', '.join(t.slug for t in teams)}"
                ]
            }
        )
    for team in teams:
        if team.slug == slug:
            return team
    raise ValidationError({"team": [f"you are not a member of team {slug!r}"]})


def _keep_membership(user: Any, team: Team) -> None:
    """Lock the user's membership of the team until the job is stored: a removal of the
    member (tenancy.services.remove_member, which locks it too and refuses while the member
    has jobs) then either sees the job or is seen by this submit, never neither."""
    if not Membership.objects.select_for_update().filter(team=team, user=user).exists():
        raise ValidationError({"team": [f"you are not a member of team {team.slug!r}"]})


def requested_gpus(spec: dict[str, Any], gpu_model: str | None) -> float:
    if spec.get("mig_profile"):
        from scheduler.mig import gpu_fraction

        return gpu_fraction(gpu_model or "", spec["mig_profile"])  # unknown model: /7
    return float(spec["nodes"] * spec["gpus_per_node"])


def submit_job(
    user: Any,
    data: dict[str, Any],
    *,
    idempotency_key: str | None = None,
    copy_of: Job | None = None,
    request: Any = None,
) -> Submitted:
    """Validate and store a job; the next scheduling cycle considers it.

    With an idempotency key, a repeat of the same request returns the first job, and another
    request under the key is a conflict (as Stripe's keys: a client must not think a new
    job was stored). `request`: what identifies the request, when not `data` (a resubmit's
    original and indices). `copy_of`: the job this one was copied from, named in its first
    event."""
    fingerprint = ""
    if idempotency_key is not None:
        if len(idempotency_key) > 128 or not idempotency_key.isprintable():
            raise ValidationError({"Idempotency-Key": ["at most 128 printable characters"]})
        fingerprint = _fingerprint(data if request is None else request)
        existing = _keyed(user, idempotency_key)
        if existing is not None:
            return _replayed(existing, fingerprint)
    serializer = JobSpecSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    spec = dict(serializer.validated_data)
    team = resolve_team(user, spec.pop("team"))
    cluster = enabled_cluster(spec.pop("cluster"))
    check_after(user, spec.get("after", ()))
    check_notify(user, spec)
    array: ArraySpec | None = spec.pop("array", None)
    fields: dict[str, Any] = {
        "team": team,
        "user": user,
        "name": spec["name"],
        "kind": spec["kind"],
        "priority_class": PriorityClass.objects.get(name=spec["priority"]),
        "gpus": requested_gpus(spec, spec.get("gpu_model")),
        "cluster": cluster,
        "pinned_cluster": cluster is not None,
        "idempotency_fingerprint": fingerprint,
    }
    if spec.get("hold"):
        fields.update(state=S.SUSPENDED, reason=held_reason(user, at_submit=True))
    else:
        fields["reason"] = {"code": "new", "message": "waiting for the next scheduling cycle"}
    message, details = f"submitted by {user}", {}
    if copy_of is not None:
        message += f" as a copy of job {copy_of.pk}"
        details = {"copy_of": str(copy_of.pk)}
    try:
        with transaction.atomic():
            _keep_membership(user, team)
            if array is None:
                jobs = [Job.objects.create(spec=spec, idempotency_key=idempotency_key, **fields)]
            else:
                jobs = _create_tasks(array, spec, fields, idempotency_key)
            JobEvent.objects.bulk_create(
                JobEvent(
                    job=job,
                    to_state=job.state,
                    code="submitted",
                    message=message
                    if job.array_index is None
                    else f"{message}: index {job.array_index} of an array of {len(jobs)} tasks",
                    details=details
                    if job.array_id is None
                    else {**details, "array": str(job.array_id), "index": job.array_index},
                )
                for job in jobs
            )
            job = jobs[0]
    except IntegrityError:
        # The same key raced in from a parallel request: that one won; return it. Without a
        # key (or none found), something the job refers to changed meanwhile: nothing was
        # stored, and the client is told so rather than handed another job.
        existing = None if idempotency_key is None else _keyed(user, idempotency_key)
        if existing is None:
            raise JobConflict(
                "the job was not stored: something it refers to (its team or cluster) changed"
                " meanwhile; submit it again"
            ) from None
        return _replayed(existing, fingerprint)
    request_cycle()
    return Submitted(job, created=True)


def _replayed(existing: Job, fingerprint: str) -> Submitted:
    """The job a key was first used for, if this request is that one again (a job stored
    before fingerprints were kept has none: taken as the same)."""
    if existing.idempotency_fingerprint not in ("", fingerprint):
        raise JobConflict(
            f"this Idempotency-Key was used for another request (job {existing.pk});"
            " use a new key for a new job"
        )
    return Submitted(existing, created=False)


def _fingerprint(request: Any) -> str:
    """A request's hash, as sent (before validation: a repeat is the same bytes' meaning)."""
    text = json.dumps(_canonical(request), default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _canonical(value: Any) -> Any:
    """`value` with each mapping as its items sorted by key's repr: a YAML document's keys
    may be numbers beside strings, which json's sort_keys cannot order."""
    if isinstance(value, dict):
        return sorted([repr(k), _canonical(v)] for k, v in value.items())
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, set | frozenset):
        # repr of a set follows string hashing, which differs between server processes.
        return sorted((_canonical(v) for v in value), key=repr)
    return value


def _keyed(user: Any, idempotency_key: str) -> Job | None:
    """The user's job submitted under this key, if they can still see it."""
    existing = Job.objects.filter(user=user, idempotency_key=idempotency_key).first()
    if existing is not None and not Job.objects.for_user(user).filter(pk=existing.pk).exists():
        raise JobConflict("this Idempotency-Key was used for a job you can no longer see")
    return existing


def _create_tasks(
    array: ArraySpec, spec: dict[str, Any], fields: dict[str, Any], idempotency_key: str | None
) -> list[Job]:
    """One job per index, each with its own index as its spec's `array` (a copy of one task
    is that task again); the first carries the idempotency key, so a repeat returns it."""
    group = JobArray.objects.create(
        team=fields["team"],
        user=fields["user"],
        name=fields["name"],
        notify=list(spec.get("notify") or ()),
        indices=array.text,
        size=len(array.indices),
        max_running=array.max_running,
    )
    return Job.objects.bulk_create(
        Job(
            spec={**spec, "array": str(index)},
            array=group,
            array_index=index,
            idempotency_key=idempotency_key if n == 0 else None,
            **fields,
        )
        for n, index in enumerate(array.indices)
    )


def check_after(user: Any, after: Any) -> None:
    """Each job a new one is to run after must be one the user can see, and must not have
    ended otherwise than by succeeding (then it never could). An array's id stands for all
    its tasks (Slurm's afterok on an array job)."""
    if not after:
        return
    jobs = dict(Job.objects.for_user(user).filter(pk__in=after).values_list("id", "state"))
    found = {str(pk): (state, f"job {pk}") for pk, state in jobs.items()}
    if missing := [dep for dep in after if dep not in found]:
        visible = JobArray.objects.for_user(user).filter(pk__in=missing).values_list("id")
        for array_id, (state, task, _) in array_states([str(pk) for (pk,) in visible]).items():
            found[array_id] = (state, f"array {array_id}: its task {task}")
    problems = []
    for dep in after:
        if dep not in found:
            problems.append(f"no job {dep} among those you can see")
            continue
        state, what = found[dep]
        if state == GONE:
            problems.append(f"array {dep} has lost a task (deleted): it can never succeed")
        elif state in Job.TERMINAL and state != S.SUCCEEDED:
            problems.append(f"{what} ended {state}: it can never succeed")
    if problems:
        raise ValidationError({"after": problems})


def check_notify(user: Any, spec: dict[str, Any], *, by: Any = None) -> None:
    """`notify` needs a mail server and an address of `user`'s (the job's owner; `by`: who
    asks, when someone else)."""
    if not spec.get("notify"):
        return
    if site_sends_no_email():
        raise ValidationError({"notify": ["this site sends no email (GPUQ_SMTP_URL is not set)"]})
    if not user.email and by is not None and by.pk != user.pk:
        raise ValidationError({"notify": [f"{user} has no email address to write to"]})
    if not user.email:
        raise ValidationError(
            {
                "notify": [
                    "your account has no email address to write to: set one on your account page"
                ]
            }
        )


def copy_data(job: Job) -> dict[str, Any]:
    """What submitting a copy of `job` sends: its spec, its team, and its cluster if the user
    had pinned one."""
    data = {**job.spec, "team": job.team.slug}
    if job.pinned_cluster and job.cluster is not None:
        data["cluster"] = job.cluster.name
    return data


def resubmit_job(
    user: Any, job: Job, *, idempotency_key: str | None = None, array: str | None = None
) -> Submitted:
    """Submit a copy of `job` as `user` (as `sbatch` of the same script again): validated
    anew, since its priority class or cluster may have gone, and only into a team the user
    belongs to. `array`: as an array of these indices instead (as `sbatch --array=3,17` of
    an array's failed tasks)."""
    data = copy_data(job)
    if array is not None:
        try:  # checked as given, before the original's limit is added to it
            parse_array(array, int(settings.GPUQ_MAX_ARRAY_TASKS))
        except ValueError as exc:
            raise ValidationError({"array": [str(exc)]}) from None
        limit = job.array.max_running if job.array is not None else None
        # The original's limit holds for the copy, unless the copy gives its own.
        if limit is not None and "%" not in array:
            if len(array) + len(f"%{limit}") > MAX_ARRAY_TEXT:
                most = MAX_ARRAY_TEXT - len(f"%{limit}")
                raise ValidationError(
                    {"array": [f"at most {most} characters, with the original's %{limit} added"]}
                )
            array = f"{array}%{limit}"
        data["array"] = array
    asked = {"resubmit": str(job.pk), "array": array}
    return submit_job(user, data, idempotency_key=idempotency_key, copy_of=job, request=asked)


# --- cancel ---------------------------------------------------------------------------------


def can_manage(user: Any, job: Job) -> bool:
    if user.is_staff or job.user_id == user.pk:
        return True
    return Membership.objects.filter(
        user=user, team_id=job.team_id, role=Membership.Role.ADMIN
    ).exists()


CANCEL_REQUESTED = "cancel_requested"  # the event of a cancel that stops a job on its cluster


def cancelled_by(job: Job) -> str | None:
    """Who asked for the cancel that is stopping the job (its last `cancel_requested`)."""
    asked = (
        job.events.filter(code=CANCEL_REQUESTED)
        .order_by("-at", "-id")
        .values_list("details", flat=True)
        .first()
    )
    by = (asked or {}).get("by")
    return str(by) if by else None


def stopping_reason(by: str | None) -> dict[str, Any]:
    """The reason of a cancelled job its cluster is stopping: who cancelled it."""
    said = f"cancelled by {by}" if by else "cancelled on request"
    return {
        "code": CANCEL_REQUESTED,
        "message": f"{said}; it is being stopped on its cluster",
        "details": {"by": by},
    }


def cancelled_reason(job: Job, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The reason of a job its stop ended after a user cancelled it: gpuq's own code and
    words, as for a job cancelled before it reached a cluster, whatever the cluster called the
    end (kept in `details`)."""
    by = cancelled_by(job)
    message = f"cancelled by {by}" if by else "cancelled on request"
    return {"code": "cancelled", "message": message, "details": details or {}}


def cancel_job(user: Any, job: Job) -> Job:
    """Cancel a job the user owns (or administers). Not yet on a backend: cancelled at once;
    on a backend: cancelling until the backend confirms."""
    if not can_manage(user, job):
        raise PermissionDenied("only the job's owner or a team admin can cancel it")
    for _ in range(3):
        job.refresh_from_db()
        if job.state in Job.TERMINAL:
            raise JobConflict(f"the job already ended ({job.state})")
        if job.state == S.CANCELLING:
            return job
        was = job.state
        try:
            if job.state in (S.PENDING, S.ADMITTED, S.SUSPENDED):
                # Why it waited (or that it was being dispatched) no longer holds.
                return transition(
                    job,
                    S.CANCELLED,
                    code="cancelled",
                    message=f"cancelled by {user}",
                    reason={"code": "cancelled", "message": f"cancelled by {user}", "details": {}},
                )
            # What it waited for (its start on the cluster, a resume after its suspend) no
            # longer holds. One not yet named keeps its dispatch's code, by which a retry
            # claims it, and says what the cancel waits for (dispatch.say_cancel_waits).
            stopped = bool(job.external_id) or was == S.SUSPENDING
            fields = {"reason": stopping_reason(str(user))} if stopped else {}
            transition(
                job,
                S.CANCELLING,
                code=CANCEL_REQUESTED,
                message=f"cancel requested by {user}",
                details={"by": str(user)},
                **fields,
            )
        except StaleState:
            continue
        _stop_unless_stopping(job, was)
        return job
    raise JobConflict("the job is changing state; try again")


# --- update ---------------------------------------------------------------------------------

# What may change once a job is stored: while it waits, what orders and bounds it in the
# queue (as `scontrol update` of a pending job); until it ends, what it emails about (as
# MailType); at any time, its array's %N.
WHILE_WAITING = ("priority", "time_limit")
UPDATABLE = (*WHILE_WAITING, "notify")


def update_job(user: Any, job: Job, changes: dict[str, Any]) -> Job:
    """Change a job's priority class or time limit while it waits (pending or suspended), what
    it emails about (`notify`; [] for nothing) until it ends, or its array's limit of tasks
    at once (`array: {"max_running": N}`, Slurm's ArrayTaskThrottle; null for none) at any
    time. Checked as a submit would check the job with those values; the next cycle orders
    it anew. Changing nothing records nothing."""
    if not can_manage(user, job):
        raise PermissionDenied("only the job's owner or a team admin can update it")
    said: list[str] = []
    details: dict[str, Any] = {}
    with transaction.atomic():
        # The cycle decides under this lock from the pending jobs it read: waiting for it,
        # no cycle admits a job on its old spec and then dispatches the new one.
        SchedulerLock.hold()
        job.refresh_from_db()
        fields = _spec_changes(user, job, {k: changes[k] for k in UPDATABLE if k in changes}, said)
        details.update({k: [job.spec.get(k), fields["spec"].get(k)] for k in said})
        if fields:
            if job.state == S.PENDING and set(said) & set(WHILE_WAITING):
                # its position and reason were decided on the old values
                fields.update(
                    queue_position=None,
                    estimated_start=None,
                    reason={"code": "new", "message": "waiting for the next scheduling cycle"},
                )
            if (
                Job.objects.filter(pk=job.pk, state=job.state).update(
                    updated_at=timezone.now(), **fields
                )
                != 1
            ):
                raise JobConflict("the job is changing state; try again")
        if "notify" in said and job.array_id is not None:
            _follow_array_notify(job.array_id)
        if "array" in changes:
            throttle = _set_array_limit(job, changes["array"].get("max_running"))
            if throttle is not None:
                said.append("array")
                details["array_max_running"] = list(throttle)
        if said:
            note(
                job,
                "updated",
                f"updated by {user}: " + "; ".join(_change_text(k, details) for k in said),
                details,
            )
    job.refresh_from_db()
    if said:
        request_cycle()
    return job


def _spec_changes(user: Any, job: Job, wanted: dict[str, Any], said: list[str]) -> dict[str, Any]:
    """The fields to write for `wanted` spec values, validated with the rest of the job's spec
    as a submit of it would be; appends to `said` the keys that really change."""
    if not wanted:
        return {}
    if set(wanted) & set(WHILE_WAITING) and job.state not in (S.PENDING, S.SUSPENDED):
        raise JobConflict(
            "a job's priority and time limit can change only while it waits (pending or"
            f" suspended); this one is {job.state}"
        )
    if "notify" in wanted and job.state in Job.TERMINAL:
        raise JobConflict(f"the job already ended ({job.state}): nothing is left to tell")
    # `stored`: what the job already holds passed the rules of its day; a rule made since
    # refuses only what the update changes.
    serializer = JobSpecSerializer(data={**copy_data(job), **wanted}, context={"stored": job.spec})
    serializer.is_valid(raise_exception=True)
    new = {k: serializer.validated_data.get(k) for k in wanted}  # notify [] is left out
    if new.get("notify"):
        check_notify(job.user, new, by=user)
    said.extend(k for k in UPDATABLE if k in new and new[k] != job.spec.get(k))
    if not said:
        return {}
    spec = {**job.spec, **{k: new[k] for k in said}}
    if spec.get("notify") is None:
        spec.pop("notify", None)  # stored only when asked for, as at submit
    fields: dict[str, Any] = {"spec": spec}
    if "priority" in said:
        fields["priority_class"] = PriorityClass.objects.get(name=new["priority"])
    return fields


def _follow_array_notify(array_id: Any) -> None:
    """Once every task still to end asks for the same emails (`gpuq update --array --notify`
    changes them one task at a time), that is the array's setting: one notice for the
    array, not one per task, and none when all turned it off."""
    wanted = {
        frozenset((spec or {}).get("notify") or ())
        for spec in Job.objects.filter(array_id=array_id)
        .exclude(state__in=Job.TERMINAL)
        .values_list("spec", flat=True)
    }
    if len(wanted) == 1:
        (shared,) = wanted
        JobArray.objects.filter(pk=array_id).update(notify=sorted(shared))


def _set_array_limit(job: Job, limit: int | None) -> tuple[int | None, int | None] | None:
    """Set the %N of `job`'s array (at most its size, as at submit); (old, new), or None if
    that is what it already was."""
    if job.array_id is None:
        raise ValidationError({"array": ["this job is not a task of an array"]})
    array = JobArray.objects.select_for_update().get(pk=job.array_id)
    if limit is not None:
        limit = min(limit, array.size)
    if limit == array.max_running:
        return None
    indices = array.indices.split("%", 1)[0] + ("" if limit is None else f"%{limit}")
    JobArray.objects.filter(pk=array.pk).update(max_running=limit, indices=indices)
    return array.max_running, limit


def _change_text(key: str, details: dict[str, Any]) -> str:
    if key == "array":
        old, new = (
            "no limit" if n is None else f"at most {n} at once"
            for n in details["array_max_running"]
        )
        return f"its array's tasks: {new} (was {old})"
    old, new = details[key]
    if key == "notify":
        was, now = (", ".join(events or ()) or "nothing" for events in (old, new))
        return f"email on {now} (was {was})"
    if key == "time_limit":
        return f"time limit {duration_text(new)} (was {duration_text(old) or 'none'})"
    return f"priority {new} (was {old})"


# --- suspend and resume ---------------------------------------------------------------------


def suspend_job(user: Any, job: Job) -> Job:
    """Take a job out of the queue, or stop it (TERM first, so it can checkpoint) and keep it
    out, until it is resumed (as Kueue's suspend, or Slurm's hold for a pending job). It keeps
    its id, its events and its place by submit time; it holds no GPUs while suspended."""
    if not can_manage(user, job):
        raise PermissionDenied("only the job's owner or a team admin can suspend it")
    reason = held_reason(user)
    for _ in range(3):
        job.refresh_from_db()
        if job.state in Job.TERMINAL:
            raise JobConflict(f"the job already ended ({job.state})")
        if job.state in (S.SUSPENDED, S.SUSPENDING):
            return job
        if job.state == S.CANCELLING:
            raise JobConflict("the job is being cancelled")
        try:
            if job.state in (S.PENDING, S.ADMITTED):
                return transition(
                    job,
                    S.SUSPENDED,
                    code="suspended",
                    message=f"suspended by {user}",
                    reason=reason,
                    **unplaced(job),
                )
            was = job.state
            transition(
                job,
                S.SUSPENDING,
                code="suspend_requested",
                message=f"suspend requested by {user}",
                reason=reason,
            )
        except StaleState:
            continue
        _stop_unless_stopping(job, was)
        return job
    raise JobConflict("the job is changing state; try again")


def _stop_unless_stopping(job: Job, was: str) -> None:
    """Ask the backend to stop the job, unless a stop is already under way (it was being
    preempted or suspended): the first stop's end is then recorded as this request asked; a
    lost one is sent again by the sync (dispatch._stop_overdue). A job cancelled while its
    cluster has not named it says meanwhile what the cancel waits for, either way."""
    from .dispatch import request_stop, say_cancel_waits

    if was not in Job.STOPPING:
        request_stop(job)
    elif job.state == S.CANCELLING and not job.external_id:
        say_cancel_waits(job)


def held_reason(user: Any, *, at_submit: bool = False) -> dict[str, Any]:
    message = (
        f"held at submit by {user}: resume it to queue it"
        if at_submit
        else f"suspended by {user}: resume it to queue it again"
    )
    return {"code": "suspended", "message": message, "details": {}}


def resume_job(user: Any, job: Job) -> Job:
    """Put a suspended job back in the queue, where its submit time places it."""
    if not can_manage(user, job):
        raise PermissionDenied("only the job's owner or a team admin can resume it")
    job.refresh_from_db()
    if job.state != S.SUSPENDED:
        raise JobConflict(f"only a suspended job can be resumed; this one is {job.state}")
    try:
        transition(
            job,
            S.PENDING,
            code="resumed",
            message=f"resumed by {user}",
            reason={"code": "new", "message": "waiting for the next scheduling cycle"},
            **unplaced(job),
        )
    except StaleState:
        raise JobConflict("the job is changing state; try again") from None
    request_cycle()
    return job


def unplaced(job: Job) -> dict[str, Any]:
    """The fields of a job back in the queue, not yet placed anywhere (it keeps a cluster it
    was pinned to): nothing its last attempt or placement left (what its cluster said of it,
    its exit code, the GPU model and borrowing it was placed with) is said of the next."""
    return {
        "external_id": "",
        "remote_state": "",
        "exit_code": None,
        "placement": [],
        "gpu_model": "",
        "borrowed": False,
        "started_at": None,
        "admitted_at": None,
        "queue_position": None,
        "estimated_start": None,
        "cluster": job.cluster if job.pinned_cluster else None,
    }


def request_cycle() -> None:
    """Ask for a scheduling cycle soon. Coalesced: the submits of one second enqueue one
    cycle soon and, if more come, one more after the second, which reads the queue after
    the last of them (the first may have read it before). In the embedded mode the worker
    loop runs cycles by itself, so nothing is sent."""
    if not settings.CELERY_BROKER_URL:
        return

    def enqueue() -> None:
        from .tasks import schedule_cycle

        try:
            if _coalesce("gpuq:cycle-requested", ttl_s=1):
                schedule_cycle.apply_async(countdown=0.2)
            elif _coalesce("gpuq:cycle-requested-again", ttl_s=1):
                schedule_cycle.apply_async(countdown=1.0)
        except Exception:  # the periodic cycle still runs; a lost kick only delays
            log.warning("could not enqueue a scheduling cycle", exc_info=True)

    transaction.on_commit(enqueue)


def _coalesce(key: str, *, ttl_s: int) -> bool:
    import redis

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=2)
    return bool(client.set(key, "1", nx=True, ex=ttl_s))


def enabled_cluster(name: str | None) -> Cluster | None:
    """The enabled cluster a spec pins, or None when it pins none; a 400 on `cluster` else."""
    if name is None:
        return None
    cluster = Cluster.objects.filter(name=name, enabled=True).first()
    if cluster is None:
        raise ValidationError({"cluster": [f"no enabled cluster named {name!r}"]})
    return cluster


def preview_submit(user: Any, data: dict[str, Any]) -> dict[str, Any]:
    """Validate like submit_job, then ask the scheduler what would happen; stores nothing."""
    serializer = JobSpecSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    spec = dict(serializer.validated_data)
    team = resolve_team(user, spec.pop("team"))
    pinned = enabled_cluster(spec.pop("cluster"))
    cluster = pinned.name if pinned is not None else None
    check_after(user, spec.get("after", ()))
    check_notify(user, spec)
    from .snapshot import preview_job

    return as_preview(
        preview_job(team.slug, spec, pinned_cluster=cluster, priority=spec["priority"])
    )


def as_preview(result: dict[str, Any]) -> dict[str, Any]:
    """The scheduler's answer told as a preview: a reason that names what the cycle does for
    the job (a relayout for it, a preemption) says what a submit would do, since the preview
    does neither. `starts_soon`: the job waits only for that."""
    reason = result.get("reason") or {}
    code, d = reason.get("code"), reason.get("details") or {}
    if code == "mig_relayout":
        cluster, _, _ = str(d.get("node", "")).partition("/")
        kind = Cluster.objects.filter(name=cluster).values_list("kind", flat=True).first()
        takes = (
            "a few seconds"
            if kind == Cluster.Kind.LOCAL
            else "as long as the cluster's MIG manager takes; the node drains meanwhile"
        )
        message = (
            f"would start once GPU {d.get('gpu')} of node {d.get('node')} is re-laid out"
            f" for it ({takes})"
        )
    elif code == "preempting":
        if d.get("mig_profile") and "gpus" in d:
            freed = (
                f" of its team's lower classes to free {gpus_text(d['gpus'])} GPU(s) of its"
                f" quota for a {d['mig_profile']} MIG instance"
            )
        elif d.get("mig_profile"):
            freed = f" to free a {d['mig_profile']} MIG instance"
        else:
            freed = f" to free {gpus_text(d.get('gpus', 0))} GPU(s)"
        message = (
            f"would preempt {d.get('victims')} job(s){freed}, then start within their grace"
            f" of {d.get('grace_s')} s"
        )
    else:
        return {**result, "starts_soon": False}
    return {**result, "reason": {**reason, "message": message}, "starts_soon": True}
