"""A team's nominal quotas may add up to the site's ceiling for the team, MIG slices (a
seventh of a GPU each) included. Sevenths are not exact in floating point: 1/7 + 5/7 + 9/7
+ 6/7, summed as the quotas are, is 3.0000000000000004, not 3. The ceiling check, as the
borrowing limits' check does, takes a sum within 1e-9 of the ceiling as at it. Dana
administers vision; its ceiling is 3 GPUs here, with MIG quotas on three models already."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.tenancy.models import Quota, Team

pytestmark = pytest.mark.django_db


@pytest.fixture
def vision_in_sevenths(teams: dict[str, Team]) -> Team:
    vision = teams["vision"]
    vision.quotas.all().delete()
    vision.max_nominal_gpus = 3
    vision.max_borrowing_gpus = 3
    vision.save()
    for model, sevenths in (("A100-1", 1), ("A100-2", 5), ("A100-3", 9)):
        Quota.objects.create(
            team=vision, gpu_model=model, nominal_gpus=sevenths / 7, borrowing_limit_gpus=0
        )
    return vision


@pytest.mark.parametrize(
    ("sevenths", "saved"),
    [
        (6, True),  # 1 + 5 + 9 + 6 = 21 sevenths: exactly the ceiling
        (7, False),  # a slice past it
    ],
)
def test_a_nominal_quota_that_brings_the_sum_to_the_ceiling_is_saved_and_past_it_refused(
    client_for: Any, people: Any, vision_in_sevenths: Team, sevenths: int, saved: bool
) -> None:
    response = client_for("dana").post(
        "/api/v1/teams/vision/quotas/",
        {"gpu_model": "A100-4", "nominal_gpus": sevenths / 7, "borrowing_limit_gpus": 0},
        format="json",
    )

    if saved:
        assert response.status_code == 200, response.json()
        assert Quota.objects.get(team=vision_in_sevenths, gpu_model="A100-4").nominal_gpus == 6 / 7
    else:
        assert response.status_code == 400
        assert set(response.json()) == {"nominal_gpus"}, response.json()
        assert not Quota.objects.filter(team=vision_in_sevenths, gpu_model="A100-4").exists()
