"""The team admin page's "Add user" form, sent as the page draws it, for someone already a
member: their role stays (as the API's add without a role), so a slip never demotes an
admin. Dana administers vision; Bob is made a second admin here."""

from __future__ import annotations

from typing import Any

from django.test import Client

from queue_service.tenancy.models import Membership
from tests.ui.test_views import posted


def add_user_form(client: Client) -> dict[str, list[str]]:
    """What a browser sends for the page's "Add user" form as drawn."""
    page = client.get("/teams/vision/").content.decode()
    return posted(page[page.rindex("<form", 0, page.index('class="add-row"')) :], "<form")


def test_adding_an_admin_again_with_the_forms_defaults_keeps_them_admin(people: Any) -> None:
    Membership.objects.filter(user=people["bob"], team__slug="vision").update(role="admin")
    dana = Client()
    dana.force_login(people["dana"])
    form = add_user_form(dana)
    form["username"] = ["bob"]

    response = dana.post("/teams/vision/members/", form, follow=True)

    assert response.status_code == 200
    assert Membership.objects.get(user=people["bob"], team__slug="vision").role == "admin"
    assert "bob is now admin of vision" in response.content.decode()


def test_adding_a_new_user_with_the_forms_defaults_makes_them_a_member(people: Any) -> None:
    dana = Client()
    dana.force_login(people["dana"])
    form = add_user_form(dana)
    form["username"] = ["charlie"]

    response = dana.post("/teams/vision/members/", form)

    assert response.status_code == 302
    assert Membership.objects.get(user=people["charlie"], team__slug="vision").role == "member"
