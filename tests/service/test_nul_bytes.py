"""A NUL byte anywhere a user can put one is a 400, never a 500. PostgreSQL text cannot
hold NUL, so a lookup, filter or insert given one fails with a DataError: every GET below
was a 500 before queue_service/middleware.py (but `?%00=x`, a parameter nobody reads: a
200), as were the first three forms (token name, member, quota to delete); the last two
were refused by their fields already."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from queue_service.jobs.models import Job
from queue_service.tenancy.models import ApiToken, Membership, Quota

API_GETS = [
    "/api/v1/jobs/?name=%00",
    "/api/v1/jobs/?team=%00",
    "/api/v1/jobs/?user=%00",
    "/api/v1/jobs/?state=%00",
    "/api/v1/jobs/?cluster=%00",
    "/api/v1/jobs/?priority=%00",
    "/api/v1/jobs/?kind=%00",
    "/api/v1/jobs/?%00=x",
    "/api/v1/queue/?team=%00",
    "/api/v1/clusters/%00/",
    "/api/v1/priority-classes/%00/",
    "/api/v1/teams/%00/",
]
UI_POSTS = [
    ("/me/tokens/", {"name": "laptop\x00"}),
    ("/teams/vision/members/", {"username": "bob\x00", "role": "admin"}),
    ("/teams/vision/quotas/delete/", {"gpu_model": "SIM-A100\x00"}),
    ("/teams/vision/quotas/", {"gpu_model": "H100\x00", "nominal_gpus": "1"}),
    ("/submit/", {"name": "x", "command": "true", "form_token": "t\x00"}),
]


@pytest.mark.parametrize("url", API_GETS)
def test_a_nul_in_an_api_path_or_query_is_a_json_400(
    client_for: Any, people: Any, url: str
) -> None:
    response = client_for("dana").get(url)
    assert response.status_code == 400
    # Keyed by the parameter where one holds it (test_api_odd_requests_are_a_json_400_...).
    assert "contains a NUL byte" in str(response.json())


@pytest.fixture
def dana(people: Any) -> Client:
    client = Client()
    client.force_login(people["dana"])
    return client


def test_a_nul_in_a_page_query_is_a_400(dana: Client) -> None:
    response = dana.get("/queue/?team=%00")
    assert response.status_code == 400
    assert b"NUL byte" in response.content


@pytest.mark.parametrize(("url", "form"), UI_POSTS, ids=[u for u, _ in UI_POSTS])
def test_a_nul_in_a_form_field_is_a_400_and_changes_nothing(
    dana: Client, people: Any, url: str, form: dict[str, str]
) -> None:
    before = (
        ApiToken.objects.count(),
        Membership.objects.count(),
        Quota.objects.count(),
        Job.objects.count(),
    )
    response = dana.post(url, form)
    assert response.status_code == 400
    assert b"NUL byte" in response.content
    after = (
        ApiToken.objects.count(),
        Membership.objects.count(),
        Quota.objects.count(),
        Job.objects.count(),
    )
    assert after == before


def test_a_nul_in_a_json_field_is_a_400_naming_the_field(client_for: Any) -> None:
    response = client_for("dana").post(
        "/api/v1/teams/vision/members/", {"username": "bob\x00"}, format="json"
    )
    assert response.status_code == 400
    assert "username" in response.json()
