"""Emails about jobs (a spec's `notify`, as Slurm's --mail-type): what to tell, and delivery.

`on_transition` runs inside `services.transition`'s transaction and stores what the move
tells of as a Notification (an outbox row), so a rolled-back move sends nothing. `deliver`
sends one after commit (Celery's send_notification, or the embedded loop's `deliver_due`),
claiming it by a conditional UPDATE with a lease: two workers never send it twice, and one
that dies mid-send leaves a lease that runs out, then it is sent again (at least once). A
mail server that refuses is retried with backoff, then given up with an event on the job.

An array's start and end are told once, for the whole array (as Slurm does): the first task
to start, and the last to end with the counts of all."""

from __future__ import annotations

import copy
import logging
import smtplib
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from .models import Job, JobArray, JobEvent, JobRun, Notification
from .spec import duration_text

log = logging.getLogger(__name__)
S = Job.State
N = Notification.State
# Ends that count as failures for `fail` (Slurm's FAIL includes a node failure and, here, a
# time limit; a cancel is not a failure).
FAILED_ENDS = frozenset({S.FAILED, S.TIMEOUT, S.LOST, S.PREEMPTED})
RUN_STATES = frozenset({S.RUNNING, *Job.STOPPING})
MAX_ATTEMPTS = 8
LEASE = timedelta(minutes=5)  # longer than a send can take (EMAIL_TIMEOUT per call)
DUE_BATCH = 100


def on_transition(job: Job, frm: str, to: str, message: str, fields: dict[str, Any]) -> None:
    """Store the email `job`'s move frm -> to asks for, if any (inside the move's
    transaction). A fault here is logged and costs the email, never the move."""
    wanted = job.spec.get("notify") if isinstance(job.spec, dict) else None
    if not wanted:
        return
    event = _event(frm, to, wanted, in_array=job.array_id is not None)
    if event is None or not job.user.email:  # an address removed since the submit
        return
    after = copy.copy(job)  # the job as the move leaves it, for the text
    after.state = to
    for key, value in fields.items():
        setattr(after, key, value)
    try:
        with transaction.atomic():
            made = _compose(after, event, message)
            if made is None:
                return
            event, subject, body = made
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


def _event(frm: str, to: str, wanted: list[str], *, in_array: bool) -> str | None:
    if to == S.RUNNING and frm not in RUN_STATES:
        return "start" if "start" in wanted else None
    if to in Job.TERMINAL:
        if in_array:  # whether the array failed is known only at its last end
            return "end" if {"end", "fail"} & set(wanted) else None
        if to in FAILED_ENDS and "fail" in wanted:
            return "fail"
        return "end" if "end" in wanted else None
    if to == S.PENDING and frm in RUN_STATES:
        return "requeue" if "requeue" in wanted else None
    return None


def _compose(job: Job, event: str, message: str) -> tuple[str, str, str] | None:
    """(event, subject, body), or None when an array's other tasks tell it (or will)."""
    if job.array_id is not None and event != "requeue":
        return _compose_array(job, event)
    subject = f"[gpuq] {job.display_name} {_what(job, event)}"
    lines = [f"Job {job.display_name} ({job.pk}) {_what(job, event)}."]
    if message:
        lines.append(f"Why: {message}")
    lines += ["", *_facts(job), "", *_links(job), "", _because(job)]
    return event, subject, "\n".join(lines) + "\n"


def _compose_array(job: Job, event: str) -> tuple[str, str, str] | None:
    # One at a time per array: two tasks ending together must not both think the other
    # still runs (or both think they are the last).
    array = JobArray.objects.select_for_update().get(pk=job.array_id)
    tasks = Job.objects.filter(array=array)
    if event == "start":
        if JobRun.objects.filter(job__array=array).exclude(job=job).exists():
            return None
        what = f"started: task {job.array_index} first, of {array.size}"
    else:
        if tasks.exclude(state__in=Job.TERMINAL).exclude(pk=job.pk).exists():
            return None  # the last task to end tells
        states = Counter(tasks.exclude(pk=job.pk).values_list("state", flat=True))
        states[job.state] += 1
        failed = any(state in FAILED_ENDS for state in states)
        wanted = job.spec.get("notify", ())
        event = "fail" if failed and "fail" in wanted else "end"
        if event not in wanted:
            return None  # only `fail` was asked for, and nothing failed
        what = "ended: " + ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    name = f"{array.name}[{array.indices}]"
    subject = f"[gpuq] array {name} {what}"
    lines = [f"Array {name} ({array.pk}) of {array.size} tasks {what}.", ""]
    lines += [*_facts(job), "", *_links(job, array), "", _because(job)]
    return event, subject, "\n".join(lines) + "\n"


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


def _because(job: Job) -> str:
    asked = ", ".join(job.spec.get("notify", ()))
    return f"You get this because the job's spec says notify: [{asked}]."


def _when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# --- delivery -------------------------------------------------------------------------------


def deliver(notification_id: int, now: datetime | None = None) -> str:
    """Send one notification if it is due and nobody else holds it: "sent", "retry" (the
    mail server refused; tried again later), "failed" (given up) or "skipped"."""
    now = now or timezone.now()
    claimed = Notification.objects.filter(
        pk=notification_id, state__in=(N.PENDING, N.SENDING), next_attempt_at__lte=now
    ).update(state=N.SENDING, attempts=F("attempts") + 1, next_attempt_at=now + LEASE)
    if claimed != 1:
        return "skipped"
    note = Notification.objects.select_related("job").get(pk=notification_id)
    mine = Notification.objects.filter(pk=note.pk, state=N.SENDING, attempts=note.attempts)
    try:
        EmailMessage(note.subject, note.body, settings.DEFAULT_FROM_EMAIL, [note.to]).send()
    except (OSError, smtplib.SMTPException) as exc:
        error = _error_text(exc)
        if note.attempts < MAX_ATTEMPTS:
            backoff = timedelta(seconds=min(30 * 2 ** (note.attempts - 1), 3600))
            mine.update(state=N.PENDING, next_attempt_at=now + backoff, error=error)
            return "retry"
        with transaction.atomic():
            if mine.update(state=N.FAILED, error=error) == 1:
                JobEvent.objects.create(
                    job=note.job,
                    code="notify_failed",
                    message=f"could not email {note.to} after {note.attempts} attempts: {error}",
                    details={"event": note.event},
                )
        return "failed"
    mine.update(state=N.SENT, sent_at=timezone.now(), error="")
    return "sent"


def _error_text(exc: Exception) -> str:
    if isinstance(exc, smtplib.SMTPResponseException):
        said = (
            exc.smtp_error.decode(errors="replace")
            if isinstance(exc.smtp_error, bytes)
            else exc.smtp_error
        )
        return f"the mail server answered {exc.smtp_code} {said}"[:1000]
    return f"{type(exc).__name__}: {exc}"[:1000]


def deliver_due(now: datetime | None = None) -> dict[str, int]:
    """Send what is due (new, to be retried, or held by a lease that ran out): the embedded
    loop calls this every round, and Celery beat every minute for what a lost task left."""
    now = now or timezone.now()
    due = Notification.objects.filter(
        state__in=(N.PENDING, N.SENDING), next_attempt_at__lte=now
    ).order_by("next_attempt_at", "id")
    counts: Counter[str] = Counter()
    for pk in list(due.values_list("pk", flat=True)[:DUE_BATCH]):
        counts[deliver(pk, now)] += 1
    return dict(counts)
