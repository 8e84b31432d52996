"""Submit, follow and cancel a job."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST
from rest_framework.exceptions import ValidationError

from frontend import forms
from frontend.logtail import CHUNK, TAIL, decode_chunk, line_start
from queue_service.api.serializers import ArrayLimitSerializer
from queue_service.backends import BackendError
from queue_service.clusters.models import Cluster, Node
from queue_service.clusters.services import gpu_layouts
from queue_service.echoes import Echoes, strings
from queue_service.jobs import services as job_services
from queue_service.jobs.dispatch import MAX_LOG_OFFSET, log_size, read_logs
from queue_service.jobs.models import Job, JobArray, Notification, PriorityClass
from queue_service.jobs.reports import array_states, mig_choices, quota_share
from queue_service.jobs.spec import (
    JobSpecSerializer,
    YamlError,
    duration_text,
    load_yaml_spec,
    yaml_field_lines,
)

from ..templatetags.gpuq import index_ranges
from .common import permission_as_403, signed_in, visible_job

STREAMS = ("stdout", "stderr")
LOG_FRAGMENT = "frontend/fragments/job_log.html"
DOWNLOAD_CHUNK = 1024 * 1024
DOWNLOAD_CUT = (
    "\n[gpuq: download incomplete: the cluster did not return the log after byte {offset}:"
    " {error}]\n"
)
ARRAY_LIST_LIMIT = 100  # tasks listed on a task's page: a 1000-task array stays a short page
# While a job waits, its priority and time limit may change (jobs.services.update_job).
UPDATABLE_STATES = (Job.State.PENDING, Job.State.SUSPENDED)
# /submit/?from=<task>&again=unsucceeded: a copy as an array of the tasks that did not succeed.
AGAIN_UNSUCCEEDED = "unsucceeded"
# The timeline's latest events (a long dispatch retry logs thousands; each poll draws them).
TIMELINE_SHOWN = 50
NOTIFICATIONS_SHOWN = 10  # the job's latest emails (notify), newest last


# --- job detail --------------------------------------------------------------------------------


@signed_in
@require_GET
def job_detail(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    return _job_page(request, visible_job(request.user, pk))


def _job_page(
    request: HttpRequest,
    job: Job,
    values: dict[str, str] | None = None,
    errors: dict[str, list[str]] | None = None,
) -> HttpResponse:
    """The job page; after a refused update, with what was typed and the messages at their
    inputs."""
    stream = _stream(request)
    context = {
        **_live_context(request, job, values, errors),
        "stream": stream,
        "streams": STREAMS,
        # The last 10 earlier attempts' logs, each a download of its own (`attempt=` any).
        "earlier_attempts": range(max(1, job.attempts - 10), job.attempts),
    }
    if job.array_id is not None:
        context.update(_array_context(request, job))
    return render(request, "frontend/job.html", context, status=400 if errors else 200)


@signed_in
@require_GET
def job_live(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    """The polled part of the job page: state, reason, timeline, placement, backend."""
    job = visible_job(request.user, pk)
    return render(request, "frontend/fragments/job_live.html", _live_context(request, job))


@signed_in
@require_GET
def job_array(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    """The polled summary of a task's array: its tasks by state, and the first of them."""
    job = visible_job(request.user, pk)
    if job.array_id is None:
        raise Http404("not a task of an array")
    context = {
        "job": job,
        "can_manage": job_services.can_manage(request.user, job),
        **_update_form(job),
        **_array_context(request, job),
    }
    return render(request, "frontend/fragments/job_array.html", context)


def _array_context(request: HttpRequest, job: Job) -> dict[str, Any]:
    """Three queries whatever the array's size: the count per state, the first tasks, and
    the indices of those that ended otherwise than succeeded."""
    tasks = Job.objects.for_user(request.user).filter(array_id=job.array_id)
    counts = dict(tasks.order_by().values_list("state").annotate(n=Count("id")))
    listed = list(
        tasks.order_by("array_index").only("id", "name", "array_index", "state")[:ARRAY_LIST_LIMIT]
    )
    total = sum(counts.values())
    again = _unsucceeded(request, job)
    return {
        # Shown cut as squeue cuts it: the link asks the submit page to list them all. The
        # array's limit holds for the rerun as for the first run.
        "array_again": index_ranges(again)
        + (f"%{job.array.max_running}" if again and job.array.max_running else ""),
        "array_again_count": len(again),
        "array": job.array,
        "array_counts": [(Job.State(s), counts[s]) for s in Job.State.values if s in counts],
        "array_tasks": listed,
        "array_more": total - len(listed),
        "array_finished": all(s in Job.TERMINAL for s in counts),
    }


def _unsucceeded(request: HttpRequest, job: Job) -> list[int]:
    """The indices of the tasks of `job`'s array that ended otherwise than succeeded."""
    ended = Job.TERMINAL - {Job.State.SUCCEEDED}
    tasks = Job.objects.for_user(request.user).filter(array_id=job.array_id, state__in=ended)
    return list(tasks.order_by("array_index").values_list("array_index", flat=True))


def _again_array(request: HttpRequest, job: Job) -> str | None:
    """For "Resubmit the N that did not succeed": those indices as an array, under the array's
    own limit; computed here, since a URL listing a stepped 1000-task array's indices is
    longer than the production server takes (gunicorn's request line: 4094 bytes)."""
    if job.array_id is None:
        return None
    again = _unsucceeded(request, job)
    if not again:
        return None
    return _under_array_limit(job, index_ranges(again, max_chars=0))


def _under_array_limit(job: Job, indices: str) -> str:
    """`indices` under the limit of `job`'s array, unless they give their own (as the API's
    resubmit does)."""
    limit = job.array.max_running if job.array_id is not None else None
    return f"{indices}%{limit}" if limit and "%" not in indices else indices


def _stream(request: HttpRequest) -> str:
    stream = request.GET.get("stream", "stdout")
    return stream if stream in STREAMS else "stdout"


def _live_context(
    request: HttpRequest,
    job: Job,
    values: dict[str, str] | None = None,
    errors: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    can_manage = job_services.can_manage(request.user, job)
    can_update = can_manage and job.state in UPDATABLE_STATES
    owner = job.user  # select_related by visible_job: the form's help costs no query
    after = job.spec.get("after") or []
    visible = Job.objects.for_user(request.user).in_bulk([uuid.UUID(a) for a in after])
    arrays: dict[str, tuple[str, str, str]] = {}
    if missing := [a for a in after if uuid.UUID(a) not in visible]:  # an array's id?
        seen = JobArray.objects.for_user(request.user).filter(pk__in=missing).values_list("id")
        arrays = array_states([str(pk) for (pk,) in seen])
    notify = job.spec.get("notify") or []
    notifications: list[Notification] = []
    if notify:  # one query, and only for a job that asked for email
        latest = job.notifications.order_by("-created_at", "-id")[:NOTIFICATIONS_SHOWN]
        notifications = list(latest)[::-1]
    # The latest events, oldest first: a count only when there are more than are shown.
    latest = list(job.events.order_by("-at", "-id")[: TIMELINE_SHOWN + 1])
    earlier = job.events.count() - TIMELINE_SHOWN if len(latest) > TIMELINE_SHOWN else 0
    return {
        # The jobs (or arrays) it runs after, with their state where this viewer may see them.
        "after": [(a, visible.get(uuid.UUID(a)), arrays.get(a)) for a in after],
        "job": job,
        # A waiting slice job's share by the models it could run on (a range where they differ).
        "quota_share": quota_share(job),
        "events": latest[:TIMELINE_SHOWN][::-1],
        "events_earlier": earlier,
        # Whom it emails (the owner's address: only the job's team sees this page).
        "notify": notify,
        "notifications": notifications,
        # A job's last email is stored as it ends and sent just after: keep polling for its
        # first try (not through a refusing server's hours of backoff).
        "notify_waiting": any(
            n.state == Notification.State.SENDING
            or (n.state == Notification.State.PENDING and n.attempts == 0)
            for n in notifications
        ),
        "can_manage": can_manage,
        "can_suspend": can_manage and job.state in Job.SUSPENDABLE,
        "can_resume": can_manage and job.state == Job.State.SUSPENDED,
        "can_update": can_update,
        # What it emails about may change until it ends (jobs.services.update_job).
        "can_notify": can_manage and not job.is_terminal,
        "notify_choices": forms.NOTIFY_CHOICES,
        "viewer_is_owner": owner.pk == request.user.pk,
        "priority_names": (
            list(PriorityClass.objects.values_list("name", flat=True)) if can_update else []
        ),
        **_update_form(job, values, errors),
    }


def _update_shown(job: Job) -> dict[str, str]:
    """The values the update forms show: the job's own."""
    limit = job.array.max_running if job.array_id is not None else None
    return {
        "priority": job.priority_class.name,
        "time_limit": duration_text(job.spec.get("time_limit")),
        "max_running": "" if limit is None else str(limit),
        "notify": ", ".join(job.spec.get("notify") or ()),  # the boxes ticked
    }


def _update_form(
    job: Job,
    values: dict[str, str] | None = None,
    errors: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    shown = _update_shown(job)
    return {
        "update_shown": shown,
        "update_values": {**shown, **(values or {})},
        "update_errors": errors or {},
        "time_limit_help": _time_limit_help(),
    }


def _time_limit_help() -> str:
    return (
        f"default {duration_text(settings.GPUQ_DEFAULT_TIME_LIMIT_S)}, at most"
        f" {duration_text(settings.GPUQ_MAX_TIME_LIMIT_S)}; e.g. 90m, 6h, 02:00:00"
    )


@signed_in
@require_GET
def job_log(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    """The next piece of a log from a byte offset into an attempt's output; the response
    carries the poller that asks for the piece after it (at once while catching up, else every
    few seconds until the job has ended and its log is read out; more slowly once an attempt's
    log has ended, for the next attempt's)."""
    job = visible_job(request.user, pk)
    stream = _stream(request)
    offset = _number(request.GET.get("offset"), 0, MAX_LOG_OFFSET) or 0
    # Which attempt the offset is into: absent on the page's first ask (then the current one).
    carried = _number(request.GET.get("attempt"), 0, 2**31)
    context: dict[str, Any] = {
        "job": job,
        "stream": stream,
        "offset": offset,
        "attempt": job.attempts if carried is None else min(carried, job.attempts),
        "eof": False,
    }
    attempt, start, new_attempt, gone = context["attempt"], offset, False, []
    # Which log of the attempt the offset is into (LogChunk.source, the API's log_id): a
    # container restarted in its pod starts a new one in the same attempt.
    source = request.GET.get("log", "")[:MAX_LOG_SOURCE]
    context["source"] = source
    restarted, size = False, None
    try:
        if carried is None and offset == 0 and job.is_terminal:
            # A finished job's long log is shown from near its end (where its backend can
            # tell its length without reading it), not caught up on from its first byte.
            size = log_size(job, stream=stream, attempt=attempt)
            start = max(0, (size or 0) - TAIL)
        chunk = read_logs(job, offset=start, limit=CHUNK, stream=stream, attempt=attempt)
        if start and size is not None:  # from the first whole line
            cut = line_start(chunk.data)
            chunk, start = dataclasses.replace(chunk, data=chunk.data[cut:]), start + cut
        # An attempt read to its end is followed by the next (a requeue or resume runs one
        # with an output of its own) from its first byte once the cluster has named it
        # (until then the place is kept): what an attempt wrote last, often why it
        # stopped, is shown before the next attempt's.
        while (
            attempt < job.attempts
            and not chunk.data
            and (attempt + 1 < job.attempts or job.external_id or job.is_terminal)
        ):
            if chunk.gone:
                gone.append(attempt)
            attempt, start, source = attempt + 1, 0, ""
            new_attempt = new_attempt or attempt > 1
            chunk = read_logs(job, offset=0, limit=CHUNK, stream=stream, attempt=attempt)
        if source and chunk.source and chunk.source != source and not new_attempt:
            restarted, start = True, 0
            chunk = read_logs(job, offset=0, limit=CHUNK, stream=stream, attempt=attempt)
    except BackendError as exc:  # the cluster did not answer: say so, and ask again later
        return render(request, LOG_FRAGMENT, {**context, "error": exc.message})
    piece = decode_chunk(chunk.data, start, final=chunk.eof)
    # An attempt that has ended (the job did, or a later attempt began) is at its end,
    # whatever the backend says, once a read gives no whole character more: what is left
    # (a character cut by a killed write) is all there will be.
    ended = job.is_terminal or attempt < job.attempts
    attempt_over = chunk.eof or (ended and piece.next_offset == start)
    if attempt_over and not chunk.eof:
        piece = decode_chunk(chunk.data, start, final=True)
    # `eof` is the attempt's: one a preemption, a node failure or a suspend ended is followed
    # by the next attempt's, until the job itself has ended.
    end = attempt_over and job.is_terminal and attempt >= job.attempts
    # Nothing read of an attempt that has not begun: not "0 bytes so far" of a running one.
    not_started = (
        job.state in NOT_STARTED and not attempt_over and piece.next_offset == 0 and not gone
    )
    context.update(
        not_started=not_started,
        ran_before=not_started and job.runs.exists(),
        text=piece.text,
        offset=piece.next_offset,
        attempt=attempt,
        new_attempt=new_attempt,
        gone=gone,
        skipped=start if size is not None else 0,
        size=size,
        restarted=restarted,
        source=chunk.source or source,
        eof=end,
        attempt_over=attempt_over,
        # A later attempt's output is read at once.
        catching_up=len(chunk.data) >= CHUNK or (attempt_over and attempt < job.attempts),
    )
    return render(request, LOG_FRAGMENT, context)


MAX_LOG_SOURCE = 512  # a log's name as the poller carries it (a pod uid and a restart count)
# States in which the job's current attempt has not started running (or never will have);
# a suspended job's next attempt starts once it is resumed (one held at submit never ran).
NOT_STARTED = frozenset(
    {
        Job.State.PENDING,
        Job.State.ADMITTED,
        Job.State.DISPATCHING,
        Job.State.QUEUED,
        Job.State.SUSPENDED,
    }
)


def _number(text: str | None, low: int, high: int) -> int | None:
    """A query parameter as a whole number clamped to [low, high]; None if absent or not one."""
    try:
        return min(max(int(text or ""), low), high)
    except ValueError:
        return None


@signed_in
@require_GET
def job_log_download(request: HttpRequest, pk: uuid.UUID) -> HttpResponse | StreamingHttpResponse:
    job = visible_job(request.user, pk)
    stream = _stream(request)
    # One attempt's log (`attempt=`; by default the latest): each attempt's starts at byte 0.
    asked = _number(request.GET.get("attempt"), 0, job.attempts)
    attempt = job.attempts if asked is None else asked

    try:
        first = read_logs(job, offset=0, limit=DOWNLOAD_CHUNK, stream=stream, attempt=attempt)
    except BackendError as exc:
        return HttpResponse(
            f"The cluster did not return the log: {exc.message}\n",
            status=502,
            content_type="text/plain; charset=utf-8",
        )

    def chunks() -> Iterator[bytes]:
        chunk = first
        while chunk.data:
            yield chunk.data
            if chunk.eof:
                return
            try:
                chunk = read_logs(
                    job,
                    offset=chunk.next_offset,
                    limit=DOWNLOAD_CHUNK,
                    stream=stream,
                    attempt=attempt,
                )
            except BackendError as exc:
                # The answer has begun (200): the file itself says that it is cut short.
                yield DOWNLOAD_CUT.format(offset=chunk.next_offset, error=exc.message).encode()
                return

    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", job.display_name).strip("-.")[:60] or "job"
    response = StreamingHttpResponse(chunks(), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = (
        f'attachment; filename="{slug}-{str(job.pk)[:8]}'
        f'{"" if asked is None else f"-attempt{attempt}"}-{stream}.log"'
    )
    return response


@signed_in
def job_cancel(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    """GET asks for confirmation; POST cancels."""
    job = visible_job(request.user, pk)
    if request.method != "POST":
        return render(
            request,
            "frontend/job_cancel.html",
            {"job": job, "can_manage": job_services.can_manage(request.user, job)},
        )
    was = job.state
    with permission_as_403():
        try:
            job = job_services.cancel_job(request.user, job)
        except job_services.JobConflict as exc:
            messages.error(request, f"Not cancelled: {exc}.")
        else:
            messages.success(request, _outcome(job, was, "cancel"))
    return redirect("job", pk=job.pk)


# What became of a job a cancel or a suspend was asked of (the state it was read in, and the
# one the service left it in): done at once, under way on its cluster, or asked already.
OUTCOMES = {
    "cancel": (Job.State.CANCELLED, Job.State.CANCELLING, "Cancelled", "Cancelling", "cancelled"),
    "suspend": (Job.State.SUSPENDED, Job.State.SUSPENDING, "Suspended", "Suspending", "suspended"),
}


def _outcome(job: Job, was: str, verb: str) -> str:
    done, going, did, doing, past = OUTCOMES[verb]
    name = job.display_name
    if was == done:
        return f"{name} is already {past}."
    if was == going and job.state == going:
        return f"{name} is already being {past}."
    if job.state == going:
        return f"{doing} {name}: its cluster stops it, after a grace period to checkpoint."
    return f"{did} {name}."


@signed_in
@require_POST
def job_suspend(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    return _change(request, pk, job_services.suspend_job, "suspend", "Not suspended")


@signed_in
@require_POST
def job_resume(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    return _change(request, pk, job_services.resume_job, "Resumed", "Not resumed")


@signed_in
@require_POST
def job_update(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    """Change a waiting job's priority or time limit (only the inputs changed on the form), what
    it emails about until it ends (the "Email me when it" boxes, only if ticked otherwise than
    when the page was drawn), or its array's limit of tasks at once (`max_running`, empty for
    none) whatever its state."""
    job = visible_job(request.user, pk)
    if not job_services.can_manage(request.user, job):  # before any of the form is read
        raise PermissionDenied("only the job's owner or a team admin can update it")
    changes = forms.update_changes(request.POST, _update_shown(job))
    before = _settings(job)
    try:
        if "max_running" in request.POST:
            limit = ArrayLimitSerializer(
                data={"max_running": request.POST["max_running"].strip() or None}
            )
            limit.is_valid(raise_exception=True)
            changes["array"] = {"max_running": limit.validated_data["max_running"]}
        if changes:
            with permission_as_403():
                job = job_services.update_job(request.user, job, changes)
    except ValidationError as exc:
        typed = {
            k: request.POST[k]
            for k in ("priority", "time_limit", "max_running")
            if k in request.POST
        }
        if forms.NOTIFY_FORM in request.POST:  # the boxes as ticked
            typed["notify"] = ", ".join(forms.ticked(request.POST, "notify"))
        errors = forms.update_errors(exc.detail, array=job.array_id is not None)
        return _job_page(request, job, typed, errors)
    except job_services.JobConflict as exc:
        messages.error(request, f"Not updated: {exc}.")
    else:
        if _settings(job) == before:
            messages.info(request, f"Nothing changed: {job.display_name} already had those values.")
        else:
            messages.success(request, f"Updated {job.display_name}.")
    return redirect("job", pk=job.pk)


def _settings(job: Job) -> tuple[Any, ...]:
    """What update_job may change (the array's limit as now stored)."""
    limit = None
    if job.array_id is not None:
        limit = JobArray.objects.filter(pk=job.array_id).values_list("max_running", flat=True)[0]
    return (job.priority_class_id, job.spec.get("time_limit"), job.spec.get("notify"), limit)


def _change(
    request: HttpRequest, pk: uuid.UUID, change: Any, done: str, refused: str
) -> HttpResponse:
    """Suspend or resume: no confirmation page, since either can be undone by the other.
    `done` is the message of a change made ("Resumed"), or the verb of OUTCOMES to tell it."""
    job = visible_job(request.user, pk)
    was = job.state
    with permission_as_403():
        try:
            job = change(request.user, job)
        except job_services.JobConflict as exc:
            messages.error(request, f"{refused}: {exc}.")
        else:
            text = _outcome(job, was, done) if done in OUTCOMES else f"{done} {job.display_name}."
            messages.success(request, text)
    return redirect("job", pk=job.pk)


# --- submit ----------------------------------------------------------------------------------


@signed_in
def submit(request: HttpRequest) -> HttpResponse:
    """The form (training or agent job) or pasted YAML. Errors come from the API's own
    validation; a valid job is stored by submit_job and the page moves to it."""
    mode = "yaml" if (request.POST or request.GET).get("mode") == "yaml" else "form"
    context = _submit_context(request, mode)
    # A copy of another job: prefilled from it, and named in the new job's first event.
    source = (request.POST or request.GET).get("from")
    if source:
        context["copied_from"] = visible_job(request.user, source)
    if request.method != "POST":
        if source:
            data = job_services.copy_data(context["copied_from"])
            if request.GET.get("again") == AGAIN_UNSUCCEEDED:
                array = _again_array(request, context["copied_from"])
                if array is not None:
                    data["array"] = context["copy_array"] = array
                    context["copy_again"] = AGAIN_UNSUCCEEDED
            elif request.GET.get("array"):  # indices asked for by hand
                array = _under_array_limit(context["copied_from"], request.GET["array"])
                data["array"] = context["copy_array"] = array
            context["values"] = forms.spec_to_form(data)
            context["yaml_text"] = forms.spec_to_yaml(data)
            # A copy the form cannot hold opens as YAML, so that it is not changed unseen;
            # the Form tab (mode=form) still opens the form, saying what it would change.
            context["form_changes"] = forms.form_changes(data, _offered(context))
            if context["form_changes"] and "mode" not in request.GET:
                context["mode"] = "yaml"
        return render(request, "frontend/submit.html", context)

    if mode == "yaml":
        text = request.POST.get("yaml", "")
        context["yaml_text"] = text
        pasted: dict[str, Any] = {}
        try:
            pasted = load_yaml_spec(text)
            job = _submit(request, pasted, context.get("copied_from"))
        except YamlError as exc:
            syntax = (exc.line, _cut_echoes(str(exc), {}))
            listing, loose = forms.yaml_listing(text, None, {}, syntax)
        except ValidationError as exc:
            detail = _cut_echoes(exc.detail, pasted)
            listing, loose = forms.yaml_listing(text, detail, yaml_field_lines(text), None)
        except job_services.JobConflict as exc:  # nothing stored; the text stays to resend
            listing, loose = forms.yaml_listing(text, None, {}, (None, str(exc)))
            context.update(yaml_listing=listing, yaml_loose=loose)
            return render(request, "frontend/submit.html", context, status=409)
        else:
            return _submitted(request, job)
        context.update(yaml_listing=listing, yaml_loose=loose)
        return render(request, "frontend/submit.html", context, status=400)

    parsed = forms.form_to_spec(request.POST)
    context["values"] = forms.form_values(request.POST)
    if parsed.errors:
        # Nothing is stored; the API's messages for the other fields are shown as well.
        serializer = JobSpecSerializer(data=parsed.data)
        serializer.is_valid()
        detail = _cut_echoes(serializer.errors, parsed.data)
        context["errors"] = {**forms.form_errors(detail), **parsed.errors}
        return render(request, "frontend/submit.html", context, status=400)
    try:
        job = _submit(request, parsed.data, context.get("copied_from"))
    except ValidationError as exc:
        context["errors"] = forms.form_errors(_cut_echoes(exc.detail, parsed.data))
        return render(request, "frontend/submit.html", context, status=400)
    except job_services.JobConflict as exc:  # nothing stored; the form stays filled in
        context["errors"] = {forms.NON_FIELD: [str(exc)]}
        return render(request, "frontend/submit.html", context, status=409)
    return _submitted(request, job)


def _cut_echoes(detail: Any, sent: dict[str, Any]) -> Any:
    """A refused spec's messages with what they repeat of it (`sent`: the form's values or
    the pasted YAML, as the serializer read them) cut as the API's answers are: a megabyte
    pasted is not a megabyte of messages. A YAML error's, read from no parsed values, is
    cut as a whole, as the API's parse error is."""
    return Echoes(strings(sent)).cut(detail)


def _submitted(request: HttpRequest, job: Job) -> HttpResponse:
    """To the job's page; for an array, its first task's."""
    if job.array_id is None:
        messages.success(request, f"Submitted {job.name}.")
    else:
        size = job.array.size
        messages.success(
            request,
            f"Submitted the array {job.name}: {size} task{'s' if size != 1 else ''}, each a job"
            f" of its own. This is the first, {job.display_name}.",
        )
    return redirect("job", pk=job.pk)


def _submit(request: HttpRequest, data: dict[str, Any], copy_of: Job | None) -> Job:
    """A double-clicked submit sends the same form twice: the idempotency key (the form's
    token plus the spec) makes that one job, while an edited resubmit is a new one."""
    token = request.POST.get("form_token", "")[:40]
    key = None
    if token:
        text = json.dumps(_jsonable(data), sort_keys=True, default=str)
        key = f"ui-{token}-{hashlib.sha256(text.encode()).hexdigest()[:32]}"
    return job_services.submit_job(request.user, data, idempotency_key=key, copy_of=copy_of).job


def _jsonable(value: Any) -> Any:
    """Pasted YAML may hold what JSON cannot (a number key beside text keys, a set, a date):
    made digestible here, since only the API's validation may refuse it (a 400, not a 500)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, set | frozenset):  # in an order that is the same in every process
        return sorted(repr(v) for v in value)
    return value


@signed_in
@require_POST
def submit_preview(request: HttpRequest) -> HttpResponse:
    """Would this job start now, and if not why and when? Nothing is stored."""
    context: dict[str, Any] = {}
    data: dict[str, Any] = {}
    try:
        if request.POST.get("mode") == "yaml":
            data = load_yaml_spec(request.POST.get("yaml", ""))
            problems: dict[str, list[str]] = {}
        else:
            parsed = forms.form_to_spec(request.POST)
            data, problems = parsed.data, parsed.errors
            if not data.get("name") and not data.get("command"):
                return render(request, "frontend/fragments/preview.html", {"blank": True})
        if problems:
            context["problems"] = forms.form_errors(problems)
        else:
            context["preview"] = job_services.preview_submit(request.user, data)
            context["array"] = data.get("array") not in (None, "")
    except YamlError as exc:
        context["problems"] = {"yaml": [_cut_echoes(str(exc), {})]}
    except ValidationError as exc:
        context["problems"] = forms.flatten_errors(_cut_echoes(exc.detail, data))
    return render(request, "frontend/fragments/preview.html", context)


def _offered(context: dict[str, Any]) -> dict[str, list[str]]:
    """The values the form's pickers offer now (forms.PICKERS)."""
    return {
        "team": context["team_slugs"],
        "gpu_model": context["gpu_models"],
        "mig_profile": [c.profile for c in context["mig"]],
        "priority": context["priority_names"],
        "cluster": context["cluster_names"],
    }


def _submit_context(request: HttpRequest, mode: str) -> dict[str, Any]:
    clusters = list(Cluster.objects.filter(enabled=True))
    teams = job_services.member_teams(request.user)  # the teams one may submit for
    return {
        "mode": mode,
        "values": {"kind": "training", "nodes": "1", "gpus_per_node": "1", "priority": "normal"},
        "errors": {},
        "yaml_text": EXAMPLE_YAML,
        "teams": teams,
        "team_slugs": [t.slug for t in teams],
        "cluster_names": [c.name for c in clusters],
        "gpu_models": sorted(
            set(Node.objects.filter(cluster__in=clusters).values_list("gpu_model", flat=True))
        ),
        "priority_names": list(PriorityClass.objects.values_list("name", flat=True)),
        "notify_choices": forms.NOTIFY_CHOICES,
        "mig": mig_choices(gpu_layouts(clusters, request.user)),
        "form_token": uuid.uuid4().hex,
        "default_time_limit": forms.duration_text(settings.GPUQ_DEFAULT_TIME_LIMIT_S),
        "time_limit_help": f"default {forms.duration_text(settings.GPUQ_DEFAULT_TIME_LIMIT_S)}, "
        f"at most {forms.duration_text(settings.GPUQ_MAX_TIME_LIMIT_S)}; e.g. 90m, 6h, 02:00:00",
    }


EXAMPLE_YAML = """\
name: finetune-llama
kind: training
image: nvcr.io/nvidia/pytorch:24.05-py3
command: ["python", "train.py", "--epochs", "3"]
nodes: 1
gpus_per_node: 4
time_limit: 6h
priority: normal
retries:
  max: 2
checkpoint:
  dir: /checkpoints/finetune-llama
  interval: 30m
"""
