"""The REST API fuzzed from its own OpenAPI schema (schemathesis, in-process through Django's
WSGI handler, so a server error is the 500 a client would get): for every operation, requests
the schema allows and requests it refuses (wrong types, out-of-range numbers, NUL bytes, lone
surrogates, unknown fields, odd headers), as a team member, or as the team's admin for the
team endpoints. The rule: bad input is a 4xx, never a 5xx; every answer has a documented
status, content type, headers and body; a submit answers with a job that is stored, or
stores nothing.

Bounded and deterministic for CI: FUZZ_EXAMPLES examples per operation and generation mode,
derandomized, no example database (under a minute in all). For a longer hunt,
GPUQ_FUZZ_EXAMPLES=100 GPUQ_FUZZ_SEED=<n>: a random run, reproducible by its seed."""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from queue_service.jobs import services as job_services
from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, submit_job
from queue_service.tenancy.models import ApiToken
from queue_service.tenancy.services import create_token
from tests.conftest import spec

FUZZ_EXAMPLES = int(os.environ.get("GPUQ_FUZZ_EXAMPLES", "12"))
FUZZ_SEED = os.environ.get("GPUQ_FUZZ_SEED")
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]

# Every operation of /api/schema/ (test_every_operation_is_fuzzed holds this to the schema).
OPERATIONS = [
    ("GET", "/api/v1/jobs/"),
    ("POST", "/api/v1/jobs/"),
    ("POST", "/api/v1/jobs/preview/"),
    ("GET", "/api/v1/jobs/{id}/"),
    ("PATCH", "/api/v1/jobs/{id}/"),
    ("POST", "/api/v1/jobs/{id}/cancel/"),
    ("GET", "/api/v1/jobs/{id}/events/"),
    ("GET", "/api/v1/jobs/{id}/logs/"),
    ("POST", "/api/v1/jobs/{id}/resubmit/"),
    ("POST", "/api/v1/jobs/{id}/resume/"),
    ("POST", "/api/v1/jobs/{id}/suspend/"),
    ("GET", "/api/v1/queue/"),
    ("GET", "/api/v1/me/"),
    ("PATCH", "/api/v1/me/"),
    ("GET", "/api/v1/teams/"),
    ("GET", "/api/v1/teams/{slug}/"),
    ("GET", "/api/v1/teams/{slug}/members/"),
    ("POST", "/api/v1/teams/{slug}/members/"),
    ("PATCH", "/api/v1/teams/{slug}/members/{username}/"),
    ("DELETE", "/api/v1/teams/{slug}/members/{username}/"),
    ("GET", "/api/v1/teams/{slug}/quotas/"),
    ("POST", "/api/v1/teams/{slug}/quotas/"),
    ("PUT", "/api/v1/teams/{slug}/quotas/{gpu_model}/"),
    ("DELETE", "/api/v1/teams/{slug}/quotas/{gpu_model}/"),
    ("GET", "/api/v1/teams/{slug}/usage/"),
    ("GET", "/api/v1/clusters/"),
    ("GET", "/api/v1/clusters/{name}/"),
    ("GET", "/api/v1/priority-classes/"),
    ("GET", "/api/v1/priority-classes/{name}/"),
    ("GET", "/api/v1/tokens/"),
    ("POST", "/api/v1/tokens/"),
    ("DELETE", "/api/v1/tokens/{id}/"),
]
SUBMITS = {("POST", "/api/v1/jobs/"), ("POST", "/api/v1/jobs/{id}/resubmit/")}
_schemas: dict[str, Any] = {}  # the loaded schema, once per run: it does not change


@pytest.fixture
def wsgi_requests() -> Iterator[None]:
    """Django's WSGI handler closes the database connection at each request's start and end,
    which would end the test's transaction; Django's test client disconnects the same
    signals while it makes a request."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def tokens(people: dict[str, Any]) -> dict[str, str]:
    return {who: create_token(people[who], "fuzz")[1] for who in ("alice", "dana")}


@pytest.fixture
def api_schema(wsgi_requests: None, tokens: dict[str, str]) -> Any:
    """The schema /api/schema/ serves, its operations called on the app in-process."""
    if "api" not in _schemas:
        _schemas["api"] = schemathesis.openapi.from_wsgi(
            "/api/schema/?format=json",
            get_wsgi_application(),
            headers={"Authorization": f"Bearer {tokens['alice']}"},
        )
    return _schemas["api"]


@pytest.fixture
def path_values(people: dict[str, Any], request: pytest.FixtureRequest) -> dict[str, list[Any]]:
    """Path parameters that name real objects, so that most requests get past the lookup to
    the validation behind it (the schema's generated values are tried too)."""
    alice = people["alice"]
    pending = submit_job(alice, spec(name="fuzz-pending")).job
    held = submit_job(alice, spec(name="fuzz-held", hold=True)).job
    task = submit_job(alice, spec(name="fuzz-array", array="0-3%2")).job
    ended = cancel_job(alice, submit_job(alice, spec(name="fuzz-ended")).job)
    teammates = submit_job(people["bob"], spec(name="fuzz-bob")).job
    outsiders = submit_job(people["charlie"], spec(name="fuzz-charlie")).job
    spare, _ = create_token(alice, "fuzz-spare")
    request.getfixturevalue("local_cluster")
    return {
        "id": [str(j.pk) for j in (pending, held, task, ended, teammates, outsiders)],
        "token": [spare.pk],
        "slug": ["vision", "language"],
        "username": ["bob", "alice", "charlie", "dana"],
        "gpu_model": ["SIM-A100", "H100", "*"],
        "name": ["local", "normal", "high"],
    }


def fuzz(
    schema: Any,
    method: str,
    path: str,
    auth: str,
    values: dict[str, list[Any]],
    examples: int = FUZZ_EXAMPLES,
) -> None:
    """Fuzz one operation; raises (with the smallest failing request, as curl) on a failure."""
    operation = schema[path][method]
    names = [p.name for p in operation.path_parameters]
    choices: list[dict[str, Any] | None] = [None]  # None: the schema's own values
    if names:
        pools = {
            n: values["token"] if path.startswith("/api/v1/tokens/") else values[n] for n in names
        }
        choices += [
            {n: pools[n][i % len(pools[n])] for n in names}
            for i in range(max(len(pool) for pool in pools.values()))
        ]
    strategy = st.one_of(
        [
            operation.as_strategy(generation_mode=mode, path_parameters=fixed)
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
            for fixed in choices
        ]
    )
    protected = {str(t.pk) for t in ApiToken.objects.filter(name="fuzz")}
    headers = {"Authorization": f"Bearer {auth}"}
    submits = (method, path) in SUBMITS

    @settings(
        max_examples=examples * 2,
        derandomize=FUZZ_SEED is None,
        database=None,
        deadline=None,
        print_blob=False,
        # Each example is a request on a database the fixtures filled: slow by design.
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(case=strategy.filter(lambda c: str(c.path_parameters.get("id")) not in protected))
    def check(case: Any) -> None:
        jobs_before = Job.objects.count()
        response = case.call(headers=headers)
        assert response.status_code != 401, "the fuzz's own token was refused"
        case.validate_response(response, checks=CHECKS)
        if submits and response.status_code in (200, 201):
            assert Job.objects.filter(pk=response.json()["id"]).exists(), "answered, not stored"
        elif submits:
            assert Job.objects.count() == jobs_before, f"a {response.status_code} stored a job"

    if FUZZ_SEED is not None:
        check = seed(int(FUZZ_SEED))(check)
    check()


def _who(path: str) -> str:
    return "dana" if path.startswith("/api/v1/teams/{slug}") else "alice"


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_no_operation_answers_bad_input_with_a_server_error(
    api_schema: Any,
    tokens: dict[str, str],
    path_values: dict[str, list[Any]],
    method: str,
    path: str,
) -> None:
    fuzz(api_schema, method, path, tokens[_who(path)], path_values)


def test_every_operation_is_fuzzed(api_schema: Any) -> None:
    served = {(op.ok().method.upper(), op.ok().path) for op in api_schema.get_all_operations()}
    assert served == set(OPERATIONS)


def test_the_fuzz_fails_on_a_server_error(
    api_schema: Any,
    tokens: dict[str, str],
    path_values: dict[str, list[Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fuzz that cannot fail proves nothing: a view that raises must fail it.
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("planted")

    monkeypatch.setattr(job_services, "cancel_job", broken)
    with pytest.raises(BaseException) as failed:  # one failure, or a group of them
        fuzz(api_schema, "POST", "/api/v1/jobs/{id}/cancel/", tokens["alice"], path_values, 5)
    assert "ServerError" in "".join(traceback.format_exception(failed.value))


# --- hostile values in otherwise valid bodies ---------------------------------------------
# The schema's generator rarely builds what a hostile client sends on purpose: a number of
# thousands of digits, nesting past any limit, NUL bytes and lone surrogates as JSON escapes,
# and YAML's explicit tags (the job endpoints read a job file as it is). Each request below
# is a valid body with one value replaced.

# (who, method, path, a valid body, the fields whose values are replaced)
WRITES: list[tuple[str, str, str, dict[str, Any], list[str]]] = [
    ("alice", "post", "/api/v1/jobs/", spec(name="w"), [*spec(name="w"), "env", "array"]),
    ("alice", "post", "/api/v1/jobs/preview/", spec(name="w"), ["nodes", "memory", "time_limit"]),
    ("alice", "patch", "/api/v1/jobs/{job}/", {"priority": "low"}, ["priority", "time_limit"]),
    ("alice", "patch", "/api/v1/jobs/{task}/", {"array": {"max_running": 1}}, ["array"]),
    ("alice", "post", "/api/v1/jobs/{job}/resubmit/", {"array": "0-1"}, ["array"]),
    ("alice", "patch", "/api/v1/me/", {"email": "a@example.org"}, ["email"]),
    ("alice", "post", "/api/v1/tokens/", {"name": "t"}, ["name"]),
    ("dana", "post", "/api/v1/teams/vision/members/", {"username": "bob"}, ["username", "role"]),
    ("dana", "patch", "/api/v1/teams/vision/members/bob/", {"role": "admin"}, ["role"]),
    (
        "dana",
        "post",
        "/api/v1/teams/vision/quotas/",
        {"gpu_model": "H100", "nominal_gpus": 1, "borrowing_limit_gpus": 1},
        ["gpu_model", "nominal_gpus", "borrowing_limit_gpus", "max_running_jobs"],
    ),
    (
        "dana",
        "put",
        "/api/v1/teams/vision/quotas/SIM-A100/",
        {"nominal_gpus": 1, "borrowing_limit_gpus": 1},
        ["nominal_gpus", "borrowing_limit_gpus", "lending_limit_gpus"],
    ),
]
HOSTILE_JSON = [
    "1" * 5000,  # past str()'s 4,300 digits
    "-" + "9" * 400,
    "1e400",
    "-0.0",
    "5e-324",
    "[" * 5000 + "]" * 5000,  # past Python's recursion limit
    '"\\u0000"',
    '"\\ud800"',
    '"\\udfff\\ud800"',
    '{"\\ud800": 1}',
    '{"": {"": {"": null}}}',
    '"' + "\\u00e9" * 70000 + '"',
    "[" + ",".join(["{}"] * 2000) + "]",
    "true",
    "null",
    "NaN",
    "Infinity",
]
YAML_TAGS = ["", "!!str", "!!int", "!!float", "!!bool", "!!null", "!!timestamp", "!!binary"]
YAML_WORDS = ["abc", "", "maybe", "2024-13-45", "2024-01-01 10:00:00 +99:00", ".nan", "-.inf"]
YAML_WORDS += ["0o9", "1:2:3", "~", "=", "<<", "=a", "!!!", "aGk="]
YAML_TAGS += ["!!set", "!!omap", "!!pairs", "!!seq", "!!map", "!!merge", "!!value", "!e"]


def _json_value() -> st.SearchStrategy[str]:
    plain = st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=-(10**30), max_value=10**30)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=30),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=8,
    ).map(json.dumps)
    return plain | st.sampled_from(HOSTILE_JSON)


def _yaml_value() -> st.SearchStrategy[str]:
    words = st.sampled_from([*YAML_WORDS, "9" * 5000, "0x" + "f" * 40]) | st.text(max_size=12)
    scalar = st.builds(
        lambda tag, word: f"{tag} {json.dumps(word)}", st.sampled_from(YAML_TAGS), words
    )
    plain = st.builds(lambda tag, word: f"{tag} {word}", st.sampled_from(YAML_TAGS), words)
    flow = st.builds(
        lambda tag, a, b, shape: f"{tag} [{a}, {b}]" if shape else f"{tag} {{{a}: {b}}}",
        st.sampled_from(YAML_TAGS),
        scalar,
        scalar,
        st.booleans(),
    )
    return scalar | plain | flow


def _replace(body: dict[str, Any], field: str, raw: str) -> str:
    # Stand-in then swap: the hostile value is raw JSON text, which json.dumps could not make.
    return json.dumps({**body, field: "\x00HOSTILE\x00"}).replace('"\\u0000HOSTILE\\u0000"', raw)


@pytest.fixture
def write_targets(people: dict[str, Any]) -> dict[str, str]:
    job = submit_job(people["alice"], spec(name="fuzz-w")).job
    task = submit_job(people["alice"], spec(name="fuzz-w-array", array="0-3")).job
    return {"job": str(job.pk), "task": str(task.pk)}


def _answer_keeps_the_rule(response: Any, jobs_before: int) -> None:
    assert response.status_code < 500, response.content[:500]
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    if response.status_code >= 400:
        assert Job.objects.count() == jobs_before, "a refused request stored a job"


@pytest.mark.parametrize(
    ("who", "method", "path", "body", "fields"), WRITES, ids=[f"{w[1]} {w[2]}" for w in WRITES]
)
def test_hostile_json_values_are_a_4xx_never_a_5xx(
    client_for: Any,
    write_targets: dict[str, str],
    who: str,
    method: str,
    path: str,
    body: dict[str, Any],
    fields: list[str],
) -> None:
    client = client_for(who)
    client.raise_request_exception = False  # a server error as the 500 a client gets
    url = path.format(**write_targets)

    @settings(max_examples=FUZZ_EXAMPLES * 2, derandomize=True, database=None, deadline=None)
    @given(field=st.sampled_from(fields), raw=_json_value())
    def check(field: str, raw: str) -> None:
        jobs_before = Job.objects.count()
        data = _replace(body, field, raw)
        response = getattr(client, method)(url, data=data, content_type="application/json")
        _answer_keeps_the_rule(response, jobs_before)

    check()


YAML_WRITES = [w for w in WRITES if w[2].startswith("/api/v1/jobs/")]


@pytest.mark.parametrize(
    ("who", "method", "path", "body", "fields"),
    YAML_WRITES,
    ids=[f"{w[1]} {w[2]}" for w in YAML_WRITES],
)
def test_hostile_yaml_values_are_a_4xx_never_a_5xx(
    client_for: Any,
    write_targets: dict[str, str],
    who: str,
    method: str,
    path: str,
    body: dict[str, Any],
    fields: list[str],
) -> None:
    client = client_for(who)
    client.raise_request_exception = False
    url = path.format(**write_targets)

    @settings(max_examples=FUZZ_EXAMPLES * 2, derandomize=True, database=None, deadline=None)
    @given(field=st.sampled_from(fields), raw=_yaml_value(), nested=st.booleans())
    def check(field: str, raw: str, nested: bool) -> None:
        jobs_before = Job.objects.count()
        # Each value as a flow mapping's: the rest of the body is JSON, which is YAML too.
        value = f"[{raw}]" if nested else raw
        data = _replace(body, field, value)
        response = getattr(client, method)(url, data=data, content_type="application/yaml")
        _answer_keeps_the_rule(response, jobs_before)

    check()
