"""The API's shape: OpenAPI schema, docs page, list filters and cursor pagination, queue
order, logs offsets."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job, transition
from tests.conftest import spec


def test_the_openapi_schema_generates_without_warnings(db: Any) -> None:
    out = StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    assert "/api/v1/jobs/" in out.getvalue()


def test_the_interactive_docs_are_served_without_a_cdn(client: Any, people: Any) -> None:
    client.force_login(people["alice"])
    page = client.get("/api/docs/")
    assert page.status_code == 200
    assert b"cdn" not in page.content.lower()


def test_job_list_filters_by_state_kind_and_user(client_for: Any, people: Any) -> None:
    a = submit_job(people["alice"], spec(name="a")).job
    submit_job(people["bob"], spec(name="b"))
    transition(a, Job.State.CANCELLED)
    client = client_for("alice")

    def names(query: str) -> list[str]:
        return sorted(j["name"] for j in client.get(f"/api/v1/jobs/?{query}").json()["results"])

    assert names("state=cancelled") == ["a"]
    assert names("state=pending,cancelled") == ["a", "b"]
    assert names("user=me") == ["a"]
    assert names("user=bob") == ["b"]
    assert names("kind=agent") == []
    assert names("name=A") == ["a"]
    assert names("team=nonesuch") == []  # a name nobody has: nothing matches


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ("state=pending,runing", "state", "unknown state 'runing' (known: pending, admitted"),
        ("kind=batch", "kind", "unknown kind 'batch' (known: training, agent)"),
    ],
)
def test_a_misspelt_state_or_kind_filter_is_a_400_not_an_empty_list(
    client_for: Any, people: Any, query: str, field: str, message: str
) -> None:
    response = client_for("alice").get(f"/api/v1/jobs/?{query}")
    assert response.status_code == 400
    (text,) = response.json()[field]
    assert text.startswith(message)


def test_job_list_pages_with_a_cursor(client_for: Any, people: Any) -> None:
    for i in range(5):
        submit_job(people["alice"], spec(name=f"j{i}"))
    client = client_for("alice")
    seen: list[str] = []
    url = "/api/v1/jobs/?page_size=2"
    while url:
        page = client.get(url).json()
        seen += [j["name"] for j in page["results"]]
        url = page["next"]
    assert seen == ["j4", "j3", "j2", "j1", "j0"]


def test_logs_reject_bad_offsets(client_for: Any, people: Any) -> None:
    job = submit_job(people["alice"], spec()).job
    response = client_for("alice").get(f"/api/v1/jobs/{job.pk}/logs/?offset=-1&stream=core")
    assert response.status_code == 400
    assert set(response.json()) == {"offset", "stream"}


def test_events_list_the_timeline(client_for: Any, people: Any) -> None:
    job = submit_job(people["alice"], spec()).job
    transition(job, Job.State.CANCELLED, code="cancelled", message="by test")
    events = client_for("bob").get(f"/api/v1/jobs/{job.pk}/events/").json()
    assert [(e["to_state"], e["code"]) for e in events] == [
        ("pending", "submitted"),
        ("cancelled", "cancelled"),
    ]


@pytest.mark.parametrize("header", ["Token", "Bearer"])
def test_both_token_keywords_authenticate(people: Any, header: str) -> None:
    from rest_framework.test import APIClient

    from queue_service.tenancy.services import create_token

    _, key = create_token(people["alice"], "cli")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{header} {key}")
    assert client.get("/api/v1/jobs/").status_code == 200
