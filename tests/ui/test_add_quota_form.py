"""The team admin page's "Add a quota for another GPU model" form posts to the same view as a
quota's own form, which replaces the quota it names. Offered a model that has a quota already,
it replaces that quota with the adding form's two boxes (defaults: nominal 0, borrow 0),
silently dropping its lending limit and max running jobs: a slip wipes the team's
guaranteed GPUs."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client

from queue_service.tenancy.models import Quota


def test_the_add_a_quota_form_offers_only_models_without_a_quota(
    people: Any, local_cluster: Any
) -> None:
    quota = Quota.objects.get(team__slug="vision", gpu_model="SIM-A100")  # the fixture's
    quota.lending_limit_gpus, quota.max_running_jobs = 2, 3
    quota.save()
    dana = Client()
    dana.force_login(people["dana"])  # vision's team admin

    page = dana.get("/teams/vision/").content.decode()

    adding = page[page.index('<details class="more"') :]
    adding = adding[: adding.index("</details>")]
    offered = re.findall(r'<option value="([^"]*)"', adding)
    assert "*" in offered  # vision has no any-model quota: that one may be added
    assert "SIM-A100" not in offered, (
        "the adding form offers SIM-A100, which has a quota: 'Add' replaces it"
    )


def test_an_add_from_a_stale_page_does_not_replace_a_quota_added_meanwhile(
    people: Any, local_cluster: Any
) -> None:
    dana = Client()
    dana.force_login(people["dana"])
    # The page was drawn before SIM-A100 had a quota; its adding form still offers it.
    response = dana.post(
        "/teams/vision/quotas/",
        {"adding": "1", "gpu_model": "SIM-A100", "nominal_gpus": "0", "borrowing_limit_gpus": "0"},
    )

    assert response.status_code == 400
    assert "has a SIM-A100 quota already" in response.content.decode()
    assert Quota.objects.get(team__slug="vision", gpu_model="SIM-A100").nominal_gpus == 8
