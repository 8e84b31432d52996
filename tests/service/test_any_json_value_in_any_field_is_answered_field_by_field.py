"""Whatever JSON value a client puts in any field of a write (a submit, a preview, an update,
a resubmit, a member, a quota, a token, an address): the answer is the change made, or a 400
whose messages are keyed by the fields that are wrong, never a 500 nor a message about the
body as a whole; a refused submit stores nothing. (test_api_fuzz.py holds every endpoint to
"never a 5xx"; this holds the writes to field-level answers.)

Bounded for CI: EXAMPLES per write, derandomized, no example database (a few seconds each)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queue_service.api import serializers as api
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.spec import JobSpecSerializer
from tests.conftest import spec

EXAMPLES = int(os.environ.get("GPUQ_FIELD_EXAMPLES", "40"))
SPEC_FIELDS = list(JobSpecSerializer().fields)

# (who, method, path, a valid body, the fields whose values are replaced, the keys a 400 may
# name: an update is checked as a submit of the whole spec would be)
WRITES: list[tuple[str, str, str, dict[str, Any], list[str], list[str]]] = [
    ("alice", "post", "/api/v1/jobs/", spec(name="f"), SPEC_FIELDS, SPEC_FIELDS),
    ("dana", "post", "/api/v1/jobs/preview/", spec(name="f"), SPEC_FIELDS, SPEC_FIELDS),
    (
        "alice",
        "patch",
        "/api/v1/jobs/{task}/",
        {"priority": "low"},
        list(api.JobUpdateSerializer().fields),
        SPEC_FIELDS,
    ),
    ("alice", "post", "/api/v1/jobs/{job}/resubmit/", {"array": "0-1"}, ["array"], SPEC_FIELDS),
    ("alice", "patch", "/api/v1/me/", {"email": "a@example.org"}, ["email"], ["email"]),
    ("alice", "post", "/api/v1/tokens/", {"name": "t"}, ["name"], ["name"]),
    (
        "dana",
        "post",
        "/api/v1/teams/vision/members/",
        {"username": "bob"},
        ["username", "role"],
        ["username", "role"],
    ),
    ("dana", "patch", "/api/v1/teams/vision/members/bob/", {"role": "admin"}, ["role"], ["role"]),
    (
        "dana",
        "put",
        "/api/v1/teams/vision/quotas/H100/",
        {"nominal_gpus": 1, "borrowing_limit_gpus": 1},
        list(api.QuotaSerializer().fields),
        list(api.QuotaSerializer().fields),
    ),
]


def json_values() -> st.SearchStrategy[Any]:
    """Any JSON value, with what PostgreSQL or Python trip on among the texts (NUL, lone
    surrogates, C1 controls) and numbers far past any field's range."""
    text = st.text(max_size=20) | st.sampled_from(["\x00", "a\x00b", "\ud800", "\x85", " "])
    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=-(10**40), max_value=10**40)
        | st.floats(allow_nan=False, allow_infinity=False)
        | text,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
        max_leaves=6,
    )


@pytest.fixture
def targets(people: dict[str, Any]) -> dict[str, str]:
    job = submit_job(people["alice"], spec(name="f-job")).job
    task = submit_job(people["alice"], spec(name="f-task", array="0-3")).job
    return {"job": str(job.pk), "task": str(task.pk)}


@pytest.mark.parametrize(
    ("who", "method", "path", "body", "fields", "named"),
    WRITES,
    ids=[f"{w[1]} {w[2]}" for w in WRITES],
)
def test_any_json_value_in_a_field_is_the_change_or_a_400_naming_fields(
    client_for: Any,
    targets: dict[str, str],
    who: str,
    method: str,
    path: str,
    body: dict[str, Any],
    fields: list[str],
    named: list[str],
) -> None:
    client = client_for(who)
    client.raise_request_exception = False  # a server error as the 500 a client gets
    url = path.format(**targets)

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(changes=st.dictionaries(st.sampled_from(fields), json_values(), min_size=1))
    def check(changes: dict[str, Any]) -> None:
        jobs_before = Job.objects.count()
        data = json.dumps({**body, **changes})
        response = getattr(client, method)(url, data=data, content_type="application/json")
        assert response.status_code in (200, 201, 204, 400), response.content[:300]
        answer = response.json() if response.content else None
        if response.status_code == 400:
            assert isinstance(answer, dict), answer
            assert set(answer) <= set(named), answer
            assert Job.objects.count() == jobs_before, "a refused request stored a job"
        elif response.status_code == 201 and path == "/api/v1/jobs/":
            assert Job.objects.filter(pk=answer["id"]).exists(), "answered, not stored"

    check()
