"""A team admin's member form that refuses an addition keeps what was typed."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from queue_service.tenancy.models import Membership

pytestmark = pytest.mark.django_db


def client_of(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_refused_member_addition_keeps_the_username_and_role_typed(people: Any) -> None:
    dana = client_of(people["dana"])  # vision's team admin

    response = dana.post("/teams/vision/members/", {"username": "charlei", "role": "admin"})

    assert response.status_code == 400
    page = response.content.decode()
    assert "no active user" in page
    add_form = page[page.index('class="add-row"') :]
    add_form = add_form[: add_form.index("</form>")]
    assert 'value="charlei"' in add_form, add_form
    assert '<option value="admin" selected>' in add_form, add_form
    assert not Membership.objects.filter(user__username="charlei").exists()
