"""The quotas in use now, as the API (and `gpuq usage`, its client), the team admin page and
the dashboard show them, tell what the scheduler counts (scheduler/quota.py): borrowing from
unrounded sums within its tolerance, GPUs held on a model no quota covers, and a team with no
quota running nothing. Dana administers vision (Alice's and Bob's team)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from queue_service.tenancy.models import Quota
from tests.conftest import spec
from tests.service.test_job_flow import run_until

S = Job.State
MIG_MODEL = "A100-SXM4-80GB"


def page(who: Any, url: str) -> str:
    browser = Client()
    browser.force_login(who)
    response = browser.get(url)
    assert response.status_code == 200, response.status_code
    return str(response.content.decode())


def test_a_team_at_its_nominal_quota_of_one_mig_slice_is_not_reported_as_borrowing(
    people: Any, teams: Any, client_for: Any, tmp_path: Any
) -> None:
    """Vision is guaranteed one 1g slice of an A100 (1/7 of a GPU, saved as the admin page
    keeps it) and may borrow nothing. With that one slice running, the API said it borrowed
    0.0000429 GPUs (past its borrowing limit of 0), the admin page and dashboard said
    "0 borrowed" and drew a borrowed segment: `used` was rounded to 4 decimals (0.1429) before
    it was compared with the unrounded nominal (0.142857...). The scheduler admitted the job
    on nominal quota; every view now says it borrows nothing."""
    cluster = Cluster.objects.create(
        name="mig",
        kind="local",
        settings={
            "workdir": str(tmp_path / "jobs"),
            "nodes": [{"name": "m1", "gpus": 1, "gpu_model": MIG_MODEL, "mig": True}],
        },
    )
    sync_cluster(cluster.pk)
    saved = client_for("dana").put(
        f"/api/v1/teams/vision/quotas/{MIG_MODEL}/",
        {"nominal_gpus": 1 / 7, "borrowing_limit_gpus": 0},
        format="json",
    )
    assert saved.status_code == 200, saved.json()
    body = spec(name="agent", kind="agent", mig_profile="1g.10gb", command=["sleep", "30"])
    del body["gpus_per_node"]
    job = run_until(submit_job(people["alice"], body).job, lambda j: j.state == S.RUNNING)
    assert job.gpus == pytest.approx(1 / 7) and not job.borrowed  # on nominal quota

    usage = client_for("dana").get("/api/v1/teams/vision/usage/").json()
    (row,) = [q for q in usage["quotas"] if q["gpu_model"] == MIG_MODEL]
    pages_say = {
        where: re.findall(r'class="quota-nums">(.*?)</div>', page(who, url), re.S)
        for where, who, url in (
            ("admin page", people["dana"], "/teams/vision/"),
            ("dashboard", people["alice"], "/"),
        )
    }

    assert row["borrowed_gpus"] == 0.0, row
    for where, shown in pages_say.items():
        assert shown and not [t for t in shown if "borrowed" in t], (where, shown)


def test_gpus_a_team_holds_on_a_model_whose_quota_was_deleted_are_still_shown_in_use(
    people: Any, teams: Any, local_cluster: Any, client_for: Any
) -> None:
    """Alice runs 4 GPUs of SIM-A100; Dana deletes the team's SIM-A100 quota (204) while they
    run. The scheduler goes on counting those 4 GPUs as the team's, all borrowed (nominal 0,
    reclaimable); the usage API (so `gpuq usage`), the admin page and the dashboard showed no
    quota and nothing in use, as if the team held no GPUs at all. They show a row of no
    quota: nominal 0, borrowing limit 0, all 4 borrowed."""
    job = submit_job(people["alice"], spec(name="big", gpus_per_node=4, command=["sleep", "30"]))
    run_until(job.job, lambda j: j.state == S.RUNNING)
    assert client_for("dana").delete("/api/v1/teams/vision/quotas/SIM-A100/").status_code == 204

    quotas = client_for("dana").get("/api/v1/teams/vision/usage/").json()["quotas"]
    admin_page = page(people["dana"], "/teams/vision/")
    dashboard = page(people["alice"], "/")

    assert quotas == [
        {
            "gpu_model": "SIM-A100",
            "used_gpus": 4.0,
            "nominal_gpus": 0.0,
            "borrowing_limit_gpus": 0.0,
            "borrowed_gpus": 4.0,
        }
    ]
    for where, html, nums in (
        ("admin page", admin_page, "4</span> in use with no quota for this model"),
        ("dashboard", dashboard, "4</span> used with no quota"),
    ):
        (row,) = re.findall(r'<div class="quota" data-team="vision" data-model="SIM-A100">(.*?)'
                            r'class="quota-nums">(.*?)</div>', html, re.S)  # fmt: skip
        assert "4 GPUs in use with no quota for their model, all borrowed" in row[0], (where, row)
        assert nums in row[1], (where, row)
    # No quota to change or delete: one may be added for the model.
    assert "Delete this quota" not in admin_page
    assert re.search(r'<option value="SIM-A100"', admin_page)


def test_a_team_without_quotas_is_told_its_jobs_wait_for_one_not_that_it_borrows(
    people: Any, teams: Any, local_cluster: Any
) -> None:
    """Vision has no quota. Its admin page said "No quotas yet: the team can only borrow idle
    GPUs" and the dashboard "your team can only borrow idle GPUs", but on an idle cluster the
    scheduler runs none of its jobs: they wait `no_quota` ("team vision has no quota for
    SIM-A100") until a quota is set, as both now say."""
    Quota.objects.filter(team=teams["vision"]).delete()
    job = submit_job(people["alice"], spec(name="waits")).job
    run_cycle()
    job.refresh_from_db()
    assert (job.state, job.reason["code"]) == (S.PENDING, "no_quota")  # 8 GPUs idle

    admin_page = page(people["dana"], "/teams/vision/")
    dashboard = page(people["alice"], "/")

    assert "can only borrow idle GPUs" not in admin_page
    assert "can only borrow idle GPUs" not in dashboard
    assert "the team's jobs wait until a quota is set" in admin_page
    assert "your team's jobs wait until a team admin sets a quota" in dashboard
