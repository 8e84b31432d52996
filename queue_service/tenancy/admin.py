from __future__ import annotations

from django.contrib import admin

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


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "hint", "created_at", "last_used_at"]
    readonly_fields = ["key_hash", "hint"]
