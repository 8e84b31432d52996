"""A quota change through the API or the team admin page: its answer shows the quotas as
saved, and a lending limit above the nominal quota is refused. Dana administers vision, whose
SIM-A100 quota (the fixture's) is nominal 8, borrowing 8, no lending limit."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from queue_service.tenancy.models import Quota


def test_a_quota_post_answers_with_the_quotas_as_saved(client_for: Any) -> None:
    """POST /teams/{slug}/quotas/ answers with the team's quotas after the change: a script
    that reads the answer to confirm its change is never shown the old values."""
    response = client_for("dana").post(
        "/api/v1/teams/vision/quotas/",
        {"gpu_model": "SIM-A100", "nominal_gpus": 4, "borrowing_limit_gpus": 2},
        format="json",
    )

    assert response.status_code == 200, response.content
    saved = Quota.objects.get(team__slug="vision", gpu_model="SIM-A100")
    assert (saved.nominal_gpus, saved.borrowing_limit_gpus) == (4, 2)
    answered = {q["gpu_model"]: q for q in response.json()}
    assert answered["SIM-A100"]["nominal_gpus"] == 4, response.json()
    assert answered["SIM-A100"]["borrowing_limit_gpus"] == 2, response.json()


@pytest.mark.parametrize(
    ("who", "lending", "refused"),
    [
        ("dana", 20, True),  # a typo for 2
        ("staff", 4.5, True),  # site staff are held to it too: it is no ceiling, a contradiction
        ("dana", 4, False),  # all of the guaranteed GPUs may be lent
        ("dana", 0, False),
    ],
)
def test_a_lending_limit_is_at_most_the_nominal_quota(
    client_for: Any, who: str, lending: float, refused: bool
) -> None:
    """A team lends only GPUs it is guaranteed (Kueue's ClusterQueue webhook: "lendingLimit
    must be less than or equal to the nominalQuota"): a lending limit above the nominal quota
    is a 400 naming lending_limit_gpus and the nominal quota, and nothing is stored."""
    response = client_for(who).post(
        "/api/v1/teams/vision/quotas/",
        {
            "gpu_model": "SIM-A100",
            "nominal_gpus": 4,
            "borrowing_limit_gpus": 2,
            "lending_limit_gpus": lending,
        },
        format="json",
    )

    quota = Quota.objects.get(team__slug="vision", gpu_model="SIM-A100")
    if refused:
        assert response.status_code == 400, response.content
        assert "nominal quota (4 GPUs)" in response.json()["lending_limit_gpus"][0]
        assert (quota.nominal_gpus, quota.lending_limit_gpus) == (8, None)
    else:
        assert response.status_code == 200, response.content
        assert (quota.nominal_gpus, quota.lending_limit_gpus) == (4, lending)


def test_the_team_admin_page_refuses_a_lending_limit_above_the_nominal_quota(
    people: Any, local_cluster: Any
) -> None:
    """The page's quota form is held to the same rule, and says why beside what was typed."""
    dana = Client()
    dana.force_login(people["dana"])

    response = dana.post(
        "/teams/vision/quotas/",
        {
            "gpu_model": "SIM-A100",
            "nominal_gpus": "4",
            "borrowing_limit_gpus": "2",
            "lending_limit_gpus": "20",
        },
    )

    assert response.status_code == 400
    assert "at most the nominal quota (4 GPUs)" in response.content.decode()
    quota = Quota.objects.get(team__slug="vision", gpu_model="SIM-A100")
    assert (quota.nominal_gpus, quota.lending_limit_gpus) == (8, None)
