from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from .models import Job, JobArray, JobEvent, PriorityClass


@admin.register(PriorityClass)
class PriorityClassAdmin(admin.ModelAdmin):
    list_display = ["name", "value", "preemptible"]


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    readonly_fields = ["at", "from_state", "to_state", "code", "message", "details"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["name", "array_index", "team", "user", "state", "cluster", "submitted_at"]
    list_filter = ["state", "kind", "team", "cluster"]
    search_fields = ["name", "id", "external_id"]
    # State changes go through services (cancel); the admin only reads jobs.
    readonly_fields = [f.name for f in Job._meta.fields]
    inlines = [JobEventInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs are submitted (jobs.services.submit_job), not typed in

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        # A job's runs are its team's usage (reports, fair share): deleting the job would
        # delete them with it and rewrite what the team was charged, so job history stays.
        return False


@admin.register(JobArray)
class JobArrayAdmin(admin.ModelAdmin):
    list_display = ["name", "indices", "size", "team", "user", "submitted_at"]
    search_fields = ["name", "id"]
    readonly_fields = [f.name for f in JobArray._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # arrays are submitted with their tasks (jobs.services.submit_job)
