from __future__ import annotations

from django.contrib import admin

from .models import Cluster, Node


class NodeInline(admin.TabularInline):
    model = Node
    extra = 0


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "enabled", "last_sync_at", "last_sync_error"]
    inlines = [NodeInline]
