"""A 400 that repeats what the client sent (a choice that is none, a team or cluster nobody
has, a filter's unknown value, a field that does not exist) shows a long value as its first
64 characters and "…", the message otherwise as it always reads: a megabyte sent is not a
megabyte answered. Short values are repeated whole (test_api_surface.py and others)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.conftest import spec

BIG = "x" * 1_000_000
# Past where it is cut, what no message says: were it answered whole, it would show.
TAILED = "y" * 64 + "z" * 200_000
SHOWN = "y" * 64 + "…"
CHOICE = f'"{SHOWN}" is not a valid choice.'
# A list of many short values, which DRF's choice message shows as str() does: no value in it
# is long, so the message as a whole is cut, at 1,024 characters.
MANY = ["a"] * 50_000

# (who, method, path with {job}, body (JSON unless text), content type, the answer whole)
ECHOES: list[tuple[str, str, str, Any, str, Any]] = [
    ("alice", "post", "/api/v1/jobs/", spec(kind=TAILED), "json", {"kind": [CHOICE]}),
    ("alice", "post", "/api/v1/jobs/preview/", spec(kind=TAILED), "json", {"kind": [CHOICE]}),
    (
        "alice",
        "post",
        "/api/v1/jobs/",
        yaml.safe_dump(spec(kind=TAILED)),
        "yaml",
        {"kind": [CHOICE]},
    ),
    (
        "alice",
        "post",
        "/api/v1/jobs/",
        spec(retries={"on": [TAILED]}),
        "json",
        {"retries": {"on": {"0": [CHOICE]}}},
    ),
    (
        "alice",
        "post",
        "/api/v1/jobs/",
        spec(kind=MANY),
        "json",
        {"kind": [f'"{MANY}" is not a valid choice.'[:1024] + "…"]},
    ),
    (
        "alice",
        "post",
        "/api/v1/jobs/",
        spec(team=TAILED),
        "json",
        {"team": [f"you are not a member of team '{SHOWN}'"]},
    ),
    (  # as the field trims it
        "alice",
        "post",
        "/api/v1/jobs/",
        spec(team=f"  {TAILED} "),
        "json",
        {"team": [f"you are not a member of team '{SHOWN}'"]},
    ),
    (
        "alice",
        "post",
        "/api/v1/jobs/",
        spec(cluster=TAILED),
        "json",
        {"cluster": [f"no enabled cluster named '{SHOWN}'"]},
    ),
    (
        "dana",
        "patch",
        "/api/v1/teams/vision/members/bob/",
        {"role": TAILED},
        "json",
        {"role": [CHOICE]},
    ),
    (
        "dana",
        "put",
        "/api/v1/teams/vision/quotas/H100/",
        {"nominal_gpus": 1, "borrowing_limit_gpus": 1, TAILED: 1},
        "json",
        {
            SHOWN: [
                "not a field of a quota: give gpu_model, nominal_gpus, borrowing_limit_gpus,"
                " lending_limit_gpus, max_running_jobs"
            ]
        },
    ),
    (
        "alice",
        "post",
        "/api/v1/jobs/",
        spec(env={"A-" + TAILED: "1"}),
        "json",
        {"env": {"A-" + "y" * 62 + "…": "not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)"}},
    ),
    # Query parameters: a cut, as in a body.
    ("alice", "get", f"/api/v1/jobs/{{job}}/logs/?stream={TAILED}", None, "", {"stream": [CHOICE]}),
    (
        "alice",
        "get",
        f"/api/v1/jobs/?state={TAILED}",
        None,
        "",
        {"state": [f"unknown state '{SHOWN}' (known: {', '.join(Job.State.values)})"]},
    ),
    (  # as repr() quotes it
        "alice",
        "get",
        "/api/v1/jobs/?state=" + "%01" * 100_000,
        None,
        "",
        {
            "state": [
                "unknown state '" + "\\x01" * 16 + f"…' (known: {', '.join(Job.State.values)})"
            ]
        },
    ),
    (
        "alice",
        "get",
        f"/api/v1/jobs/?kind=agent,{TAILED}",
        None,
        "",
        {"kind": [f"unknown kind '{SHOWN}' (known: training, agent)"]},
    ),
]


@pytest.fixture
def alice_job(people: Any) -> Job:
    return submit_job(people["alice"], spec(name="echo")).job


@pytest.mark.parametrize(
    ("who", "method", "path", "body", "kind", "answer"),
    ECHOES,
    ids=[f"{e[1]} {e[2][:40]} {next(iter(e[5]))[:12]}" for e in ECHOES],
)
def test_a_long_value_an_error_repeats_is_cut_to_its_first_64_characters(
    client_for: Any,
    alice_job: Job,
    who: str,
    method: str,
    path: str,
    body: Any,
    kind: str,
    answer: Any,
) -> None:
    client = client_for(who)
    url = path.format(job=alice_job.pk)
    if body is None:
        response = getattr(client, method)(url)
    else:
        data = body if isinstance(body, str) else json.dumps(body)
        response = getattr(client, method)(url, data=data, content_type=f"application/{kind}")
    assert response.status_code == 400, response.content[:300]
    assert response.json() == answer
    assert len(response.content) < 2000
    assert Job.objects.count() == 1  # alice_job's alone


# A value no longer than what is shown is shown whole: nothing is cut that need not be.
def test_a_value_of_64_characters_is_repeated_whole(client_for: Any, people: Any) -> None:
    response = client_for("alice").post("/api/v1/jobs/", data=spec(team="t" * 64), format="json")
    assert response.status_code == 400
    assert response.json() == {"team": [f"you are not a member of team '{'t' * 64}'"]}
