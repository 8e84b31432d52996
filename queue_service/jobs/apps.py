from __future__ import annotations

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "queue_service.jobs"
    label = "jobs"
