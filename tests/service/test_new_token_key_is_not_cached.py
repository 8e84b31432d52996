"""A new API token's key is shown once, in the answer that creates it: that answer carries
`Cache-Control: no-store`, so no browser or proxy cache keeps the key (the UI's page that
shows it does the same)."""

from __future__ import annotations

from typing import Any

from django.test import Client


def test_the_api_answer_with_a_new_key_is_not_stored_by_caches(client_for: Any) -> None:
    response = client_for("alice").post("/api/v1/tokens/", {"name": "ci"}, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["key"]
    assert response["Cache-Control"] == "no-store"


def test_the_page_showing_a_new_key_is_not_stored_by_caches(people: Any) -> None:
    alice = Client()
    alice.force_login(people["alice"])

    response = alice.post("/me/tokens/", {"name": "laptop"})

    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
