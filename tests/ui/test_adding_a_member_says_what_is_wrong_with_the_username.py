"""The team page's "Add user" form sent with no username said "no active user ''", and one
with a 100 KB username repeated all of it in the message. An empty username is asked for; a
long one is shown as its first 64 characters and "…" (as the API cuts what it repeats)."""

from __future__ import annotations

import html
from typing import Any

import pytest
from django.test import Client

from queue_service.tenancy.models import Membership


@pytest.fixture
def dana(people: Any) -> Client:
    client = Client()
    client.force_login(people["dana"])  # vision's team admin
    return client


def members() -> list[str]:
    return sorted(
        Membership.objects.filter(team__slug="vision").values_list("user__username", flat=True)
    )


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("", "give a username"),
        ("   ", "give a username"),  # trimmed, as the form's value is
        ("nobody", "no active user 'nobody'"),
        ("n" * 64, f"no active user '{'n' * 64}'"),
        ("n" * 65, f"no active user '{'n' * 64}…'"),
        ("n" * 100_000, f"no active user '{'n' * 64}…'"),
    ],
    ids=["empty", "blank", "unknown", "64 characters", "65 characters", "100 KB"],
)
def test_a_refused_username_is_named_in_a_few_words(dana: Client, typed: str, message: str) -> None:
    before = members()

    response = dana.post("/teams/vision/members/", {"username": typed, "role": "member"})

    page = html.unescape(response.content.decode())
    assert response.status_code == 400
    assert message in page
    assert "no active user ''" not in page
    assert "n" * 200 not in page  # neither in the message nor in the box it was typed in
    assert members() == before
