"""An API token's name, as a job's, is text without control characters (C0, DEL, C1: an
escape sequence would colour or rewrite the terminal `gpuq`'s listings print to, a NEL or a
newline would break a line). Refused from the API with a message at `name`, and from the
account page's form; nothing is stored."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from queue_service.tenancy.models import ApiToken

MESSAGE = "must be non-empty text without control characters"

CONTROLS = [
    ("an escape sequence", "laptop\x1b[2J"),
    ("a newline", "lap\ntop"),
    ("a carriage return", "laptop\rdesk"),
    ("a tab", "lap\ttop"),
    ("a bell", "laptop\x07"),
    ("DEL", "lap\x7ftop"),
    ("NEL (C1)", "lap\x85top"),
    ("CSI (C1)", "laptop\x9b2J"),
    ("a right-to-left override", "laptop\u202epot"),
    ("a pop directional isolate", "lap\u2069top"),
    ("a line separator", "lap\u2028top"),
]


@pytest.mark.parametrize(("what", "name"), CONTROLS, ids=[c[0] for c in CONTROLS])
def test_a_token_name_with_a_control_character_is_refused_by_the_api(
    client_for: Any, people: Any, what: str, name: str
) -> None:
    client = client_for("alice")
    before = ApiToken.objects.count()  # client_for's own
    response = client.post(
        "/api/v1/tokens/", data=json.dumps({"name": name}), content_type="application/json"
    )
    assert response.status_code == 400, response.content
    assert response.json() == {"name": [MESSAGE]}
    assert ApiToken.objects.count() == before


@pytest.mark.parametrize(("what", "name"), CONTROLS, ids=[c[0] for c in CONTROLS])
def test_a_token_name_with_a_control_character_is_refused_by_the_account_page(
    people: Any, what: str, name: str
) -> None:
    client = Client()
    client.force_login(people["alice"])
    response = client.post("/me/tokens/", {"name": name})
    assert response.status_code == 400
    assert "without control characters" in response.content.decode()
    assert not ApiToken.objects.exists()


# Text is text: accents, other scripts, spaces inside a name.
@pytest.mark.parametrize(
    "name",
    # Right-to-left text and its marks, and an emoji joined by a zero-width joiner, are text.
    ["laptop", "büro rechner", "ノート", "ci: nightly (x86)", "حاسوب\u200f 2", "👩\u200d💻 dev"],
)
def test_a_token_name_of_text_is_taken(client_for: Any, people: Any, name: str) -> None:
    response = client_for("alice").post(
        "/api/v1/tokens/", data=json.dumps({"name": name}), content_type="application/json"
    )
    assert response.status_code == 201, response.content
    assert ApiToken.objects.filter(name=name).exists()


# A number is not a name: JSON's 5 would be stored as "5", true as "True" (a job's name
# and a quota's model refuse it the same way); quoted, it is text.
@pytest.mark.parametrize("name", [5, 1.5, 10**30, True])
def test_a_token_name_that_is_a_number_is_refused(client_for: Any, people: Any, name: Any) -> None:
    client = client_for("alice")
    before = ApiToken.objects.count()
    response = client.post(
        "/api/v1/tokens/", data=json.dumps({"name": name}), content_type="application/json"
    )
    assert response.status_code == 400, response.content
    assert response.json() == {"name": ["expected a string"]}
    assert ApiToken.objects.count() == before
    quoted = client.post(
        "/api/v1/tokens/", data=json.dumps({"name": "5"}), content_type="application/json"
    )
    assert quoted.status_code == 201, quoted.content
