from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .models import ApiToken, Membership, PendingEmail, Quota, Team


class _ReadOnlyInline(admin.TabularInline):
    """Members and quotas change through tenancy.services (the API and the team page),
    whose rules an inline's save would skip: a member with jobs still running removed, a
    team left without an admin, a lending limit above the nominal quota."""

    extra = 0

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MembershipInline(_ReadOnlyInline):
    model = Membership


class QuotaInline(_ReadOnlyInline):
    model = Quota


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

    def has_add_permission(self, request: HttpRequest) -> bool:
        # A token's key is made by tenancy.services.create_token and shown once to its
        # owner; one added here would have no key at all.
        return False


@admin.register(PendingEmail)
class PendingEmailAdmin(admin.ModelAdmin):
    """Read only, without the nonce: whoever has it can confirm the address for its owner,
    and a request is made only by tenancy.services.set_email, which mails its link. Staff
    may drop one; its link then no longer works."""

    list_display = ["user", "email", "requested_at", "expires_at"]
    fields = ["user", "email", "requested_at", "expires_at"]
    readonly_fields = fields
    search_fields = ["user__username", "email"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
