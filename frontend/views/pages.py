"""Dashboard, queue, clusters and the personal page."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable
from functools import reduce
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.contrib import messages
from django.contrib.auth.views import LoginView
from django.db.models import Count, F, Max, Min, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.text import capfirst
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from rest_framework.exceptions import ValidationError

from frontend import charts, forms
from queue_service import cli
from queue_service.api.serializers import TokenSerializer
from queue_service.clusters.models import Cluster
from queue_service.clusters.services import can_read_sync_errors, gpu_layouts, sync_error_summary
from queue_service.jobs.models import Job
from queue_service.jobs.reports import cluster_totals, quota_usage
from queue_service.jobs.snapshot import site_mig_tables
from queue_service.tenancy import services as team_services
from queue_service.tenancy.models import ApiToken
from scheduler.mig import geometry

from .common import my_teams, signed_in

S = Job.State
RUNNING_STATES = sorted(Job.ACTIVE)
QUEUE_STATES: dict[str, tuple[str, list[str] | None]] = {
    "pending": ("Pending", [S.PENDING]),
    "active": ("Admitted or running", RUNNING_STATES),
    "suspended": ("Suspended", [S.SUSPENDED]),
    "finished": ("Finished", sorted(Job.TERMINAL)),
    "all": ("All", None),
}
QUEUE_LIMIT = 100  # rows per poll: rendering them is most of the fragment's cost
DASHBOARD_LIMIT = 50
# Tasks the cycle holds back because their array runs as many as its %N allows: one row per
# array (as squeue shows 1234_[3-11%3]). A reason without a code is NULL to the key lookup,
# so "not held" is not exclude(HELD): NOT NULL would drop those jobs as well.
HELD = Q(state=S.PENDING, reason__code="array_limit")
NOT_HELD = ~Q(state=S.PENDING) | Q(reason__code__isnull=True) | ~Q(reason__code="array_limit")


def _jobs(request: HttpRequest) -> QuerySet[Job]:
    return Job.objects.for_user(request.user).select_related(
        "team", "user", "priority_class", "cluster"
    )


@dataclasses.dataclass(frozen=True)
class HeldTasks:
    """One row for an array's held tasks: the first of them gives its columns and its link."""

    first: Job
    indices: Iterable[int]
    count: int


def _held_tasks(jobs: QuerySet[Job], limit: int) -> tuple[list[HeldTasks], int, int]:
    """A row for each of the first `limit` arrays with held tasks (oldest first), how many
    tasks are held and in how many arrays. Three queries at most, however many tasks: per
    array the count and the lowest and highest index; the indices themselves (as values, not
    Job objects) only of arrays with gaps among them, as a limit holds back the tail of an
    array; the first held task of each array shown."""
    held = jobs.filter(HELD)
    arrays = list(
        held.values("array_id")
        .annotate(
            n=Count("id"),
            low=Min("array_index"),
            high=Max("array_index"),
            at=Min("submitted_at"),
        )
        .order_by("at", "array_id")
    )
    shown = arrays[:limit]
    if not shown:
        return [], 0, 0
    indices: dict[Any, Iterable[int]] = {
        a["array_id"]: range(a["low"], a["high"] + 1) for a in shown
    }
    gapped: dict[Any, list[int]] = {
        a["array_id"]: [] for a in shown if a["n"] != a["high"] - a["low"] + 1
    }
    if gapped:
        rows = held.filter(array_id__in=list(gapped)).values_list("array_id", "array_index")
        for array_id, index in rows.order_by("array_index"):
            gapped[array_id].append(index)
        indices.update(gapped)
    firsts = held.filter(
        reduce(operator.or_, (Q(array_id=a["array_id"], array_index=a["low"]) for a in shown))
    )
    by_array = {job.array_id: job for job in firsts}
    # A task let through since the first query is left out: the next poll shows the rest.
    return (
        [
            HeldTasks(by_array[a["array_id"]], indices[a["array_id"]], a["n"])
            for a in shown
            if a["array_id"] in by_array
        ],
        sum(a["n"] for a in arrays),
        len(arrays),
    )


# --- dashboard ---------------------------------------------------------------------------------


@signed_in
@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "frontend/dashboard.html", _dashboard_context(request))


@signed_in
@require_GET
def dashboard_live(request: HttpRequest) -> HttpResponse:
    return render(request, "frontend/fragments/dashboard_live.html", _dashboard_context(request))


def _dashboard_context(request: HttpRequest) -> dict[str, Any]:
    teams = my_teams(request.user)
    clusters = list(Cluster.objects.filter(enabled=True).prefetch_related("nodes"))
    return {
        **_dashboard_jobs(request),
        "teams": teams,
        "quotas": quota_usage(teams),
        "maps": _maps(request, clusters, compact=True),
    }


def _dashboard_jobs(request: HttpRequest) -> dict[str, Any]:
    jobs = _jobs(request)
    # Suspended jobs wait too (for their owner): after the queue ("pending" < "suspended"),
    # and after the arrays' held tasks.
    waiting_qs = jobs.filter(NOT_HELD, state__in=[S.PENDING, S.SUSPENDED])
    waiting = list(
        waiting_qs.order_by("state", F("queue_position").asc(nulls_last=True), "submitted_at")[
            :DASHBOARD_LIMIT
        ]
    )
    held, held_total, _ = _held_tasks(jobs, DASHBOARD_LIMIT)
    queued = sum(1 for job in waiting if job.state == S.PENDING)
    running_qs = jobs.filter(state__in=RUNNING_STATES)
    running = list(running_qs.order_by("-admitted_at")[:DASHBOARD_LIMIT])
    return {
        "running": running,
        "running_count": _count(running, running_qs),
        "pending": [*waiting[:queued], *held, *waiting[queued:]],
        "pending_count": _count(waiting, waiting_qs) + held_total,
        "recent": list(jobs.filter(state__in=Job.TERMINAL).order_by("-finished_at")[:8]),
    }


def _count(shown: list[Job], qs: QuerySet[Job]) -> int:
    """How many jobs `qs` holds, of which `shown` are the first rows: a query only when the
    rows were cut at the card's limit."""
    return len(shown) if len(shown) < DASHBOARD_LIMIT else qs.count()


# --- queue -----------------------------------------------------------------------------------


@signed_in
@require_GET
def queue(request: HttpRequest) -> HttpResponse:
    return render(request, "frontend/queue.html", _queue_context(request))


@signed_in
@require_GET
def queue_rows(request: HttpRequest) -> HttpResponse:
    return render(request, "frontend/fragments/queue_rows.html", _queue_context(request))


def _queue_context(request: HttpRequest) -> dict[str, Any]:
    """Pending jobs in scheduling order (the position the last cycle gave them), or the other
    states newest first; filtered by team, state and cluster."""
    state = request.GET.get("state", "pending")
    if state not in QUEUE_STATES:
        state = "pending"
    qs = _jobs(request)
    states = QUEUE_STATES[state][1]
    if states is not None:
        qs = qs.filter(state__in=states)
    teams = my_teams(request.user)
    clusters = list(Cluster.objects.values_list("name", flat=True))
    # A team or cluster the menus do not offer (one left, one removed) is not applied, as an
    # unknown state is not: a menu reading "all my teams" over a filtered list would be untrue.
    team, cluster = request.GET.get("team", ""), request.GET.get("cluster", "")
    if team not in {t.slug for t in teams}:
        team = ""
    if cluster not in clusters:
        cluster = ""
    if team:
        qs = qs.filter(team__slug=team)
    if cluster:
        qs = qs.filter(cluster__name=cluster)
    total = qs.count()
    held: list[HeldTasks] = []
    held_total = arrays = 0
    if state == "pending":
        held, held_total, arrays = _held_tasks(qs, QUEUE_LIMIT)
        qs = qs.filter(NOT_HELD).order_by(
            F("queue_position").asc(nulls_last=True), "submitted_at", "id"
        )
    else:
        qs = qs.order_by("-submitted_at", "id")
    return {
        "jobs": list(qs[:QUEUE_LIMIT]),
        "held": held,
        "total": total,
        "held_total": held_total,
        # Each kind of row has its limit: held arrays neither use up nor get cut by the jobs'.
        "jobs_cut": total - held_total > QUEUE_LIMIT,
        "arrays_cut": arrays > QUEUE_LIMIT,
        "limit": QUEUE_LIMIT,
        "state": state,
        "team": team,
        "cluster": cluster,
        "states": [(k, label) for k, (label, _) in QUEUE_STATES.items()],
        "teams": teams,
        "clusters": clusters,
        "query": request.GET.urlencode(),
    }


# --- clusters --------------------------------------------------------------------------------


@signed_in
@require_GET
def clusters(request: HttpRequest) -> HttpResponse:
    return render(request, "frontend/clusters.html", _clusters_context(request))


@signed_in
@require_GET
def clusters_live(request: HttpRequest) -> HttpResponse:
    return render(request, "frontend/fragments/clusters_live.html", _clusters_context(request))


def _clusters_context(request: HttpRequest) -> dict[str, Any]:
    all_clusters = list(Cluster.objects.prefetch_related("nodes"))
    return {"maps": _maps(request, all_clusters, compact=False)}


def _maps(request: HttpRequest, clusters: list[Cluster], *, compact: bool) -> list[dict[str, Any]]:
    """Per cluster: its nodes, each with its GPU map, and the cluster's totals; a failed
    sync in a few words safe for anyone, and in its own words for site staff."""
    layouts = gpu_layouts(clusters, request.user)
    site = site_mig_tables(clusters)
    staff = can_read_sync_errors(request.user)
    out = []
    for cluster in clusters:
        nodes = []
        for node in cluster.nodes.all():
            table = geometry(node.gpu_model, site) if node.mig_enabled else None
            nodes.append(
                {
                    "node": node,
                    "svg": charts.node_map(
                        node.name,
                        node.state,
                        layouts.get(node.pk, []),
                        table.memory_slices if table else 8,
                        compact=compact,
                    ),
                }
            )
        teams = sorted(
            {
                who["team"]
                for n in cluster.nodes.all()
                for gpu in layouts.get(n.pk, [])
                for who in [gpu, *gpu.get("mig", [])]
                if who.get("team")
            }
        )
        out.append(
            {
                "cluster": cluster,
                "nodes": nodes,
                "totals": cluster_totals(list(cluster.nodes.all()), layouts),
                "teams": [(t, charts.team_colour(t)) for t in teams],
                "sync_error": sync_error_summary(cluster),
                "sync_error_detail": cluster.last_sync_error if staff else "",
            }
        )
    return out


# --- sign in and the personal page -----------------------------------------------------------


class SignIn(LoginView):
    """Django's sign-in. A `next` that is the sign-in page itself goes to the dashboard:
    for someone signed in already, Django raises on that redirection loop (a 500)."""

    template_name = "frontend/login.html"
    redirect_authenticated_user = True

    def get_redirect_url(self) -> str:
        url: str = super().get_redirect_url()
        return "" if urlsplit(url).path == self.request.path else url


@signed_in
@require_GET
def account(request: HttpRequest) -> HttpResponse:
    return _account(request)


@signed_in
@require_POST
def token_create(request: HttpRequest) -> HttpResponse:
    """The key is shown in this response only (never stored, never redirected through)."""
    # The API's rules for a name (TokenSerializer): 1 to 64 characters, no control characters.
    body = TokenSerializer(data={"name": request.POST.get("name", "")})
    if not body.is_valid():
        return _account(
            request,
            error="Give the token a name of 1 to 64 characters, without control characters.",
            status=400,
        )
    name = body.validated_data["name"]
    try:
        token, key = team_services.create_token(request.user, name)
    except ValidationError as exc:  # a name of one of theirs (the same form sent twice)
        problems = [m for ms in forms.flatten_errors(exc.detail).values() for m in ms]
        return _account(request, token_typed=name, token_errors=problems, status=400)
    response = _account(request, new_key=key, new_token=token)
    response["Cache-Control"] = "no-store"
    return response


@signed_in
@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        team_services.revoke_token(request.user, pk)
    except ValidationError:
        return _account(request, error="That token does not exist (already revoked?).", status=404)
    return redirect("account")


@signed_in
@require_POST
def email_set(request: HttpRequest) -> HttpResponse:
    """Clear (empty) the address a job's notify writes to, or have a link mailed to a new one
    (tenancy.services.set_email): it is set once its owner follows it (email_confirm)."""
    typed = request.POST.get("email", "")
    try:
        pending = team_services.set_email(request.user, typed)
    except ValidationError as exc:
        problems = [m for ms in forms.flatten_errors(exc.detail).values() for m in ms]
        return _account(request, email_typed=typed, email_errors=problems, status=400)
    except team_services.MailNotSent as exc:
        return _account(request, email_typed=typed, email_errors=[str(exc.detail)], status=503)
    if pending:
        text = team_services.pending_email_text(request.user, pending, just_sent=True)
        messages.success(request, f"{capfirst(text)}.")
    elif request.user.email:
        messages.success(request, f"Jobs that ask for email write to {request.user.email} already.")
    else:
        messages.success(request, "Email address removed: no job can email you now.")
    return redirect("account")


@signed_in
@require_http_methods(["GET", "HEAD", "POST"])
def email_confirm(request: HttpRequest, token: str) -> HttpResponse:
    """The link mailed to a new address: GET shows it with a button (mail scanners follow
    links, and must not confirm), whose POST makes it the account's."""
    try:
        if request.method != "POST":
            address = team_services.email_token_address(request.user, token)
            return render(
                request,
                "frontend/email_confirm.html",
                {"address": address, "token": token, "done": address == request.user.email},
            )
        address = team_services.confirm_email(request.user, token)
    except team_services.EmailLinkRefused as exc:
        return render(request, "frontend/email_confirm.html", {"refused": exc.message}, status=400)
    messages.success(request, f"Jobs that ask for email now write to {address}.")
    return redirect("account")


@require_GET
def cli_download(request: HttpRequest) -> HttpResponse:
    """The gpuq command as one file (it needs only Python), as Argo CD and Jenkins serve their
    CLIs: the version that matches this server. It holds no secret, so no sign-in."""
    response = HttpResponse(
        Path(cli.__file__).read_bytes(), content_type="text/x-python; charset=utf-8"
    )
    response["Content-Disposition"] = 'attachment; filename="gpuq"'
    return response


def _account(request: HttpRequest, status: int = 200, **extra: Any) -> HttpResponse:
    return render(
        request,
        "frontend/account.html",
        {
            "tokens": list(ApiToken.objects.filter(user=request.user)),
            "teams": my_teams(request.user),
            "pending_email": team_services.pending_email(request.user),
            "base_url": request.build_absolute_uri("/").rstrip("/"),
            **extra,
        },
        status=status,
    )
