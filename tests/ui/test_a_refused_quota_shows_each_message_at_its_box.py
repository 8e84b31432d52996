"""A refused quota change shows each message at the box it is about, in the form of the quota
it was for (a team has one form per GPU model, and one to add a quota), marked for screen
readers (aria-invalid, aria-describedby): not as a list at the top of the card naming the
API's fields ("nominal_gpus: ..."), which does not say which quota's form it is about."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from queue_service.tenancy.models import Quota


@pytest.fixture
def dana(people: Any, local_cluster: Any) -> Client:
    # Two quotas, so two forms: the message must be in the right one.
    Quota.objects.create(
        team=people["dana"].memberships.get().team,
        gpu_model="*",
        nominal_gpus=2,
        borrowing_limit_gpus=2,
    )
    client = Client()
    client.force_login(people["dana"])
    return client


def form_of(page: str, model: str) -> str:
    start = page.index(f'<div class="quota-edit" data-model="{model}">')
    end = page.index("</form>", start)
    return page[start:end]


def adding_form(page: str) -> str:
    start = page.index('<details class="more"')
    return page[start : page.index("</details>", start)]


def message_at(form: str, name: str) -> str:
    """The text of the messages the input `name` of `form` points at, checking it is marked."""
    tag = re.search(rf'<input[^>]*name="{name}"[^>]*>', form)
    assert tag, f"no input {name}"
    assert 'aria-invalid="true"' in tag.group(0), f"{name} is not marked invalid"
    described = re.search(r'aria-describedby="([^"]+)"', tag.group(0))
    assert described, f"{name} points at no message"
    messages = re.search(rf'id="{described.group(1)}"[^>]*>(.*?)</ul>', form, re.S)
    assert messages, f"no message {described.group(1)} in the form"
    return re.sub(r"<[^>]+>", " ", messages.group(1))


@pytest.mark.parametrize(
    ("name", "typed", "message"),
    [
        ("nominal_gpus", "40", "the team's nominal quotas may add up to 32 GPUs"),
        ("nominal_gpus", "-1", "Ensure this value is greater than or equal to 0."),
        ("borrowing_limit_gpus", "lots", "A valid number is required."),
        ("lending_limit_gpus", "5", "at most the nominal quota"),
        ("max_running_jobs", "1.5", "A valid integer is required."),
    ],
)
def test_a_quotas_message_is_at_its_box_in_its_form(
    dana: Client, name: str, typed: str, message: str
) -> None:
    data = {"gpu_model": "SIM-A100", "nominal_gpus": "4", "borrowing_limit_gpus": "4"}

    response = dana.post("/teams/vision/quotas/", {**data, name: typed})

    page = response.content.decode().replace("&#x27;", "'")
    assert response.status_code == 400
    assert message in message_at(form_of(page, "SIM-A100"), name)
    assert 'aria-invalid="true"' not in form_of(page, "*")  # the other quota's form
    assert f"{name}:" not in page  # no API field names shown to people


def test_a_refused_new_quota_shows_its_message_at_the_adding_forms_box(dana: Client) -> None:
    Quota.objects.filter(gpu_model="*").delete()  # so that the page offers to add one

    response = dana.post(
        "/teams/vision/quotas/",
        {"adding": "1", "gpu_model": "*", "nominal_gpus": "1", "borrowing_limit_gpus": "x"},
    )

    page = response.content.decode()
    assert response.status_code == 400
    form = adding_form(page)
    assert form.startswith('<details class="more" open>')
    assert "A valid number is required." in message_at(form, "borrowing_limit_gpus")
    assert 'aria-invalid="true"' not in form_of(page, "SIM-A100")


def test_a_message_no_form_on_the_page_can_show_is_listed_in_words(dana: Client) -> None:
    # Every model has a quota (the fixture's SIM-A100 and *): no adding form is drawn.
    response = dana.post(
        "/teams/vision/quotas/",
        {"adding": "1", "gpu_model": "SIM-H100", "nominal_gpus": "-1", "borrowing_limit_gpus": "1"},
    )

    page = response.content.decode()
    assert response.status_code == 400
    assert "Nominal: Ensure this value is greater than or equal to 0." in page
    assert "nominal_gpus:" not in page
