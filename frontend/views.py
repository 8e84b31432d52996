from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from queue_service.jobs.models import Job


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    jobs = Job.objects.for_user(request.user).select_related("team", "priority_class")[:50]
    context: dict[str, Any] = {"jobs": jobs}
    return render(request, "frontend/dashboard.html", context)
