"""The OpenAPI schema tells the truth: every answer the API gives, success or error, has its
status documented for that operation and a body that validates against the documented
schema. Internal tools generate clients from /api/schema/, so a wrong schema is a bug.

Each request below is made as a real client would (bearer token, JSON); the schema is the
one /api/schema/ serves. The requests cover every operation in the schema: a new endpoint
fails test_every_operation_is_exercised until it is covered here."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest
from rest_framework.test import APIClient

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.conftest import spec

# (who, method, path, body or None); {job} is Alice's job. Success and error answers both.
CALLS: list[tuple[str, str, str, Any]] = [
    ("alice", "get", "/api/v1/jobs/", None),
    ("alice", "get", "/api/v1/jobs/?page_size=1&state=pending,running&user=me", None),
    ("alice", "get", "/api/v1/jobs/?page_size=nope", None),
    ("alice", "get", "/api/v1/jobs/?state=pending,bogus", None),
    ("alice", "get", "/api/v1/jobs/?cursor=not-ours", None),
    ("anonymous", "get", "/api/v1/jobs/", None),
    ("alice", "post", "/api/v1/jobs/", spec(name="schema-ok")),
    ("alice", "post", "/api/v1/jobs/", {"name": "", "command": [], "gpus_per_node": 99}),
    ("alice", "post", "/api/v1/jobs/", [1, 2]),
    ("alice", "post", "/api/v1/jobs/preview/", spec(name="would-it")),
    ("alice", "post", "/api/v1/jobs/preview/", {"nodes": 0}),
    ("alice", "post", "/api/v1/jobs/preview/", spec(name="x" * 3_000_000)),  # 413
    ("bob", "get", "/api/v1/jobs/{job}/", None),
    ("charlie", "get", "/api/v1/jobs/{job}/", None),
    ("alice", "get", "/api/v1/jobs/not-a-job-id/", None),
    ("alice", "get", "/api/v1/jobs/{job}/events/", None),
    ("alice", "get", "/api/v1/jobs/{job}/logs/", None),
    ("alice", "get", "/api/v1/jobs/{job}/logs/?offset=-1&stream=stdin", None),
    ("bob", "post", "/api/v1/jobs/{job}/resubmit/", None),
    ("charlie", "post", "/api/v1/jobs/{job}/resubmit/", None),
    ("staff", "post", "/api/v1/jobs/{job}/resubmit/", None),  # 400: not a member of vision
    ("alice", "patch", "/api/v1/jobs/{job}/", {"priority": "low", "time_limit": "2h"}),
    ("alice", "patch", "/api/v1/jobs/{job}/", {"name": "renamed"}),  # 400: fixed at submit
    ("bob", "patch", "/api/v1/jobs/{job}/", {"priority": "high"}),  # 403
    ("alice", "post", "/api/v1/jobs/{job}/resume/", None),  # 409: not suspended
    ("bob", "post", "/api/v1/jobs/{job}/suspend/", None),  # 403
    ("alice", "post", "/api/v1/jobs/{job}/suspend/", None),
    ("alice", "post", "/api/v1/jobs/{job}/resume/", None),
    ("bob", "post", "/api/v1/jobs/{job}/cancel/", None),
    ("alice", "post", "/api/v1/jobs/{job}/cancel/", None),
    ("alice", "post", "/api/v1/jobs/{job}/cancel/", None),  # 409: it already ended
    ("alice", "patch", "/api/v1/jobs/{job}/", {"priority": "high"}),  # 409: it ended
    ("alice", "get", "/api/v1/queue/?team=vision", None),
    ("alice", "get", "/api/v1/queue/?team=%00", None),  # 400 (middleware.py)
    ("alice", "get", "/api/v1/teams/", None),
    ("alice", "get", "/api/v1/teams/vision/", None),
    ("charlie", "get", "/api/v1/teams/vision/", None),
    ("alice", "get", "/api/v1/teams/vision/members/", None),
    ("dana", "post", "/api/v1/teams/vision/members/", {"username": "charlie"}),
    ("dana", "post", "/api/v1/teams/vision/members/", {"username": "nobody-here"}),
    ("alice", "post", "/api/v1/teams/vision/members/", {"username": "charlie"}),
    ("dana", "patch", "/api/v1/teams/vision/members/bob/", {"role": "admin"}),
    ("dana", "patch", "/api/v1/teams/vision/members/bob/", {"role": "king"}),
    ("dana", "delete", "/api/v1/teams/vision/members/charlie/", None),
    ("dana", "delete", "/api/v1/teams/vision/members/charlie/", None),  # 400: not a member
    ("alice", "get", "/api/v1/teams/vision/quotas/", None),
    ("dana", "post", "/api/v1/teams/vision/quotas/", {"gpu_model": "H100", "nominal_gpus": 4}),
    ("dana", "post", "/api/v1/teams/vision/quotas/", {"gpu_model": "bad model"}),
    ("dana", "put", "/api/v1/teams/vision/quotas/H100/", {"nominal_gpus": 6}),
    ("dana", "put", "/api/v1/teams/vision/quotas/H100/", {"nominal_gpus": -1}),
    ("alice", "put", "/api/v1/teams/vision/quotas/H100/", {"nominal_gpus": 6}),
    ("dana", "delete", "/api/v1/teams/vision/quotas/H100/", None),
    ("dana", "delete", "/api/v1/teams/vision/quotas/H100/", None),  # 400: no such quota
    ("dana", "get", "/api/v1/teams/vision/usage/", None),
    ("dana", "get", "/api/v1/teams/vision/usage/?from=2025-02-30", None),
    ("alice", "get", "/api/v1/teams/vision/usage/", None),  # 403: a member, not an admin
    ("alice", "get", "/api/v1/clusters/", None),
    ("alice", "get", "/api/v1/clusters/nowhere/", None),
    ("alice", "get", "/api/v1/priority-classes/", None),
    ("alice", "get", "/api/v1/priority-classes/normal/", None),
    ("alice", "get", "/api/v1/priority-classes/nonesuch/", None),
    ("alice", "get", "/api/v1/me/", None),
    ("anonymous", "get", "/api/v1/me/", None),
    ("alice", "patch", "/api/v1/me/", {"email": "alice@example.org"}),
    ("alice", "patch", "/api/v1/me/", {"email": "not an address"}),
    ("alice", "get", "/api/v1/tokens/", None),
    ("alice", "post", "/api/v1/tokens/", {"name": "laptop"}),
    ("alice", "post", "/api/v1/tokens/", {}),
    ("alice", "delete", "/api/v1/tokens/999999/", None),
]


@pytest.fixture
def schema(client_for: Any) -> dict[str, Any]:
    response = client_for("alice").get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    return response.json()  # type: ignore[no-any-return]


@pytest.fixture
def answers(client_for: Any, people: dict[str, Any]) -> list[tuple[str, str, str, Any]]:
    """(method, schema path, status, body) for every call in CALLS."""
    job = submit_job(people["alice"], spec(name="schema-alice")).job
    clients = {who: client_for(who) for who in ("alice", "bob", "charlie", "dana", "staff")}
    clients["anonymous"] = APIClient()
    out = []
    for who, method, path, body in CALLS:
        url = path.format(job=job.pk)
        kwargs = {} if body is None else {"data": body, "format": "json"}
        response = getattr(clients[who], method)(url, **kwargs)
        content = response.json() if response.content else None
        out.append((method, _template(url.split("?")[0], job), str(response.status_code), content))
    return out


def _template(url: str, job: Job) -> str:
    """The schema path a concrete URL was made from."""
    url = url.replace(str(job.pk), "{id}")
    for pattern, template in [
        (r"^/api/v1/jobs/not-a-job-id/$", "/api/v1/jobs/{id}/"),
        (r"^/api/v1/teams/[^/]+/members/[^/]+/$", "/api/v1/teams/{slug}/members/{username}/"),
        (r"^/api/v1/teams/[^/]+/quotas/[^/]+/$", "/api/v1/teams/{slug}/quotas/{gpu_model}/"),
        (r"^/api/v1/teams/[^/]+/(members|quotas|usage)/$", r"/api/v1/teams/{slug}/\1/"),
        (r"^/api/v1/teams/[^/]+/$", "/api/v1/teams/{slug}/"),
        (r"^/api/v1/clusters/[^/]+/$", "/api/v1/clusters/{name}/"),
        (r"^/api/v1/priority-classes/[^/]+/$", "/api/v1/priority-classes/{name}/"),
        (r"^/api/v1/tokens/[0-9]+/$", "/api/v1/tokens/{id}/"),
    ]:
        if re.match(pattern, url) and "{" not in url:
            return re.sub(pattern, template, url)
    return url


def _json_schema(node: Any) -> Any:
    """OpenAPI 3.0's `nullable` as JSON Schema: the same schema, or null."""
    if isinstance(node, list):
        return [_json_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _json_schema(v) for k, v in node.items() if k != "nullable"}
    if node.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


def test_every_answer_has_a_documented_status_and_matches_its_schema(
    schema: dict[str, Any], answers: list[tuple[str, str, str, Any]]
) -> None:
    components = _json_schema(schema["components"])
    problems = []
    for method, path, status, body in answers:
        op = schema["paths"][path][method]
        documented = op["responses"].get(status)
        if documented is None:
            problems.append(f"{method.upper()} {path}: {status} is not documented")
            continue
        content = documented.get("content", {}).get("application/json")
        if content is None:
            if body is not None:
                problems.append(f"{method.upper()} {path}: {status} has a body it does not list")
            continue
        doc = {**_json_schema(content["schema"]), "components": components}
        try:
            jsonschema.validate(body, doc)
        except jsonschema.ValidationError as exc:
            problems.append(f"{method.upper()} {path} {status}: {exc.message}")
    assert problems == []


def test_the_calls_cover_success_and_error_answers(
    answers: list[tuple[str, str, str, Any]],
) -> None:
    statuses = {status for _, _, status, _ in answers}
    assert {"200", "201", "204", "400", "401", "403", "404", "409", "413"} <= statuses


def test_every_operation_is_exercised(
    schema: dict[str, Any], answers: list[tuple[str, str, str, Any]]
) -> None:
    called = {(method, path) for method, path, _, _ in answers}
    operations = {
        (method, path)
        for path, ops in schema["paths"].items()
        for method in ops
        if method in ("get", "post", "put", "patch", "delete")
    }
    assert operations - called == set()


def test_the_api_takes_json_only(client_for: Any, people: dict[str, Any]) -> None:
    # Form encoding turns every field into a list: the API refuses it instead.
    response = client_for("alice").post("/api/v1/jobs/", {"name": "x", "command": "true"})
    assert response.status_code == 415
    assert "Unsupported media type" in response.json()["detail"]
    assert not Job.objects.filter(name="x").exists()


@pytest.mark.parametrize("method", ["get", "post", "put", "delete"])
def test_a_path_without_its_trailing_slash_redirects_keeping_the_method(
    client_for: Any, method: str
) -> None:
    # Django's APPEND_SLASH would answer a POST with a 301 (a 500 in debug), and clients
    # follow a 301 as a GET: the job would be lost without a word. A 308 keeps the body.
    response = getattr(client_for("alice"), method)("/api/v1/jobs?page_size=2")
    assert response.status_code == 308
    assert response["Location"] == "/api/v1/jobs/?page_size=2"
    assert response.json() == {"detail": "API paths end with a slash: /api/v1/jobs/?page_size=2"}


def test_a_slashless_post_followed_submits_the_job_once(client_for: Any) -> None:
    client = client_for("alice")
    body = spec(name="slashless")
    first = client.post("/api/v1/jobs", body, format="json")
    assert first.status_code == 308
    followed = client.post(first["Location"], body, format="json")
    assert followed.status_code == 201
    assert Job.objects.filter(name="slashless").count() == 1


@pytest.mark.parametrize(
    "url", ["/api/v1/nothing/", "/api/v2/jobs/", "/api/v1/jobs/%C2%84/", "/api/v1/jobs/x/logs/"]
)
def test_unknown_api_paths_answer_json_404(client_for: Any, settings: Any, url: str) -> None:
    settings.DEBUG = True  # as `make run` serves: Django's debug 404 page is HTML
    response = client_for("alice").post(url, {}, format="json")
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}


@pytest.mark.parametrize(
    ("query", "field"),
    [("page_size=0", "page_size"), ("page_size=many", "page_size"), ("cursor=zz", "cursor")],
)
def test_bad_paging_is_a_400_naming_the_parameter(
    client_for: Any, people: dict[str, Any], query: str, field: str
) -> None:
    response = client_for("alice").get(f"/api/v1/jobs/?{query}")
    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_a_log_offset_past_any_file_is_a_400_not_a_server_error(
    client_for: Any, people: dict[str, Any]
) -> None:
    job = submit_job(people["alice"], spec(name="far")).job
    response = client_for("alice").get(f"/api/v1/jobs/{job.pk}/logs/?offset=306628461563388736")
    assert response.status_code == 400
    assert "offset" in response.json()


# (method, path, body, the field the server names): bodies the server refuses for their form,
# which the documented request schema must refuse too, or generated clients send them.
MALFORMED: list[tuple[str, str, dict[str, Any], str]] = [
    ("post", "/api/v1/jobs/", spec(kind="agent", mig_profile="0"), "mig_profile"),
    ("post", "/api/v1/jobs/", spec(gpu_model="A100 80GB"), "gpu_model"),
    ("post", "/api/v1/jobs/", spec(image="nvcr.io/x y"), "image"),
    ("post", "/api/v1/jobs/preview/", spec(gpu_model="-A100"), "gpu_model"),
    (
        "post",
        "/api/v1/teams/{slug}/quotas/",
        {"gpu_model": "H100", "nominal_gpus": True},
        "nominal_gpus",
    ),
    ("put", "/api/v1/teams/{slug}/quotas/{gpu_model}/", {"nominal_gpus": 1e308}, "nominal_gpus"),
    (
        "put",
        "/api/v1/teams/{slug}/quotas/{gpu_model}/",
        {"nominal_gpus": 4, "lending_limit_gpus": False},
        "lending_limit_gpus",
    ),
]


@pytest.mark.parametrize(("method", "path", "body", "field"), MALFORMED)
def test_the_schema_refuses_what_the_server_refuses(
    client_for: Any,
    people: dict[str, Any],
    schema: dict[str, Any],
    method: str,
    path: str,
    body: dict[str, Any],
    field: str,
) -> None:
    url = path.format(slug="vision", gpu_model="SIM-A100")
    response = getattr(client_for("dana"), method)(url, body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()
    documented = schema["paths"][path][method]["requestBody"]["content"]["application/json"]
    doc = {**_json_schema(documented["schema"]), "components": _json_schema(schema["components"])}
    with pytest.raises(jsonschema.ValidationError) as refused:
        jsonschema.validate(body, doc)
    assert field in refused.value.absolute_path or field in refused.value.message


def test_an_empty_log_query_parameter_is_a_400_not_the_default(
    client_for: Any, people: dict[str, Any]
) -> None:
    job = submit_job(people["alice"], spec(name="blank")).job
    response = client_for("alice").get(f"/api/v1/jobs/{job.pk}/logs/?stream=")
    assert response.status_code == 400
    assert list(response.json()) == ["stream"]
