"""Team admin pages, quotas on the dashboard, API tokens, in a real browser."""

from __future__ import annotations

import csv
import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from queue_service.jobs.models import JobRun
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from queue_service.tenancy.models import Membership, Quota
from tests.conftest import spec

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def quota_box(page: Any, team: str = "vision", model: str = "SIM-A100") -> Any:
    return page.locator(f'#dashboard-live .quota[data-team="{team}"][data-model="{model}"]')


def test_a_quota_change_by_the_team_admin_moves_the_open_dashboards_bar(
    people: Any, sign_in: Any, local_cluster: Any
) -> None:
    submit_job(people["alice"], spec(name="holder", gpus_per_node=2))
    run_cycle()  # admitted: it holds 2 GPUs of vision's quota
    alice = sign_in("alice")
    box = quota_box(alice)
    expect(box.locator(".used-num")).to_have_text("2")
    expect(box.locator(".nominal-num")).to_have_text("8")
    # Nominal 8 and borrowing 8 on a 300-wide bar: nominal ends at 150, 2 used at 37.5.
    expect(box.locator("rect.bar-nominal")).to_have_attribute("width", "150")
    expect(box.locator("rect.bar-used")).to_have_attribute("width", "37.5")

    dana = sign_in("dana")
    dana.get_by_label("Main").get_by_role("link", name="Teams").click()
    dana.get_by_role("link", name="Administer").click()
    form = dana.locator('.quota-edit[data-model="SIM-A100"] form.quota-form')
    form.get_by_label("Nominal").fill("4")
    form.get_by_role("button", name="Save").click()
    expect(dana.locator(".messages")).to_contain_text("Saved the SIM-A100 quota of vision")
    assert Quota.objects.get(team__slug="vision", gpu_model="SIM-A100").nominal_gpus == 4

    # Alice's open dashboard follows by itself (polling), no reload.
    expect(box.locator(".nominal-num")).to_have_text("4", timeout=12_000)
    expect(box.locator("rect.bar-nominal")).to_have_attribute("width", "100")  # 4 of 12
    expect(box.locator("rect.bar-used")).to_have_attribute("width", "50")


def test_a_quota_over_the_sites_ceiling_is_refused_with_the_reason(
    people: Any, sign_in: Any
) -> None:
    page = sign_in("dana")
    page.goto("/teams/vision/")
    form = page.locator('.quota-edit[data-model="SIM-A100"] form.quota-form')
    form.get_by_label("Nominal").fill("40")
    form.get_by_role("button", name="Save").click()
    expect(page.get_by_role("alert")).to_contain_text("Not saved: fix the value marked below.")
    nominal = form.get_by_label("Nominal")
    expect(nominal).to_have_attribute("aria-invalid", "true")
    message = page.locator(f"#{nominal.get_attribute('aria-describedby')}")
    expect(message).to_contain_text("the team's nominal quotas may add up to 32 GPUs")
    assert Quota.objects.get(team__slug="vision", gpu_model="SIM-A100").nominal_gpus == 8


def test_team_admin_is_403_with_the_admins_named_for_members_and_404_for_outsiders(
    people: Any, sign_in: Any
) -> None:
    bob = sign_in("bob")
    bob.goto("/teams/")
    expect(bob.locator("main")).to_contain_text("only admins manage the team")
    response = bob.goto("/teams/vision/")
    assert response.status == 403
    expect(bob.get_by_role("heading", name="Not allowed")).to_be_visible()
    expect(bob.locator("main")).to_contain_text("Its admins: dana.")
    assert bob.request.get("/teams/vision/usage.csv").status == 403
    charlie = sign_in("charlie")
    assert charlie.goto("/teams/vision/").status == 404
    assert charlie.request.get("/teams/vision/usage.csv").status == 404


def test_the_team_admin_adds_promotes_and_removes_members(people: Any, sign_in: Any) -> None:
    page = sign_in("dana")
    page.goto("/teams/vision/")
    add = page.locator("form.add-row")
    add.get_by_placeholder("username").fill("charlie")
    add.get_by_role("button", name="Add").click()
    expect(page.locator('tr[data-member="charlie"]')).to_be_visible()
    bob = page.locator('tr[data-member="bob"]')
    bob.get_by_label("Role of bob").select_option("admin")
    bob.get_by_role("button", name="Save").click()
    expect(page.locator(".messages")).to_contain_text("bob is now admin of vision")
    page.locator('tr[data-member="charlie"]').get_by_role("button", name="Remove").click()
    expect(page.locator('tr[data-member="charlie"]')).to_have_count(0)
    roles = dict(
        Membership.objects.filter(team__slug="vision").values_list("user__username", "role")
    )
    assert roles == {"alice": "member", "bob": "admin", "dana": "admin"}
    add.get_by_placeholder("username").fill("nobody")
    add.get_by_role("button", name="Add").click()
    expect(page.get_by_role("alert")).to_contain_text("no active user 'nobody'")


def test_the_usage_report_charts_gpu_hours_per_user_and_day_and_downloads_as_csv(
    people: Any, sign_in: Any
) -> None:
    now = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0)
    for who, gpus, days_ago, hours in [("alice", 2, 1, 3), ("bob", 4, 1, 1), ("alice", 1, 0, 2)]:
        job = submit_job(people[who], spec(name=f"{who}-{days_ago}", gpus_per_node=gpus)).job
        start = now - timedelta(days=days_ago, hours=hours)
        # A finished run in the past, as the service records runs.
        JobRun.objects.create(
            job=job, attempt=1, team_id=job.team_id, user_id=job.user_id, gpus=job.gpus,
            started_at=start, ended_at=start + timedelta(hours=hours), ended_by="succeeded",
        )  # fmt: skip
    page = sign_in("dana")
    page.goto("/teams/vision/")
    expect(page.locator("#usage-total")).to_have_text("12.00")  # 2x3 + 4x1 + 1x2
    bars = page.locator(".usage-chart rect.usage")
    expect(bars).to_have_count(3)
    yesterday = (now - timedelta(days=1)).date().isoformat()
    expect(
        page.locator(f'.usage-chart rect[data-day="{yesterday}"][data-user="alice"]')
    ).to_have_attribute("data-value", "6")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download CSV").click()
    with open(download.value.path(), encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [(r["day"], r["user"], r["gpu_hours"]) for r in rows] == [
        (yesterday, "alice", "6.0000"),
        (yesterday, "bob", "4.0000"),
        (now.date().isoformat(), "alice", "2.0000"),
    ]
    page.locator("input[name=from]").fill(now.date().isoformat())
    page.get_by_role("button", name="Show").click()
    expect(page.locator("#usage-total")).to_have_text("2.00")
    expect(page).to_have_url(re.compile(r"from=" + now.date().isoformat()))


def test_an_api_token_is_shown_once_works_on_the_api_and_stops_working_when_revoked(
    people: Any, sign_in: Any
) -> None:
    page = sign_in("alice")
    page.get_by_role("link", name="alice").click()
    page.get_by_label("Name").fill("laptop")
    page.get_by_role("button", name="Create token").click()
    key = page.locator("#new-key").inner_text()
    assert key.startswith("gpuq_")
    expect(page.locator("#snippet")).to_contain_text(f"export GPUQ_TOKEN={key}")
    api = page.context.request
    headers = {"Authorization": f"Bearer {key}"}
    assert api.get("/api/v1/jobs/", headers=headers).status == 200
    page.goto("/me/")
    expect(page.locator("#new-key")).to_have_count(0)
    expect(page.locator("main")).not_to_contain_text(key)
    row = page.locator('tr[data-token="laptop"]')
    expect(row).to_contain_text(key[:10])
    row.get_by_role("button", name="Revoke").click()
    expect(page.locator('tr[data-token="laptop"]')).to_have_count(0)
    fresh = page.context.browser.new_context(base_url=page.url.split("/me/")[0])
    assert fresh.request.get("/api/v1/jobs/", headers=headers).status == 401
    fresh.close()
