"""The API's other text fields take text, as a job spec's do (README): a JSON number is
refused at its field with `expected a string`, never stored as Python writes it (a quota's
`gpu_model: 100` was the model "100", a member's `username: 123` added the user "123").
Quoted, the same text is taken. Dana administers vision."""

from __future__ import annotations

import json
from typing import Any

import pytest

from queue_service.tenancy.models import Membership, Quota

QUOTA = {"nominal_gpus": 1, "borrowing_limit_gpus": 1}

# (what, who, method, path, the body as JSON text, the field)
NUMBERS = [
    (
        "a quota's model",
        "dana",
        "post",
        "/api/v1/teams/vision/quotas/",
        '{"gpu_model": 100, "nominal_gpus": 1, "borrowing_limit_gpus": 1}',
        "gpu_model",
    ),
    (
        "a quota's model repeating its path",
        "dana",
        "put",
        "/api/v1/teams/vision/quotas/100/",
        '{"gpu_model": 100, "nominal_gpus": 1, "borrowing_limit_gpus": 1}',
        "gpu_model",
    ),
    (
        "a new member",
        "dana",
        "post",
        "/api/v1/teams/vision/members/",
        '{"username": 123}',
        "username",
    ),
    (
        "a member repeating its path",
        "dana",
        "patch",
        "/api/v1/teams/vision/members/123/",
        '{"username": 123, "role": "admin"}',
        "username",
    ),
    ("an address", "alice", "patch", "/api/v1/me/", '{"email": 5}', "email"),
    ("an address past float's range", "alice", "patch", "/api/v1/me/", '{"email": 1e400}', "email"),
]


def state(people: Any) -> tuple[Any, ...]:
    people["alice"].refresh_from_db()
    return (
        list(Quota.objects.order_by("pk").values_list("team__slug", "gpu_model", "nominal_gpus")),
        list(Membership.objects.order_by("pk").values_list("team__slug", "user__username", "role")),
        people["alice"].email,
    )


@pytest.mark.parametrize(
    ("what", "who", "method", "path", "body", "field"), NUMBERS, ids=[n[0] for n in NUMBERS]
)
def test_a_number_in_a_text_field_is_refused_at_that_field(
    client_for: Any,
    people: Any,
    teams: Any,
    make_user: Any,
    what: str,
    who: str,
    method: str,
    path: str,
    body: str,
    field: str,
) -> None:
    numbered = make_user("123")
    if method == "patch" and "members" in path:
        Membership.objects.create(user=numbered, team=teams["vision"])
    client = client_for(who)
    before = state(people)

    response = getattr(client, method)(path, data=body, content_type="application/json")

    assert (response.status_code, response.json()) == (400, {field: ["expected a string"]})
    assert state(people) == before


# (who, method, path, body)
QUOTED = [
    ("dana", "post", "/api/v1/teams/vision/quotas/", {"gpu_model": "100", **QUOTA}),
    ("dana", "put", "/api/v1/teams/vision/quotas/100/", {"gpu_model": "100", **QUOTA}),
    ("dana", "post", "/api/v1/teams/vision/members/", {"username": "123"}),
    ("dana", "patch", "/api/v1/teams/vision/members/123/", {"username": "123", "role": "admin"}),
]


@pytest.mark.parametrize(("who", "method", "path", "body"), QUOTED)
def test_a_number_written_as_text_is_taken_as_written(
    client_for: Any,
    people: Any,
    teams: Any,
    make_user: Any,
    who: str,
    method: str,
    path: str,
    body: Any,
) -> None:
    numbered = make_user("123")
    if method == "patch":
        Membership.objects.create(user=numbered, team=teams["vision"])

    response = getattr(client_for(who), method)(
        path, data=json.dumps(body), content_type="application/json"
    )

    assert response.status_code in (200, 201), response.content
    if "gpu_model" in body:
        assert Quota.objects.filter(team__slug="vision", gpu_model="100").exists()
    else:
        member = Membership.objects.get(team__slug="vision", user__username="123")
        assert member.role == body.get("role", "member")
