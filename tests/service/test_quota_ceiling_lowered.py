"""A team over its site ceiling (the site lowered the ceiling, or staff set quotas past it)
must still let its team admin move back towards it: the ceiling refuses a change that takes
the team's nominal sum further past it, not one that lowers it or leaves it."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.tenancy.models import Quota


@pytest.mark.parametrize(
    ("model", "body", "status"),
    [
        # "*" from 4 to 2: the sum goes from 12 to 10, towards the ceiling.
        ("*", {"nominal_gpus": 2, "borrowing_limit_gpus": 0}, 200),
        # The same nominal as now, a smaller borrowing limit: nothing grows.
        ("SIM-A100", {"nominal_gpus": 8, "borrowing_limit_gpus": 2}, 200),
        # "*" from 4 to 5: further past it.
        ("*", {"nominal_gpus": 5, "borrowing_limit_gpus": 0}, 400),
    ],
    ids=["lowered", "borrowing tightened", "raised"],
)
def test_over_a_lowered_ceiling_a_team_admin_may_move_towards_it_only(
    client_for: Any, teams: Any, model: str, body: dict[str, int], status: int
) -> None:
    vision = teams["vision"]
    # vision holds SIM-A100 nominal 8 (the fixture), borrowing 4, and "*" nominal 4.
    Quota.objects.filter(team=vision, gpu_model="SIM-A100").update(borrowing_limit_gpus=4)
    Quota.objects.create(team=vision, gpu_model="*", nominal_gpus=4, borrowing_limit_gpus=0)
    vision.max_nominal_gpus = 8  # the site lowers it (Django admin): the team is 4 over
    vision.save()

    response = client_for("dana").put(f"/api/v1/teams/vision/quotas/{model}/", body, format="json")

    assert response.status_code == status, response.json()
    quota = Quota.objects.get(team=vision, gpu_model=model)
    if status == 200:
        assert (quota.nominal_gpus, quota.borrowing_limit_gpus) == (
            body["nominal_gpus"],
            body["borrowing_limit_gpus"],
        )
    else:
        assert "may add up to 8 GPUs" in str(response.json()["nominal_gpus"])
        assert quota.nominal_gpus == 4
