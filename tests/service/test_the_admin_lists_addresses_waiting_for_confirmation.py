"""Site staff see in the admin which notify addresses wait for their owner's confirmation,
and until when the link works, but never the link's nonce (it would let staff confirm an
address for its owner), and cannot make or edit a request there: only
tenancy.services.set_email mails the link a request needs."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from queue_service.tenancy.models import PendingEmail

NONCE = "n0nce-that-confirms-the-address"


@pytest.fixture
def waiting(people: Any) -> PendingEmail:
    return PendingEmail.objects.create(
        user=people["alice"], email="alice@new.example", nonce=NONCE, requested_at=timezone.now()
    )


def test_staff_see_the_addresses_waiting_and_when_their_links_expire(
    site_admin: Client, waiting: PendingEmail
) -> None:
    listing = site_admin.get("/admin/tenancy/pendingemail/")
    assert listing.status_code == 200
    page = listing.content.decode()
    assert "alice@new.example" in page and "alice" in page
    assert "column-expires_at" in page
    shown = site_admin.get(f"/admin/tenancy/pendingemail/{waiting.pk}/change/")
    assert shown.status_code == 200
    assert "alice@new.example" in shown.content.decode()
    assert NONCE not in page + shown.content.decode()


def test_staff_cannot_add_or_edit_a_request_there(
    site_admin: Client, waiting: PendingEmail
) -> None:
    assert site_admin.get("/admin/tenancy/pendingemail/add/").status_code == 403
    edited = site_admin.post(
        f"/admin/tenancy/pendingemail/{waiting.pk}/change/",
        {"email": "mallory@evil.example", "nonce": "x", "requested_at_0": "2026-01-01"},
    )
    assert edited.status_code in (302, 403)
    waiting.refresh_from_db()
    assert (waiting.email, waiting.nonce) == ("alice@new.example", NONCE)


def test_staff_may_drop_a_request_whose_link_then_no_longer_works(
    site_admin: Client, waiting: PendingEmail
) -> None:
    answer = site_admin.post(f"/admin/tenancy/pendingemail/{waiting.pk}/delete/", {"post": "yes"})
    assert answer.status_code == 302
    assert not PendingEmail.objects.exists()
