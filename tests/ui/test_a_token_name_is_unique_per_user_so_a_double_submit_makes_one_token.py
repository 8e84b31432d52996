"""The account page's "Create token" form sent twice (a double click, a resent form) made two
tokens of one name, the second's key the only one shown: a token nobody has the key of, and a
list whose rows cannot be told apart. A user's tokens have names of their own: a second of the
same name is refused, at its name box on the page and at `name` from the API, with the same
words; another user, or one who revoked theirs, may use the name. Migration 0002 renames the
duplicates it finds (keeping every key working) before it adds the constraint."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from queue_service.tenancy.models import ApiToken
from queue_service.tenancy.services import create_token, revoke_token

TAKEN = "you have a token named 'laptop' already: give this one another name, or revoke that one"


def account_of(person: Any) -> Client:
    client = Client()
    client.force_login(person)
    return client


def test_the_token_form_sent_twice_makes_one_token_and_says_why_at_the_name(
    people: Any,
) -> None:
    alice = account_of(people["alice"])

    first = alice.post("/me/tokens/", {"name": "laptop"})
    second = alice.post("/me/tokens/", {"name": "laptop"})

    assert first.status_code == 200 and "Your new token" in first.content.decode()
    page = html.unescape(second.content.decode())
    assert second.status_code == 400
    assert "Your new token" not in page
    box = re.search(r'<input name="name"[^>]*>', page)
    assert box, "no name box"
    assert 'aria-invalid="true"' in box.group(0) and 'value="laptop"' in box.group(0)
    described = re.search(r'aria-describedby="([^"]+)"', box.group(0))
    assert described and re.search(rf'id="{described.group(1)}"[^>]*>.*{re.escape(TAKEN)}', page)
    assert list(ApiToken.objects.filter(user=people["alice"]).values_list("name", flat=True)) == [
        "laptop"
    ]


def test_the_api_refuses_a_second_token_of_a_name_with_the_same_words(
    people: Any, client_for: Any
) -> None:
    api = client_for("alice")

    first = api.post("/api/v1/tokens/", {"name": "laptop"}, format="json")
    second = api.post("/api/v1/tokens/", {"name": "laptop"}, format="json")

    assert first.status_code == 201, first.content
    assert second.status_code == 400
    assert second.json() == {"name": [TAKEN + " first"]}
    assert ApiToken.objects.filter(user=people["alice"], name="laptop").count() == 1


@pytest.mark.parametrize(
    ("before", "who", "allowed"),
    [
        ("alice has one", "alice", False),
        ("alice has one", "bob", True),  # names are per user
        ("alice revoked hers", "alice", True),
        ("alice has 'Laptop'", "alice", True),  # as typed: another name
    ],
)
def test_a_name_is_taken_only_by_a_token_of_ones_own(
    people: Any, before: str, who: str, allowed: bool
) -> None:
    token, _ = create_token(people["alice"], "Laptop" if "Laptop" in before else "laptop")
    if "revoked" in before:
        revoke_token(people["alice"], token.pk)

    response = account_of(people[who]).post("/me/tokens/", {"name": "laptop"})

    assert response.status_code == (200 if allowed else 400)
    assert ApiToken.objects.filter(user=people[who], name="laptop").count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_migration_renames_duplicate_names_and_keeps_every_key(people: Any) -> None:
    before, after = [("tenancy", "0001_initial")], [("tenancy", "0002_token_name_per_user")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        Token = executor.loader.project_state(before).apps.get_model("tenancy", "ApiToken")
        Token.objects.all().delete()
        long = "x" * 64
        made = [
            (people[who].pk, name, f"{who}-{n}")
            for who, name, n in [
                ("alice", "laptop", 1),
                ("alice", "laptop", 2),
                ("alice", "laptop (2)", 3),  # the first free name is then "laptop (3)"
                ("alice", "laptop", 4),
                ("alice", long, 5),
                ("alice", long, 6),
                ("bob", "laptop", 7),
            ]
        ]
        for user_id, name, key in made:
            Token.objects.create(user_id=user_id, name=name, key_hash=key, hint=key[:10])

        executor = MigrationExecutor(connection)
        executor.migrate(after)
        Token = executor.loader.project_state(after).apps.get_model("tenancy", "ApiToken")
        names = dict(Token.objects.values_list("key_hash", "name"))
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())

    assert names == {
        "alice-1": "laptop",  # the first made keeps its name
        "alice-2": "laptop (3)",
        "alice-3": "laptop (2)",
        "alice-4": "laptop (4)",
        "alice-5": long,
        "alice-6": "x" * 60 + " (2)",  # within the 64 characters
        "bob-7": "laptop",
    }
