"""A quota is named by its GPU model exactly: a model with whitespace around it is refused
with a 400 at `gpu_model`, in the path (PUT .../quotas/H100%20/ stored a quota for "H100", a
model the path did not name) and in the body, and nothing is changed. The team admin page's
form is a form: what is typed there is trimmed, as every box of the UI's is."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from queue_service.tenancy.models import Quota

BODY = {"nominal_gpus": 1, "borrowing_limit_gpus": 1}
MESSAGE = "must look like A100-SXM4-80GB (letters, digits, ._-), or * for any model"

# (method, path, body)
SURROUNDED = [
    ("put", "/api/v1/teams/vision/quotas/H100%20/", BODY),
    ("put", "/api/v1/teams/vision/quotas/%20H100/", BODY),
    ("put", "/api/v1/teams/vision/quotas/H100%09/", BODY),
    ("put", "/api/v1/teams/vision/quotas/SIM-A100%20/", BODY),  # one that exists
    ("put", "/api/v1/teams/vision/quotas/%2A%20/", BODY),  # "* "
    ("post", "/api/v1/teams/vision/quotas/", {**BODY, "gpu_model": " H100"}),
    ("post", "/api/v1/teams/vision/quotas/", {**BODY, "gpu_model": "H100\n"}),
    ("post", "/api/v1/teams/vision/quotas/", {**BODY, "gpu_model": "SIM-A100 "}),
]


@pytest.mark.parametrize(("method", "path", "body"), SURROUNDED)
def test_a_quota_model_with_whitespace_around_it_is_refused_at_gpu_model(
    client_for: Any, people: Any, method: str, path: str, body: dict[str, Any]
) -> None:
    before = list(Quota.objects.values_list("team__slug", "gpu_model", "nominal_gpus"))
    response = getattr(client_for("dana"), method)(
        path, data=json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 400, response.content
    assert response.json() == {"gpu_model": [MESSAGE]}
    assert list(Quota.objects.values_list("team__slug", "gpu_model", "nominal_gpus")) == before


def test_a_quota_model_with_whitespace_around_it_names_no_quota_to_delete(
    client_for: Any, people: Any
) -> None:
    response = client_for("dana").delete("/api/v1/teams/vision/quotas/SIM-A100%20/")
    assert response.status_code == 400
    assert response.json() == {"gpu_model": ["no quota for 'SIM-A100 '"]}
    assert Quota.objects.filter(team__slug="vision", gpu_model="SIM-A100").exists()


def test_the_team_pages_quota_form_trims_what_is_typed_in_it(people: Any) -> None:
    dana = Client()
    dana.force_login(people["dana"])
    response = dana.post(
        "/teams/vision/quotas/",
        {"adding": "1", "gpu_model": " H100 ", "nominal_gpus": "1", "borrowing_limit_gpus": "1"},
    )
    assert response.status_code == 302, response.content.decode()[:500]
    assert Quota.objects.get(team__slug="vision", gpu_model="H100").nominal_gpus == 1
