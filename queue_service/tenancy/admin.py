from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .models import ApiToken, Membership, Quota, Team


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


class QuotaInline(admin.TabularInline):
    model = Quota
    extra = 0


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "weight", "max_nominal_gpus", "max_borrowing_gpus"]
    inlines = [MembershipInline, QuotaInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Team | None = None) -> Any:
        # The slug names the team on its clusters (Kubernetes namespace and queue, Slurm
        # account in `accounts`): renamed, their running workloads would be another team's.
        return ("slug",) if obj is not None else ()


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "hint", "created_at", "last_used_at"]
    readonly_fields = ["key_hash", "hint"]
