from __future__ import annotations

from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "queue_service.tenancy"
    label = "tenancy"
