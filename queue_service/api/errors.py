"""Every error the API returns is JSON with a clear message; domain errors get their status
here instead of surfacing as 500s."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core.exceptions import DisallowedHost, RequestDataTooBig, TooManyFieldsSent
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, resolve
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from rest_framework import status
from rest_framework.request import Empty
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler

from queue_service.backends import BackendError
from queue_service.clusters.services import reaching_error_summary
from queue_service.echoes import Echoes, strings
from queue_service.jobs.services import JobConflict, StaleState

log = logging.getLogger(__name__)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, JobConflict | StaleState):
        return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, BackendError):
        code = status.HTTP_502_BAD_GATEWAY if exc.permanent else status.HTTP_503_SERVICE_UNAVAILABLE
        return Response(
            {"detail": f"the cluster did not answer: {_shown(exc, context)}"}, status=code
        )
    if isinstance(exc, Http404):
        return Response({"detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)
    if isinstance(exc, RequestDataTooBig):  # Django's 400 page would be HTML, and vague
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return Response(
            {"detail": f"the body is larger than {limit:,} bytes"},
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    response = drf_handler(exc, context)
    if response is not None:
        response.data = Echoes(_sent(context)).cut(response.data)
    return response


def _sent(context: dict[str, Any]) -> Iterator[str]:
    """What the client sent that an error may repeat: the body's texts, if a view read it;
    the query's, and the comma-separated parts the filters read; the path's."""
    request = context.get("request")
    if request is not None:
        # Only a body a view has read can be repeated; reading one here could fail anew.
        if getattr(request, "_full_data", Empty) is not Empty:
            yield from strings(request.data)
        for key, values in request.query_params.lists():
            yield key
            for value in values:
                yield value
                yield from value.split(",")
    for value in (context.get("kwargs") or {}).values():
        if isinstance(value, str):
            yield value


def _shown(exc: BackendError, context: dict[str, Any]) -> str:
    """A backend's error as anyone who asked may read it (the clusters API's and a job's
    reason's rule, clusters.services.reaching_error_summary): the cluster's answer about a job
    as it is; an error in how gpuq reaches the cluster (SSH, an HTTP connection, a timeout, a
    setting quoting an account) as its summary, since its own words name the cluster's host
    and port and gpuq's account there. Those go to the server's log, for site staff."""
    summary = reaching_error_summary(exc.message)
    if summary is None or summary == exc.message:
        return exc.message
    request = context.get("request")
    where = f"{request.method} {request.path}" if request is not None else "the API"
    log.warning("%s: the cluster did not answer: %s", where, exc.message)
    return summary


@csrf_exempt  # it changes nothing, and API clients send no CSRF token
def not_found(request: HttpRequest) -> JsonResponse:
    """Any /api/ path that names no endpoint: a JSON 404, like every other API error. A path
    that lacks only its trailing slash gets a 308 to it, which keeps the method and the body:
    Django's APPEND_SLASH answers a POST with a 301 (or a 500 in debug), and clients follow
    a 301 as a GET, so the job submitted would be lost without a word."""
    if not request.path.endswith("/") and _endpoint(request.path + "/"):
        target = request.path + "/"
        if request.META.get("QUERY_STRING"):
            target += "?" + request.META["QUERY_STRING"]
        response = JsonResponse({"detail": f"API paths end with a slash: {target}"}, status=308)
        response["Location"] = target
        return response
    return JsonResponse({"detail": "Not found."}, status=404)


def _endpoint(path: str) -> bool:
    try:
        return resolve(path).url_name != "api-not-found"
    except Resolver404:
        return False


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's handler400, for what it refuses before any view (too many query parameters,
    a Host it does not serve): JSON under /api/, saying which, the plain page elsewhere.
    Django's own words name its settings, for the server's log."""
    if not request.path.startswith("/api/"):
        return defaults.bad_request(request, exception)
    if isinstance(exception, TooManyFieldsSent):
        most = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
        detail = f"more than {most:,} query parameters"
    elif isinstance(exception, DisallowedHost):
        detail = "the Host header names no host this server answers for"
    else:
        detail = "the request is malformed"
    return JsonResponse({"detail": detail}, status=400)


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's handler500: JSON under /api/, the plain page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Server error; it has been logged."}, status=500)
    return defaults.server_error(request)
