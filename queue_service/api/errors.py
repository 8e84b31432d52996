"""Every error the API returns is JSON with a clear message; domain errors get their status
here instead of surfacing as 500s."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler

from queue_service.backends import BackendError
from queue_service.jobs.services import JobConflict, StaleState


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, JobConflict | StaleState):
        return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, BackendError):
        code = status.HTTP_502_BAD_GATEWAY if exc.permanent else status.HTTP_503_SERVICE_UNAVAILABLE
        return Response({"detail": f"the cluster did not answer: {exc.message}"}, status=code)
    if isinstance(exc, Http404):
        return Response({"detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)
    return drf_handler(exc, context)
