"""GET /api/v1/teams/{slug}/usage/: what the team admin page shows, for tools (chargeback,
dashboards). Dana administers vision (Alice's and Bob's team); Charlie is an outsider."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import pytest
from django.utils import timezone

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.conftest import record_runs, spec

TODAY = timezone.now().date()
D = TODAY - timedelta(days=3)  # away from midnight's edge: runs end before the test runs


def on(day: date, hour: float) -> datetime:
    return datetime.combine(day, time(), UTC) + timedelta(hours=hour)


@pytest.fixture
def history(people: dict[str, Any], local_cluster: Any) -> None:
    """Alice: 2 GPUs for 2 h on D. Bob: 1 GPU from 22:00 the day before D to 01:00 on D (2 h
    and 1 h), and a second run on D after a preemption, 0.5 h. Alice also holds 2 GPUs now."""
    alice = submit_job(people["alice"], spec(name="a", gpus_per_node=2)).job
    bob = submit_job(people["bob"], spec(name="b")).job
    record_runs(alice, (on(D, 10), on(D, 12)))
    record_runs(bob, (on(D, -2), on(D, 1)), (on(D, 5), on(D, 5.5)))
    running = submit_job(people["alice"], spec(name="now", gpus_per_node=2, gpu_model="SIM-A100"))
    Job.objects.filter(pk=running.job.pk).update(state=Job.State.RUNNING, gpu_model="SIM-A100")


def test_a_team_admin_reads_gpu_hours_per_user_and_day_and_the_quota_in_use(
    client_for: Any, history: None
) -> None:
    response = client_for("dana").get("/api/v1/teams/vision/usage/")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["team"], body["from"], body["to"]) == (
        "vision",
        str(TODAY - timedelta(days=13)),
        str(TODAY),
    )
    assert body["total_gpu_hours"] == 7.5
    assert body["users"] == [
        {"user": "alice", "gpu_hours": 4.0},
        {"user": "bob", "gpu_hours": 3.5},
    ]
    assert body["days"] == [
        {"day": str(D - timedelta(days=1)), "user": "bob", "gpu_hours": 2.0},
        {"day": str(D), "user": "alice", "gpu_hours": 4.0},
        {"day": str(D), "user": "bob", "gpu_hours": 1.5},
    ]
    assert body["quotas"] == [
        {
            "gpu_model": "SIM-A100",
            "used_gpus": 2.0,
            "nominal_gpus": 8.0,
            "borrowing_limit_gpus": 8.0,
            "borrowed_gpus": 0.0,
        }
    ]


def test_the_period_bounds_the_report(client_for: Any, history: None) -> None:
    body = client_for("dana").get(f"/api/v1/teams/vision/usage/?from={D}&to={D}").json()
    assert (body["from"], body["to"], body["total_gpu_hours"]) == (str(D), str(D), 5.5)
    assert [d["day"] for d in body["days"]] == [str(D), str(D)]
    before = client_for("dana").get(f"/api/v1/teams/vision/usage/?to={D - timedelta(days=2)}")
    assert before.json()["total_gpu_hours"] == 0.0 and before.json()["days"] == []


@pytest.mark.parametrize(
    ("who", "status", "message"),
    [
        ("dana", 200, None),  # the team's admin
        ("root", 200, None),  # site staff
        ("alice", 403, "only an admin of this team can read its usage"),  # a member
        ("bob", 403, "only an admin of this team can read its usage"),
        ("charlie", 404, "Not found."),  # an outsider: the team does not exist for him
    ],
)
def test_usage_is_for_the_team_s_admins(
    client_for: Any, who: str, status: int, message: str | None
) -> None:
    response = client_for("staff" if who == "root" else who).get("/api/v1/teams/vision/usage/")
    assert response.status_code == status
    if message is not None:
        assert response.json() == {"detail": message}


TOMORROW = TODAY + timedelta(days=1)
FIRST_ALLOWED = f"days run from 2000-01-01 to today ({TODAY})"


@pytest.mark.parametrize(
    ("query", "errors"),
    [
        (
            "from=2025-02-30",
            {"from": ["Date has wrong format. Use one of these formats instead: YYYY-MM-DD."]},
        ),
        (
            "to=yesterday",
            {"to": ["Date has wrong format. Use one of these formats instead: YYYY-MM-DD."]},
        ),
        (f"to={TOMORROW}", {"to": [FIRST_ALLOWED]}),
        ("from=1999-12-31", {"from": [FIRST_ALLOWED]}),
        ("from=0001-01-01&to=9999-12-31", {"from": [FIRST_ALLOWED], "to": [FIRST_ALLOWED]}),
        (f"from={TODAY}&to={D}", {"from": [f"{TODAY} is after to ({D})"]}),
        (f"from={TODAY - timedelta(days=366)}", {"from": ["at most 366 days at once"]}),
        (
            "from=",
            {"from": ["Date has wrong format. Use one of these formats instead: YYYY-MM-DD."]},
        ),
    ],
)
def test_a_bad_period_is_a_400_naming_the_parameter(
    client_for: Any, people: Any, query: str, errors: dict[str, list[str]]
) -> None:
    response = client_for("dana").get(f"/api/v1/teams/vision/usage/?{query}")
    assert response.status_code == 400
    assert response.json() == errors


def test_the_longest_period_is_accepted(client_for: Any, people: Any) -> None:
    first = TODAY - timedelta(days=365)
    response = client_for("dana").get(f"/api/v1/teams/vision/usage/?from={first}")
    assert response.status_code == 200
    assert (response.json()["from"], response.json()["to"]) == (str(first), str(TODAY))
