"""A team admin may remove themselves from the team, or make themselves a member (while
another admin is left). Either succeeds, but the page it then went to, the team's admin
page, is no longer theirs: a 404 ("Not found") after leaving, a 403 after stepping down,
for an action that worked. They land on the teams page instead, told what they did."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from queue_service.tenancy.models import Membership


@pytest.mark.parametrize(
    ("url", "data", "told", "role"),
    [
        ("/teams/vision/members/dana/remove/", {}, "Removed dana from vision.", None),
        (
            "/teams/vision/members/",
            {"username": "dana", "role": "member"},
            "dana is now member of vision.",
            "member",
        ),
    ],
    ids=["leaves", "steps-down"],
)
def test_an_admin_who_leaves_or_steps_down_lands_on_the_teams_page_told_so(
    people: Any, url: str, data: dict[str, str], told: str, role: str | None
) -> None:
    # A team keeps an admin: bob is one too.
    Membership.objects.filter(user=people["bob"]).update(role=Membership.Role.ADMIN)
    dana = Client()
    dana.force_login(people["dana"])

    response = dana.post(url, data, follow=True)

    assert response.status_code == 200
    assert response.redirect_chain == [("/teams/", 302)]
    assert told in re.findall(r'<li class="msg-[a-z]+">(.*?)</li>', response.content.decode())
    kept = Membership.objects.filter(user=people["dana"], team__slug="vision")
    assert list(kept.values_list("role", flat=True)) == ([role] if role else [])


def test_an_admin_changing_another_member_stays_on_the_team_page(people: Any) -> None:
    dana = Client()
    dana.force_login(people["dana"])
    response = dana.post("/teams/vision/members/", {"username": "bob", "role": "admin"})
    assert response.status_code == 302
    assert response["Location"] == "/teams/vision/"
