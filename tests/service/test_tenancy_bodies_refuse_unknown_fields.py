"""Quota, member and token bodies refuse a field they do not know, naming it (README's rule
for job files; PATCH /me/ and PATCH /jobs/<id>/ do the same): a typo must never silently store
something other than what was asked for while the answer says the change was made. Dana
administers vision; Charlie is no member of it."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.tenancy.models import ApiToken, Membership, Quota


@pytest.mark.parametrize(
    ("method", "url", "body", "unknown"),
    [
        # lending_limit for lending_limit_gpus: dropped, it would "lend all idle GPUs"
        (
            "post",
            "/api/v1/teams/vision/quotas/",
            {
                "gpu_model": "SIM-A100",
                "nominal_gpus": 8,
                "borrowing_limit_gpus": 8,
                "lending_limit": 2,
            },
            "lending_limit",
        ),
        (
            "put",
            "/api/v1/teams/vision/quotas/SIM-A100/",
            {"nominal_gpus": 8, "borrowing_limit_gpus": 8, "lending_limit": 2},
            "lending_limit",
        ),
        # rol for role: dropped, Charlie would be added as a plain member
        ("post", "/api/v1/teams/vision/members/", {"username": "charlie", "rol": "admin"}, "rol"),
        # an expiry asked for: dropped, the token would never expire
        (
            "post",
            "/api/v1/tokens/",
            {"name": "ci", "expires_at": "2030-01-01T00:00:00Z"},
            "expires_at",
        ),
        # a read-only field is not something a new token can be given either
        ("post", "/api/v1/tokens/", {"name": "ci", "hint": "gpuq_abc"}, "hint"),
    ],
    ids=["quota-post", "quota-put", "member", "token-expiry", "token-read-only"],
)
def test_an_unknown_field_is_refused_naming_it_and_nothing_is_stored(
    client_for: Any, method: str, url: str, body: dict[str, Any], unknown: str
) -> None:
    client = client_for("dana")  # its token is made before counting
    tokens_before = ApiToken.objects.count()
    quotas_before = list(Quota.objects.values_list("gpu_model", "lending_limit_gpus"))

    response = getattr(client, method)(url, body, format="json")

    assert response.status_code == 400, response.content
    assert unknown in response.json(), response.json()
    assert response.json()[unknown][0].startswith("not a field of")
    assert ApiToken.objects.count() == tokens_before
    assert list(Quota.objects.values_list("gpu_model", "lending_limit_gpus")) == quotas_before
    assert not Membership.objects.filter(team__slug="vision", user__username="charlie").exists()
