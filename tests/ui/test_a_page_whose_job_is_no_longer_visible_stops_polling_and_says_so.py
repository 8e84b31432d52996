"""A job page polls its live parts (state, array, log). Once its viewer may no longer see the
job (they left the team, or the job is gone), every poll is a 404, which htmx does not swap:
the page went on asking every 3 s for ever while showing the job as it last was. A polled
fragment that is not the viewer's to see now has the page reloaded (htmx's HX-Refresh), which
shows the 404 page and polls nothing; what it answers is the same whether the job exists or
not."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from django.test import Client
from playwright.sync_api import expect

from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Membership
from tests.conftest import spec

HX = {"HX-Request": "true"}


def client_of(person: Any) -> Client:
    client = Client()
    client.force_login(person)
    return client


@pytest.fixture
def alice_task(people: Any) -> Any:
    return submit_job(people["alice"], spec(name="alices-sweep", array="0-1")).job


FRAGMENTS = ["live/", "array/", "log/?offset=0"]


@pytest.mark.parametrize("fragment", FRAGMENTS)
def test_a_poll_of_a_job_one_may_not_see_reloads_the_page(
    people: Any, alice_task: Any, fragment: str
) -> None:
    charlie = client_of(people["charlie"])
    for pk in (alice_task.pk, uuid.uuid4()):  # another team's job, and none at all: alike
        response = charlie.get(f"/jobs/{pk}/{fragment}", headers=HX)
        assert response.status_code == 200
        assert response.headers.get("HX-Refresh") == "true"
        assert response.content == b""


@pytest.mark.parametrize("fragment", FRAGMENTS)
def test_without_htmx_the_fragment_is_still_a_404(
    people: Any, alice_task: Any, fragment: str
) -> None:
    response = client_of(people["charlie"]).get(f"/jobs/{alice_task.pk}/{fragment}")
    assert response.status_code == 404
    assert "HX-Refresh" not in response.headers


@pytest.mark.parametrize("fragment", FRAGMENTS)
def test_a_teammates_poll_is_answered_as_before(
    people: Any, alice_task: Any, fragment: str
) -> None:
    response = client_of(people["bob"]).get(f"/jobs/{alice_task.pk}/{fragment}", headers=HX)
    assert response.status_code == 200
    assert "HX-Refresh" not in response.headers
    assert response.content


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_teammate_removed_from_the_team_sees_the_job_page_turn_into_not_found(
    people: Any, local_cluster: Any, sign_in: Any
) -> None:
    job = submit_job(people["alice"], spec(name="alices-run")).job
    page = sign_in("bob")
    polls: list[int] = []
    page.on("response", lambda r: polls.append(r.status) if "/live/" in r.url else None)
    page.goto(f"/jobs/{job.pk}/")
    expect(page.get_by_role("heading", level=1)).to_have_text("alices-run")

    Membership.objects.filter(user=people["bob"], team__slug="vision").delete()

    expect(page.get_by_role("heading", level=1)).to_have_text("Not found", timeout=10_000)
    assert re.search(rf"/jobs/{job.pk}/$", page.url)
    polls.clear()
    page.wait_for_timeout(4_000)  # longer than the live part's 3 s
    assert polls == []
