"""Team admin: members and roles, quotas with their usage, the usage report."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from rest_framework.exceptions import ValidationError

from frontend import charts
from frontend.forms import flatten_errors
from queue_service.api.serializers import QuotaSerializer
from queue_service.clusters.models import Node
from queue_service.jobs.reports import (
    DEFAULT_DAYS,
    EARLIEST,
    MAX_DAYS,
    QuotaUsage,
    quota_usage,
    usage_csv,
    usage_report,
)
from queue_service.tenancy import services as team_services
from queue_service.tenancy.models import Membership, Quota, Team

from .common import my_teams, permission_as_403, signed_in


@signed_in
@require_GET
def teams(request: HttpRequest) -> HttpResponse:
    rows = [
        {
            "team": team,
            "admin": team_services.is_team_admin(request.user, team),
            "members": team.memberships.count(),
        }
        for team in my_teams(request.user)
    ]
    return render(request, "frontend/teams.html", {"rows": rows})


def _admin_team(request: HttpRequest, slug: str) -> Team:
    """A team the user belongs to (else 404) and administers (else 403, saying who does)."""
    team = get_object_or_404(team_services.teams_for(request.user).distinct(), slug=slug)
    if not team_services.is_team_admin(request.user, team):
        admins = ", ".join(
            team.memberships.filter(role=Membership.Role.ADMIN)
            .order_by("user__username")
            .values_list("user__username", flat=True)
        )
        raise PermissionDenied(
            f"Only admins of team {team.slug} can open its admin page; you are a member."
            + (f" Its admins: {admins}." if admins else "")
        )
    return team


@signed_in
@require_GET
def team_admin(request: HttpRequest, slug: str) -> HttpResponse:
    team = _admin_team(request, slug)
    return _render(request, team)


def _period(request: HttpRequest) -> tuple[date, date, str]:
    """The report's [first, last] days from ?from=&to= (ISO dates); the last 14 days by
    default. Returns an error to show instead of guessing when they make no sense."""
    today = timezone.now().date()
    default = today - timedelta(days=DEFAULT_DAYS - 1), today
    try:
        last = date.fromisoformat(request.GET["to"]) if request.GET.get("to") else today
        first = date.fromisoformat(request.GET["from"]) if request.GET.get("from") else None
    except ValueError:
        return *default, "Dates look like 2025-01-31."
    if not EARLIEST <= last <= today or not (first is None or EARLIEST <= first <= today):
        return *default, f"Dates run from {EARLIEST.isoformat()} to today."
    if first is None:
        first = max(EARLIEST, last - timedelta(days=DEFAULT_DAYS - 1))
    if first > last:
        return last, last, "The period starts after it ends; showing its last day."
    if (last - first).days >= MAX_DAYS:
        return last - timedelta(days=MAX_DAYS - 1), last, f"At most {MAX_DAYS} days at once."
    return first, last, ""


def _render(
    request: HttpRequest,
    team: Team,
    status: int = 200,
    quota_typed: dict[str, str] | None = None,
    quota_errors: dict[str, list[str]] | None = None,
    member_typed: dict[str, str] | None = None,
    **extra: Any,
) -> HttpResponse:
    """The admin page; after a refused quota or member, with what was typed in its form (and
    a refused quota's messages at its boxes)."""
    first, last, period_error = _period(request)
    report = usage_report(team, first, last, timezone.now())
    members = list(team.memberships.select_related("user").order_by("user__username"))
    quotas = quota_usage([team])
    # Rows of GPUs held on a model no quota covers have no quota to edit: one may be added.
    quoted = {q.gpu_model for q in quotas if q.quota}
    typed = quota_typed or {}
    model = typed.get("gpu_model")
    # A refused quota's messages go to the form it came from: its quota's, else the adding one.
    adding = bool(typed) and model not in quoted
    gpu_models = sorted(
        {
            Quota.ANY_MODEL,
            *Node.objects.values_list("gpu_model", flat=True),
            *(q.gpu_model for q in quotas if not q.quota),
        }
        - quoted
    )
    errors = quota_errors or {}
    # The adding form shows a refusal only for a model it offers: at its model box showing
    # another, a message would be about the wrong quota.
    placed = bool(errors) and (not adding or model in gpu_models)
    return render(
        request,
        "frontend/team_admin.html",
        {
            "team": team,
            "members": members,
            "roles": Membership.Role.values,
            # A refused addition: the add form again, as typed. A refused role change came
            # from its member's row, which shows the role kept.
            "member_adding": (
                member_typed
                if member_typed
                and member_typed["username"] not in {m.user.username for m in members}
                else {}
            ),
            "quotas": [
                (
                    q,
                    {**_quota_boxes(q), **(typed if model == q.gpu_model else {})},
                    _quota_form_errors(errors, QUOTA_BOXES)
                    if placed and not adding and model == q.gpu_model
                    else {},
                )
                for q in quotas
            ],
            # A refused new quota: its form open again, as typed (if it offers that model).
            "quota_adding": typed if placed and adding else {},
            "adding_boxes": (
                typed if placed and adding else {"nominal_gpus": "0", "borrowing_limit_gpus": "0"}
            ),
            "quota_adding_errors": (
                _quota_form_errors(errors, ADDING_BOXES) if placed and adding else {}
            ),
            # Messages no form on the page can show (a quota typed by hand, say).
            "quota_loose": []
            if placed
            else [
                f"{QUOTA_LABELS.get(f, f)}: {m}" if f != NON_FIELD else m
                for f, ms in errors.items()
                for m in ms
            ],
            # The adding form offers models without a quota only: it must not replace one.
            "gpu_models": gpu_models,
            "report": report,
            "chart": charts.usage_chart(report.days, report.users, report.gpu_hours),
            "user_totals": [(u, report.total(u), charts.team_colour(u)) for u in report.users],
            "first": first,
            "last": last,
            "period_error": period_error,
            "errors": {},
            **extra,
        },
        status=status,
    )


QUOTA_LABELS = {
    "gpu_model": "GPU model",
    "nominal_gpus": "Nominal",
    "borrowing_limit_gpus": "Borrow up to",
    "lending_limit_gpus": "Lend at most",
    "max_running_jobs": "Max running jobs",
}
QUOTA_BOXES = ("nominal_gpus", "borrowing_limit_gpus", "lending_limit_gpus", "max_running_jobs")
ADDING_BOXES = ("gpu_model", "nominal_gpus", "borrowing_limit_gpus")
NON_FIELD = "__all__"


def _quota_form_errors(errors: dict[str, list[str]], boxes: tuple[str, ...]) -> dict[str, Any]:
    """A quota form's messages: each box's at it, the rest (`__all__`, a field the form has no
    box for) under "top", for the top of the form, named in the page's words."""
    out: dict[str, Any] = {box: errors[box] for box in boxes if box in errors}
    if top := [
        f"{QUOTA_LABELS.get(f, f)}: {m}" if f != NON_FIELD else m
        for f, ms in errors.items()
        if f not in boxes
        for m in ms
    ]:
        out["top"] = top
    return out


def _quota_boxes(q: QuotaUsage) -> dict[str, str]:
    """A quota's form as drawn: an empty box for no limit."""
    return {
        "nominal_gpus": _amount(q.nominal),
        "borrowing_limit_gpus": "" if q.borrowing_limit is None else _amount(q.borrowing_limit),
        "lending_limit_gpus": "" if q.lending_limit is None else _amount(q.lending_limit),
        "max_running_jobs": "" if q.max_running_jobs is None else str(q.max_running_jobs),
    }


def _amount(value: float) -> str:
    """A GPU amount for an input box: the shortest text that reads back as the same float, so
    a form saved unchanged stores what it showed (the `gpus` filter's two decimals would turn
    one MIG slice, 1/7, into 0.14)."""
    text = repr(float(value))
    return text.removesuffix(".0")


@signed_in
@require_GET
def usage_download(request: HttpRequest, slug: str) -> HttpResponse:
    team = _admin_team(request, slug)
    first, last, period_error = _period(request)
    if period_error:  # the page's link always sends a good period: this URL was made by hand
        return HttpResponseBadRequest(period_error, content_type="text/plain")
    report = usage_report(team, first, last, timezone.now())
    response = HttpResponse(usage_csv(report), content_type="text/csv; charset=utf-8")
    name = f"gpuq-usage-{team.slug}-{first.isoformat()}-{last.isoformat()}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


USERNAME_MAX = 150  # Django's User.username


@signed_in
@require_POST
def member_set(request: HttpRequest, slug: str) -> HttpResponse:
    """Add a member, or change a member's role."""
    team = _admin_team(request, slug)
    username = request.POST.get("username", "").strip()
    # None (the add form's default): a new member is a member, an existing one keeps their
    # role, so adding an admin again does not demote them.
    role = request.POST.get("role") or None
    with permission_as_403():
        try:
            m = team_services.set_membership(request.user, team, username, role)
        except ValidationError as exc:
            # Kept in the box as typed, up to the longest a username can be.
            typed = {"username": username[:USERNAME_MAX], "role": request.POST.get("role", "")}
            return _render(
                request,
                team,
                400,
                errors={"member": flatten_errors(exc.detail)},
                member_typed=typed,
            )
    messages.success(request, f"{username} is now {m.role} of {team.slug}.")
    return _after_member_change(request, team)


@signed_in
@require_POST
def member_remove(request: HttpRequest, slug: str, username: str) -> HttpResponse:
    team = _admin_team(request, slug)
    with permission_as_403():
        try:
            team_services.remove_member(request.user, team, username)
        except ValidationError as exc:
            return _render(request, team, 400, errors={"member": flatten_errors(exc.detail)})
        except team_services.MemberHasActiveJobs as exc:
            return _render(request, team, 409, errors={"member": flatten_errors(exc.detail)})
    messages.success(request, f"Removed {username} from {team.slug}.")
    return _after_member_change(request, team)


def _after_member_change(request: HttpRequest, team: Team) -> HttpResponse:
    """Back to the team's page, unless one left it or stepped down as its admin: that page is
    no longer theirs (a 404 or a 403 after an action that worked)."""
    if team_services.is_team_admin(request.user, team):
        return redirect("team-admin", slug=team.slug)
    return redirect("teams")


@signed_in
@require_POST
def quota_set(request: HttpRequest, slug: str) -> HttpResponse:
    """Create or change a quota, with the API's validation and the site's ceilings."""
    team = _admin_team(request, slug)
    data: dict[str, str | None] = {
        k: v.strip()
        for k, v in request.POST.items()
        if k in QuotaSerializer.Meta.fields and v.strip()
    }
    # An emptied optional box means "no limit", as the page draws one (a team admin is told
    # by set_quota to give a borrowing limit).
    for optional in ("borrowing_limit_gpus", "lending_limit_gpus", "max_running_jobs"):
        data.setdefault(optional, None)
    body = QuotaSerializer(data=data)
    model = data.get("gpu_model") or ""
    try:
        body.is_valid(raise_exception=True)
        values = dict(body.validated_data)
        # The adding form creates; a quota's own form changes that quota, if it is still there.
        adding = "adding" in request.POST
        with permission_as_403():
            team_services.set_quota(
                request.user, team, values.pop("gpu_model"), values, new=adding, existing=not adding
            )
    except ValidationError as exc:
        typed = {k: request.POST[k] for k in QuotaSerializer.Meta.fields if k in request.POST}
        return _render(
            request, team, 400, quota_errors=flatten_errors(exc.detail), quota_typed=typed
        )
    messages.success(request, f"Saved the {model} quota of {team.slug}.")
    return redirect("team-admin", slug=team.slug)


@signed_in
@require_POST
def quota_delete(request: HttpRequest, slug: str) -> HttpResponse:
    team = _admin_team(request, slug)
    model = request.POST.get("gpu_model", "")
    with permission_as_403():
        try:
            team_services.delete_quota(request.user, team, model)
        except ValidationError as exc:
            return _render(request, team, 400, errors={"quota": flatten_errors(exc.detail)})
    messages.success(request, f"Deleted the {model} quota of {team.slug}.")
    return redirect("team-admin", slug=team.slug)
