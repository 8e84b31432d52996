from __future__ import annotations

from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "queue_service.clusters"
    label = "clusters"
