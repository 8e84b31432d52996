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
from django.shortcuts import get_object_or_404
from django_htmx.http import HttpResponseClientRedirect
from rest_framework import exceptions as drf

from queue_service.jobs.models import Job
from queue_service.tenancy.services import teams_for


def signed_in(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """login_required, except that a polled fragment whose session ended sends the whole page
    to the sign-in form (a plain redirect would put the form inside the fragment)."""
    guarded = login_required(view)

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.headers.get("HX-Request") and not request.user.is_authenticated:
            page = urlsplit(request.headers.get("HX-Current-URL", "/"))
            back = page.path + (f"?{page.query}" if page.query else "")
            return HttpResponseClientRedirect(redirect_to_login(back).url)
        return guarded(request, *args, **kwargs)

    return wrapper


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
