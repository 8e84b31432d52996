"""GET/PATCH /api/v1/me/: the caller's own account, and the address a job's `notify` writes
to. There is no id in the path: each person reads and changes only their own (Alice and Bob
are in vision, Charlie is language's admin)."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from queue_service.jobs.models import Job
from tests.conftest import spec

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("who", "memberships"),
    [
        ("alice", [{"team": "vision", "role": "member"}]),
        ("bob", [{"team": "vision", "role": "member"}]),
        ("charlie", [{"team": "language", "role": "admin"}]),
        ("staff", []),
    ],
)
def test_each_person_reads_their_own_account(
    client_for: Any, people: dict[str, Any], who: str, memberships: list[dict[str, str]]
) -> None:
    body = client_for(who).get("/api/v1/me/").json()

    assert body == {
        "username": people[who].username,
        "email": "",
        "is_staff": who == "staff",
        "teams": memberships,
        "pending_email": None,  # a new address waiting for its link to be followed
        "pending_email_expires": None,
        "detail": None,
    }


def test_a_new_address_waits_for_its_link_and_clearing_one_refuses_notify_again(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any]
) -> None:
    alice = client_for("alice")

    set_ = alice.patch("/api/v1/me/", {"email": "  alice@example.org "}, format="json")
    pending = alice.post("/api/v1/jobs/", spec(notify=["end"]), format="json")
    people["alice"].email = "alice@example.org"  # as following the mailed link does
    people["alice"].save()
    confirmed = alice.post("/api/v1/jobs/", spec(notify=["end"]), format="json")
    cleared = alice.patch("/api/v1/me/", {"email": ""}, format="json")
    after = alice.post("/api/v1/jobs/", spec(notify=["end"]), format="json")

    assert set_.status_code == 200, set_.content
    assert (set_.json()["email"], set_.json()["pending_email"]) == ("", "alice@example.org")
    assert [m.to for m in mailoutbox] == [["alice@example.org"]]
    assert pending.status_code == 400 and "no email address" in pending.json()["notify"][0]
    assert confirmed.status_code == 201, confirmed.content
    assert (cleared.status_code, cleared.json()["email"]) == (200, "")
    assert after.status_code == 400 and "no email address" in after.json()["notify"][0]
    people["bob"].refresh_from_db()
    assert people["bob"].email == ""  # only the caller's own
    assert Job.objects.count() == 1
    assert len(mailoutbox) == 1  # clearing mails nothing


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"email": "not-an-address"}, "email", "Enter a valid email address."),
        ({"email": "a@b.org\nBcc: x@y.org"}, "email", "Enter a valid email address."),
        ({"email": "x" * 250 + "@b.org"}, "email", "no more than 254 characters"),
        ({"username": "root"}, "username", "only email can change here"),
        ({"is_staff": True}, "is_staff", "only email can change here"),
        ({"pending_email": "a@b.org"}, "pending_email", "only email can change here"),
        (["email"], "non_field_errors", "must be a JSON object"),
    ],
)
def test_a_bad_change_names_the_field_and_changes_nothing(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any], body: Any, field: str, says: str
) -> None:
    response = client_for("alice").patch("/api/v1/me/", body, format="json")

    assert response.status_code == 400, response.content
    assert says in str(response.json()[field])
    people["alice"].refresh_from_db()
    assert (people["alice"].email, people["alice"].username, people["alice"].is_staff) == (
        "",
        "alice",
        False,
    )
    assert mailoutbox == []


def test_without_credentials_there_is_no_account_to_read() -> None:
    assert APIClient().get("/api/v1/me/").status_code == 401
