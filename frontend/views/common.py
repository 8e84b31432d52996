from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any
from urllib.parse import urlsplit

from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import Resolver404, get_script_prefix, resolve, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django_htmx.http import HttpResponseClientRedirect, HttpResponseClientRefresh
from rest_framework import exceptions as drf

from queue_service.jobs.models import Job
from queue_service.tenancy.services import teams_for

# Pages a sign-in may go back to: the others answer only htmx or a form's POST, or are files.
PAGES = frozenset(
    {
        "dashboard",
        "submit",
        "queue",
        "clusters",
        "teams",
        "team-admin",
        "account",
        "email-confirm",
        "job",
    }
)


def signed_in(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """login_required, except that a polled fragment whose session ended sends the whole page
    to the sign-in form (a plain redirect would put the form inside the fragment), and that a
    form sent without a session comes back to a page, not to its POST-only URL (a 405)."""
    guarded = login_required(view)

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        polled = request.method == "GET" and bool(request.headers.get("HX-Request"))
        if request.user.is_authenticated and polled:
            try:
                return guarded(request, *args, **kwargs)
            except (Http404, PermissionDenied):
                # Not the viewer's (any more): htmx swaps no 404 and would poll on for ever,
                # showing what it last had. The page, reloaded, is the 404 (or 403) page.
                return HttpResponseClientRefresh()
        if request.user.is_authenticated or (
            request.method in ("GET", "HEAD") and not request.headers.get("HX-Request")
        ):
            return guarded(request, *args, **kwargs)
        if request.headers.get("HX-Request"):
            back = page_of(request.headers.get("HX-Current-URL", "/"))
            return HttpResponseClientRedirect(redirect_to_login(back).url)
        # The form's page (a same-origin Referer), else the page of what it changes.
        referer = request.headers.get("Referer", "")
        safe = url_has_allowed_host_and_scheme(
            referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        )
        return redirect_to_login(page_of(referer if safe else request.path))

    return wrapper


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """settings.CSRF_FAILURE_VIEW: a form whose CSRF token no longer matches, mostly one from a
    page drawn before its user signed out and in again (the sign-in rotates the token). Nothing
    was done: say so, and link to the page to open again (its Referer, else the page of what
    the form changes). An htmx request (the submit form's preview) gets those words as a
    fragment, with HX-Reswap: htmx swaps no 4xx, and gpuq.js swaps one that names its swap."""
    htmx = bool(request.headers.get("HX-Request"))
    # htmx names the page it was sent from; a browser may send no Referer.
    came_from = (htmx and request.headers.get("HX-Current-URL")) or request.headers.get(
        "Referer", ""
    )
    safe = url_has_allowed_host_and_scheme(
        came_from, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    context = {"back": page_of(came_from if safe else request.path), "reason": reason}
    if htmx:
        response = render(request, "frontend/fragments/stale_form.html", context, status=403)
        response["HX-Reswap"] = "innerHTML"
        return response
    return render(request, "frontend/stale_form.html", context, status=403)


def page_of(url: str) -> str:
    """`url`'s path and query if it is one of PAGES, else the nearest page above its path
    (/jobs/<id>/update/ -> /jobs/<id>/), else the dashboard."""
    parts = urlsplit(url)
    prefix, path = get_script_prefix(), parts.path
    query = f"?{parts.query}" if parts.query else ""
    while path.startswith(prefix):
        try:
            if resolve("/" + path.removeprefix(prefix)).url_name in PAGES:
                return path + query
        except Resolver404:
            pass
        if path in (prefix, ""):
            break
        path, query = path.rstrip("/").rpartition("/")[0] + "/", ""
    return reverse("dashboard")


@contextmanager
def permission_as_403() -> Iterator[None]:
    """Services raise the API's PermissionDenied; the UI shows its message on the 403 page."""
    try:
        yield
    except drf.PermissionDenied as exc:
        raise PermissionDenied(str(exc.detail)) from exc


def visible_job(user: Any, pk: Any) -> Job:
    """A job of one of the user's teams, or 404: outsiders cannot tell it exists. `pk` may
    come from a query string (?from=): anything but a UUID is a 404 too, not a 500."""
    try:
        pk = uuid.UUID(str(pk))
    except ValueError:
        raise Http404("no such job") from None
    return get_object_or_404(
        Job.objects.for_user(user).select_related(
            "team", "user", "priority_class", "cluster", "array"
        ),
        pk=pk,
    )


def my_teams(user: Any) -> list[Any]:
    return list(teams_for(user).order_by("slug").distinct())
