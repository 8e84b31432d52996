"""A quota's own form changes that quota. Left open while another admin deleted the quota, its
Save re-created it (the view called set_quota, which creates or replaces): a quota nobody meant
to have, back with the values of an old page. Saved now, it changes nothing and says that the
quota was deleted meanwhile, with the form to add it again open, as typed. The adding form
already refuses to replace a quota added meanwhile (test_add_quota_form.py); the API's PUT
stays create-or-replace."""

from __future__ import annotations

import html
from typing import Any

import pytest
from django.test import Client
from rest_framework.exceptions import ValidationError

from queue_service.tenancy.models import Quota
from queue_service.tenancy.services import delete_quota, set_quota
from tests.ui.test_views import posted

DELETED = "this quota was deleted meanwhile; add it again if you want it"


@pytest.fixture
def dana(people: Any) -> Client:
    client = Client()
    client.force_login(people["dana"])  # vision's team admin
    return client


def test_saving_the_form_of_a_quota_deleted_meanwhile_changes_nothing_and_says_so(
    dana: Client,
    people: Any,
    local_cluster: Any,  # its nodes are SIM-A100s
) -> None:
    page = dana.get("/teams/vision/").content.decode()
    form = posted(page, '<div class="quota-edit" data-model="SIM-A100">')
    delete_quota(people["staff"], people["dana"].memberships.get().team, "SIM-A100")

    response = dana.post("/teams/vision/quotas/", {**form, "nominal_gpus": ["4"]})

    shown = html.unescape(response.content.decode())
    assert response.status_code == 400
    assert DELETED in shown
    assert not Quota.objects.filter(team__slug="vision", gpu_model="SIM-A100").exists()
    # The form to add it again, open, with the model and what was typed.
    adding = posted(shown, '<details class="more" open>')
    assert (adding["gpu_model"], adding["nominal_gpus"]) == (["SIM-A100"], ["4"])


def test_when_the_adding_form_does_not_offer_its_model_the_message_is_in_words(
    dana: Client, people: Any
) -> None:
    # No cluster has SIM-A100s here: the adding form offers only "*". The message must not
    # sit at that form's model box, which shows another model.
    form = posted(
        dana.get("/teams/vision/").content.decode(),
        '<div class="quota-edit" data-model="SIM-A100">',
    )
    delete_quota(people["staff"], people["dana"].memberships.get().team, "SIM-A100")

    response = dana.post("/teams/vision/quotas/", form)

    shown = html.unescape(response.content.decode())
    assert response.status_code == 400
    assert f"GPU model: {DELETED}" in shown
    assert '<details class="more" open>' not in shown
    assert not Quota.objects.filter(team__slug="vision", gpu_model="SIM-A100").exists()


@pytest.mark.parametrize(
    ("there", "existing", "outcome"),
    [
        (True, True, "changed"),
        (False, True, "refused"),
        (True, False, "changed"),  # the API's PUT: create or replace
        (False, False, "created"),
    ],
)
def test_set_quota_for_an_existing_quota_changes_only_one_that_is_there(
    people: Any, there: bool, existing: bool, outcome: str
) -> None:
    team = people["dana"].memberships.get().team
    if not there:
        Quota.objects.filter(team=team, gpu_model="SIM-A100").delete()
    values = {"nominal_gpus": 4.0, "borrowing_limit_gpus": 4.0}

    if outcome == "refused":
        with pytest.raises(ValidationError) as refused:
            set_quota(people["dana"], team, "SIM-A100", values, existing=existing)
        assert refused.value.detail == {"gpu_model": [DELETED]}
        assert not Quota.objects.filter(team=team, gpu_model="SIM-A100").exists()
    else:
        set_quota(people["dana"], team, "SIM-A100", values, existing=existing)
        assert Quota.objects.get(team=team, gpu_model="SIM-A100").nominal_gpus == 4


def test_the_apis_put_still_creates_a_quota_that_is_not_there(people: Any, client_for: Any) -> None:
    Quota.objects.filter(team__slug="vision", gpu_model="SIM-A100").delete()

    response = client_for("dana").put(
        "/api/v1/teams/vision/quotas/SIM-A100/",
        {"nominal_gpus": 2, "borrowing_limit_gpus": 2},
        format="json",
    )

    assert response.status_code == 200, response.content
    assert Quota.objects.get(team__slug="vision", gpu_model="SIM-A100").nominal_gpus == 2
