"""Emails about jobs (a spec's `notify`, as Slurm's --mail-type): what to tell, and delivery.

`on_transition` runs inside `services.transition`'s transaction and stores what the move
tells of as a Notification (an outbox row), so a rolled-back move sends nothing. `deliver`
sends one after commit (Celery's send_notification, or the embedded worker's mail thread via
`deliver_due`), claiming it by a conditional UPDATE with a lease: two senders never send it
twice, and one that dies mid-send leaves a lease that runs out, then it is sent again (at
least once). A refusing or unreachable mail server is retried with backoff for about a day,
then given up with an event on the job; a mail that can never be sent (a bad address) at once.

An array's start and end are told once, for the whole array (as Slurm does), as the array's
`notify` (JobArray.notify, as submitted) asks: after the move of a task commits, `tell_array`
looks whether it was the first to start or whether every task has ended, and stores the
notice under a unique key, so that of two tasks ending together one tells. No array row is
locked in a move's transaction: the cycle moves many jobs in one transaction, and a lock
taken in the middle of it would deadlock with a user's move. That the look is owed is stored
in the move's transaction (an ArrayLook row, which the look removes): a process that dies
after the commit, or a look that fails, leaves the row, and `tell_missed_arrays`, run before
each delivery, looks again under the same key. Requeues
are told per task, and so is every move of a task whose `notify` was changed on that task
alone (in what it asks of starts and ends: a task that differs from its array only in
`requeue` is told of those once, with the array)."""

from __future__ import annotations

import copy
import logging
import smtplib
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.mail import EmailMessage
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from .models import ArrayLook, Job, JobArray, JobEvent, Notification
from .spec import duration_text

log = logging.getLogger(__name__)
S = Job.State
N = Notification.State
# Ends that count as failures for `fail` (Slurm's FAIL includes a node failure and, here, a
# time limit; a cancel is not a failure).
FAILED_ENDS = frozenset({S.FAILED, S.TIMEOUT, S.LOST, S.PREEMPTED})
# 30 s doubling to an hour between tries: about a day in all before giving up.
MAX_ATTEMPTS = 30
MAX_BACKOFF_S = 3600
LEASE = timedelta(minutes=5)  # longer than a send can take (EMAIL_TIMEOUT per call)
DUE_BATCH = 100
# What is told per task even in an array (the array's start and end are told once for it).
PER_TASK = frozenset({"requeue"})
# A look after commit that keeps failing is retried by each sweep for this long.
ARRAY_LOOK_GIVE_UP = timedelta(days=1)
ARRAY_LOOK_BATCH = 500


def on_transition(
    job: Job, frm: str, to: str, message: str, fields: dict[str, Any], code: str
) -> None:
    """Store the email `job`'s move frm -> to asks for, if any (inside the move's
    transaction); an array's start and end are looked at after the move commits. A fault
    here is logged and costs the email, never the move."""
    wanted = list(job.spec.get("notify") or ()) if isinstance(job.spec, dict) else []
    starts_or_ends = to in Job.TERMINAL or (to == S.RUNNING and frm not in Job.RUNNING_STATES)
    if job.array_id is not None and starts_or_ends:
        shared = _array_notify(job)
        event = _event(frm, to, code, shared, in_array=True)
        if event is not None:
            _look_after_commit(job, event)
        if set(wanted) - PER_TASK == set(shared) - PER_TASK:
            # The array's own setting for starts and ends (requeues are told per task, so a
            # task asking for them differently still is): its start and end are told for the
            # array, once.
            wanted = [e for e in wanted if e in PER_TASK]
        # Otherwise it was changed on this task alone (as the job page offers): this task's
        # moves are told as a lone job's, besides what the array's setting tells.
    if not wanted:
        return
    event = _event(frm, to, code, wanted, in_array=False)
    if event is None:
        return
    if not job.user.email:  # an address removed since the submit
        return
    after = copy.copy(job)  # the job as the move leaves it, for the text
    after.state = to
    for key, value in fields.items():
        setattr(after, key, value)
    try:
        with transaction.atomic():
            subject, body = _compose(after, event, message)
            row = Notification.objects.create(
                job=job,
                event=event,
                to=job.user.email,
                subject=subject[:255],
                body=body,
                next_attempt_at=timezone.now(),
            )
    except Exception:
        log.exception("job %s: the %s notification could not be stored", job.pk, event)
        return
    if settings.CELERY_BROKER_URL:
        from .tasks import send_notification

        # robust: a broker that is down must not fail the committed move; beat's
        # deliver_notifications sends it later.
        transaction.on_commit(lambda: send_notification.delay(row.pk), robust=True)


def _look_after_commit(job: Job, event: str) -> None:
    """Store that the array's notice may be due (durable, in the move's transaction), and
    look after commit; the look removes the row, or the sweep does it later."""
    try:
        with transaction.atomic():
            look = ArrayLook.objects.create(array_id=job.array_id, job_id=job.pk, event=event)
    except Exception:
        log.exception(
            "job %s: the look for its array's %s notice could not be stored", job.pk, event
        )
        return
    array_id, job_id, pk = job.array_id, job.pk, look.pk

    def look_now() -> None:
        tell_array(array_id, job_id, event)
        ArrayLook.objects.filter(pk=pk).delete()

    transaction.on_commit(look_now, robust=True)


def _array_notify(job: Job) -> list[str]:
    if Job.array.is_cached(job) and job.array is not None:
        return list(job.array.notify or ())
    found = JobArray.objects.filter(pk=job.array_id).values_list("notify", flat=True).first()
    return list(found or ())


def _event(frm: str, to: str, code: str, wanted: list[str], *, in_array: bool) -> str | None:
    if to == S.RUNNING and frm not in Job.RUNNING_STATES:
        return "start" if "start" in wanted else None
    if to in Job.TERMINAL:
        if in_array:  # whether the array failed is known only at its last end
            return "end" if {"end", "fail"} & set(wanted) else None
        if to in FAILED_ENDS and "fail" in wanted:
            return "fail"
        return "end" if "end" in wanted else None
    # A requeue by its code (`requeued_<cause>`: dispatch._end_or_requeue), from running or from
    # the cluster's queue alike; a resume or a placement undone also goes back to pending.
    if to == S.PENDING and code.startswith("requeued_"):
        return "requeue" if "requeue" in wanted else None
    return None


def _compose(job: Job, event: str, message: str) -> tuple[str, str]:
    subject = f"[gpuq] {job.display_name} {_what(job, event)}"
    lines = [f"Job {job.display_name} ({job.pk}) {_what(job, event)}."]
    if message and message != job.state:  # "succeeded" says nothing the first line does not
        lines.append(f"Why: {message}")
    lines += ["", *_facts(job), "", *_links(job), "", _because(job)]
    return subject, "\n".join(lines) + "\n"


def tell_array(array_id: Any, job_id: Any, event: str) -> str | None:
    """After a task's start or end committed: store the array's start notice if none exists,
    or its end notice if every task has ended; the event stored, or None. A unique key per
    array and kind makes it once, whichever task gets there first."""
    tasks = Job.objects.filter(array=array_id)
    # Most tasks are neither the first to start nor the last to end: one query says so.
    if event != "start" and tasks.exclude(state__in=Job.TERMINAL).exists():
        return None  # the last task to end tells
    kind = "start" if event == "start" else "end"
    key = f"array:{array_id}:{kind}"
    if Notification.objects.filter(dedupe_key=key).exists():
        return None
    job = Job.objects.select_related("array", "user", "team", "cluster").get(pk=job_id)
    array = job.array
    if array is None or not job.user.email:
        return None
    if event == "start":
        what = f"started: task {job.array_index} first, of {array.size}"
    else:
        states = Counter(tasks.values_list("state", flat=True))
        wanted = array.notify or ()
        event = "fail" if "fail" in wanted and FAILED_ENDS & states.keys() else "end"
        if event not in wanted:
            return None  # only `fail` was asked for, and nothing failed
        what = "ended: " + ", ".join(f"{n} {st}" for st, n in sorted(states.items()))
    name = f"{array.name}[{array.indices}]"
    subject = f"[gpuq] array {name} {what}"
    lines = [f"Array {name} ({array.pk}) of {array.size} tasks {what}.", ""]
    lines += [*_facts(job), "", *_links(job, array), "", _because(job, array)]
    try:
        with transaction.atomic():
            row = Notification.objects.create(
                job=job,
                event=event,
                to=job.user.email,
                subject=subject[:255],
                body="\n".join(lines) + "\n",
                next_attempt_at=timezone.now(),
                dedupe_key=key,
            )
    except IntegrityError:
        return None  # another task told it
    if settings.CELERY_BROKER_URL:
        from .tasks import send_notification

        try:
            send_notification.delay(row.pk)
        except Exception:  # beat's deliver_notifications sends it later
            log.warning("could not enqueue notification %s", row.pk, exc_info=True)
    return event


def tell_missed_arrays(now: datetime | None = None) -> int:
    """Do the looks after commit that never ran or failed: each ArrayLook row left (stored in
    its move's transaction, removed by the look) is looked at again by `tell_array`, whose
    unique key makes the notice once, whoever else looks at the same time. A row whose look
    keeps failing is given up after ARRAY_LOOK_GIVE_UP. The number of notices stored."""
    give_up = (now or timezone.now()) - ARRAY_LOOK_GIVE_UP
    stored = 0
    looks = list(
        ArrayLook.objects.order_by("id").values_list(
            "pk", "array_id", "job_id", "event", "created_at"
        )[:ARRAY_LOOK_BATCH]
    )
    done = []
    for pk, array_id, job_id, event, created_at in looks:
        try:
            stored += tell_array(array_id, job_id, event) is not None
        except Exception:  # one array's fault must not keep the others untold
            log.exception("array %s: its %s notice could not be stored", array_id, event)
            if created_at >= give_up:
                continue
        done.append(pk)
    ArrayLook.objects.filter(pk__in=done).delete()
    return stored


def _what(job: Job, event: str) -> str:
    if event == "start":
        nodes = ", ".join(dict.fromkeys(str(p.get("node", "?")) for p in job.placement or []))
        where = f"{job.cluster}: {nodes}" if job.cluster_id is not None else nodes
        return f"started on {where}" if nodes else "started"
    if event == "requeue":
        return "was requeued"
    if job.exit_code is not None and job.state in (S.FAILED, S.SUCCEEDED):
        return f"{job.state} (exit code {job.exit_code})"
    return str(job.state)


def _facts(job: Job) -> list[str]:
    out = [f"Team: {job.team.slug}   Priority: {job.spec.get('priority', '')}"]
    if job.cluster_id is not None:
        out[0] += f"   Cluster: {job.cluster}"
    for label, at in (
        ("Submitted", job.submitted_at),
        ("Started", job.started_at),
        ("Ended", job.finished_at),
    ):
        if at is not None:
            out.append(f"{label + ':':<11}{_when(at)}")
    if job.started_at is not None and job.finished_at is not None:
        ran = int((job.finished_at - job.started_at).total_seconds())
        out[-1] += f" (ran {duration_text(ran) or '0s'})"
    return out


def _links(job: Job, array: JobArray | None = None) -> list[str]:
    out = [f"Its page: {settings.GPUQ_PUBLIC_URL}/jobs/{job.pk}/"]
    if array is not None:
        out.append(f"Its tasks: gpuq ls --array {array.pk}")
    else:
        out.append(f"Its output: gpuq logs {job.pk}")
    return out


def _because(job: Job, array: JobArray | None = None) -> str:
    if array is not None:
        return f"You get this because the array's spec says notify: [{', '.join(array.notify)}]."
    asked = ", ".join(job.spec.get("notify", ()))
    return f"You get this because the job's spec says notify: [{asked}]."


def _when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# --- delivery -------------------------------------------------------------------------------


def deliver(notification_id: int, now: datetime | None = None) -> str:
    """Send one notification if it is due and nobody else holds it: "sent", "retry" (the
    mail server refused; tried again later), "unreachable" (the same, but no server
    answered), "failed" (given up, or a mail that can never go) or "skipped". `now`: a fixed
    clock, for tests."""
    claimed_at = now or timezone.now()
    claimed = Notification.objects.filter(
        pk=notification_id,
        state__in=(N.PENDING, N.SENDING),
        next_attempt_at__lte=claimed_at,
        attempts__lt=MAX_ATTEMPTS,
    ).update(state=N.SENDING, attempts=F("attempts") + 1, next_attempt_at=claimed_at + LEASE)
    if claimed != 1:
        _give_up_if_spent(notification_id, claimed_at)
        return "skipped"
    note = Notification.objects.select_related("job__user").get(pk=notification_id)
    mine = Notification.objects.filter(pk=note.pk, state=N.SENDING, attempts=note.attempts)
    to = note.job.user.email  # the address now: one changed since the move is the one read
    if not to:
        return _give_up(note, mine, f"{note.job.user} has no email address now")
    try:
        EmailMessage(note.subject, note.body, settings.DEFAULT_FROM_EMAIL, [to]).send()
    except (OSError, smtplib.SMTPException) as exc:
        error = _error_text(exc)
        if note.attempts >= MAX_ATTEMPTS:
            return _give_up(note, mine, error)
        _retry_later(note, mine, error, to, now)
        return "unreachable" if _unreachable(exc) else "retry"
    except SoftTimeLimitExceeded:
        # The worker's time ran out in the send (a mail server slow to answer): the mail
        # may still go, later; the task ends as its limit says.
        if note.attempts >= MAX_ATTEMPTS:
            _give_up(note, mine, "the send ran out of time")
        else:
            _retry_later(note, mine, "the send ran out of time", to, now)
        raise
    except Exception as exc:  # e.g. a malformed GPUQ_EMAIL_FROM: no retry would send it
        log.exception("notification %s cannot be sent", note.pk)
        return _give_up(note, mine, _error_text(exc))
    mine.update(state=N.SENT, sent_at=timezone.now(), error="", to=to)
    return "sent"


def _retry_later(note: Notification, mine: Any, error: str, to: str, now: datetime | None) -> None:
    backoff = min(30 * 2 ** (note.attempts - 1), MAX_BACKOFF_S)
    retry_at = (now or timezone.now()) + timedelta(seconds=backoff)
    mine.update(state=N.PENDING, next_attempt_at=retry_at, error=error, to=to)


def _unreachable(exc: Exception) -> bool:
    """No mail server answered (the rest of a batch would wait the same timeout each, so it
    stops there), as opposed to one that answered no. SMTPException is an OSError too."""
    if isinstance(exc, smtplib.SMTPServerDisconnected | smtplib.SMTPConnectError):
        return True
    return isinstance(exc, OSError) and not isinstance(exc, smtplib.SMTPException)


def _give_up(note: Notification, mine: Any, error: str) -> str:
    with transaction.atomic():
        if mine.update(state=N.FAILED, error=error) == 1:
            JobEvent.objects.create(
                job=note.job,
                code="notify_failed",
                message=f"could not email {note.to} after {note.attempts} attempts: {error}",
                details={"event": note.event},
            )
    return "failed"


def _give_up_if_spent(notification_id: int, now: datetime) -> None:
    """A row whose last allowed try was claimed by a sender that died: given up."""
    spent = Notification.objects.filter(
        pk=notification_id, state=N.SENDING, next_attempt_at__lte=now, attempts__gte=MAX_ATTEMPTS
    )
    note = spent.select_related("job").first()
    if note is not None:
        _give_up(note, spent, note.error or "its last try did not finish")


def _error_text(exc: Exception) -> str:
    if isinstance(exc, smtplib.SMTPResponseException):
        said = exc.smtp_error
        text = said.decode(errors="replace") if isinstance(said, bytes) else str(said)
        return f"the mail server answered {exc.smtp_code} {text}"[:1000]
    return f"{type(exc).__name__}: {exc}"[:1000]


def deliver_due(now: datetime | None = None, budget_s: float | None = None) -> dict[str, int]:
    """Send what is due (new, to be retried, or held by a lease that ran out), for at most
    `budget_s` seconds of starting sends, and not past a mail server that cannot be reached
    (the rest would each wait its timeout): the embedded worker's mail thread calls this
    every round, and Celery beat every minute for what a lost task left. First, the looks
    after commit for arrays' notices that were lost are done (tell_missed_arrays), and what
    they store is sent with the rest."""
    started = time.monotonic()
    counts: Counter[str] = Counter()
    try:
        if missed := tell_missed_arrays(now):
            counts["array_notices_stored"] = missed
    except Exception:  # the sweep's fault must not stop the sending
        log.exception("the sweep for arrays' lost notices failed")
    due = Notification.objects.filter(
        state__in=(N.PENDING, N.SENDING), next_attempt_at__lte=now or timezone.now()
    ).order_by("next_attempt_at", "id")
    for pk in list(due.values_list("pk", flat=True)[:DUE_BATCH]):
        if budget_s is not None and time.monotonic() - started > budget_s:
            break
        try:
            outcome = deliver(pk, now)
        except Exception:  # one row's fault must not stop the others (or the caller)
            log.exception("notification %s: delivery failed", pk)
            outcome = "error"
        counts[outcome] += 1
        if outcome == "unreachable":
            break
    return dict(counts)
