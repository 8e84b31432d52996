"""The REST API under hostile input: whatever a client sends (a forged cursor, a lone
surrogate, a format suffix, an odd Idempotency-Key, a name with a trailing newline, a spec
too large to run), the answer is a 4xx naming what is wrong, never a 500, and nothing is
stored; concurrent team admins cannot pass their team's ceilings; and the request schema
refuses what the server refuses."""

from __future__ import annotations

import base64
import re
from typing import Any
from urllib.parse import quote

import pytest

from queue_service.jobs import spec as job_spec
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.spec import MAX_COMMAND_ENV_BYTES, command_env_problem
from queue_service.tenancy.models import Membership, Quota
from tests.conftest import spec


@pytest.fixture
def alice_job(people: dict[str, Any]) -> Job:
    return submit_job(people["alice"], spec(name="alice-train")).job


def _as(client_for: Any, who: str) -> Any:
    """A client that answers a server error as the 500 a real client gets, not a raise."""
    client = client_for(who)
    client.raise_request_exception = False
    return client


# --- paging -----------------------------------------------------------------------------


def _cursor(query: str) -> str:
    return base64.b64encode(query.encode()).decode()


@pytest.mark.parametrize("position", ["p=not-a-date", "p=2024-13-45T00:00:00Z", "p=", "r=1&p=x"])
def test_a_forged_cursor_position_is_a_400_naming_the_cursor(
    client_for: Any, alice_job: Job, position: str
) -> None:
    # DRF's cursor is base64 of "o=&r=&p=": the position p went straight into
    # filter(submitted_at__lt=p), and one that is not a time raised Django's ValidationError.
    response = _as(client_for, "alice").get("/api/v1/jobs/", {"cursor": _cursor(position)})
    assert response.status_code == 400, response.content[:200]
    assert list(response.json()) == ["cursor"]


@pytest.mark.parametrize("cursor", ["!!!", "é", "==", "bz0x!"])
def test_a_cursor_that_is_not_base64_or_is_empty_is_a_400_naming_the_cursor(
    client_for: Any, alice_job: Job, cursor: str
) -> None:
    response = _as(client_for, "alice").get("/api/v1/jobs/?cursor=" + quote(cursor))
    assert response.status_code == 400, response.content[:200]
    assert list(response.json()) == ["cursor"]


def test_the_next_link_of_a_page_still_pages(client_for: Any, people: dict[str, Any]) -> None:
    for name in ("one", "two", "three"):
        submit_job(people["alice"], spec(name=name))
    alice = client_for("alice")
    first = alice.get("/api/v1/jobs/", {"page_size": 2}).json()
    second = alice.get(first["next"]).json()
    names = [j["name"] for j in first["results"] + second["results"]]
    assert names == ["three", "two", "one"]


# --- lone surrogates ------------------------------------------------------------------------

# (method, url, body, the key the 400 names): JSON's "\ud800" escape is a lone surrogate, which
# no 400 may repeat back (the renderer cannot encode it as UTF-8: that was a 500). One inside a
# field is that field's error; a top-level key is the body's.
SURROGATE_BODIES = [
    ("post", "/api/v1/jobs/", '{"name": "x", "command": ["a"], "env": {"\\ud800": "v"}}', "env"),
    ("post", "/api/v1/jobs/", '{"name": "x", "command": ["a"], "kind": "\\ud800"}', "kind"),
    (
        "post",
        "/api/v1/jobs/",
        '{"name": "x", "command": ["a"], "retries": {"on": ["\\ud800"]}}',
        "retries",
    ),
    ("post", "/api/v1/jobs/", '{"name": "x", "command": ["echo", "\\udfff"]}', "command"),
    (
        "post",
        "/api/v1/jobs/preview/",
        '{"name": "x", "command": ["a"], "env": {"\\ud800": 1}}',
        "env",
    ),
    ("patch", "/api/v1/jobs/{job}/", '{"\\ud800": 1}', "detail"),
    ("patch", "/api/v1/jobs/{job}/", '{"array": {"\\ud800": 1}}', "array"),
    ("post", "/api/v1/jobs/{job}/resubmit/", '{"\\ud800": 1}', "detail"),
    ("patch", "/api/v1/me/", '{"\\ud800": "a@example.org"}', "detail"),
]


@pytest.mark.parametrize(("method", "url", "body", "key"), SURROGATE_BODIES)
def test_a_lone_surrogate_in_a_json_body_is_a_400_not_a_500(
    client_for: Any, alice_job: Job, method: str, url: str, body: str, key: str
) -> None:
    response = getattr(_as(client_for, "alice"), method)(
        url.format(job=alice_job.pk), data=body.encode(), content_type="application/json"
    )
    assert response.status_code == 400, response.status_code
    assert list(response.json()) == [key]
    assert "lone surrogate" in str(response.json()[key])
    assert not Job.objects.filter(name="x").exists()


def test_a_lone_surrogate_in_a_yaml_job_file_is_a_400_not_a_500(
    client_for: Any, people: dict[str, Any]
) -> None:
    text = 'name: x\ncommand: [a]\nenv: {"\\ud800": v}\n'  # YAML's escape, as JSON's
    response = _as(client_for, "alice").post(
        "/api/v1/jobs/", data=text.encode(), content_type="application/yaml"
    )
    assert response.status_code == 400, response.status_code
    assert response.json() == {
        "env": [
            "holds a lone surrogate (a \\ud800-\\udfff escape: not text) in a key at env.\\ud800"
        ]
    }
    assert not Job.objects.filter(name="x").exists()


# --- format suffixes ------------------------------------------------------------------------

SUFFIXED = [
    ("get", "/api/v1/jobs/{job}/events.json"),
    ("get", "/api/v1/jobs/{job}/logs.json"),
    ("post", "/api/v1/jobs/{job}/cancel.json"),
    ("get", "/api/v1/teams/vision/members.json"),
    ("get", "/api/v1/teams/vision/quotas.json"),
    ("get", "/api/v1/teams/vision/usage.json"),
]


@pytest.mark.parametrize(("method", "url"), SUFFIXED)
@pytest.mark.parametrize("who", ["dana", "charlie"])
def test_a_format_suffix_on_an_action_is_never_a_500(
    client_for: Any, alice_job: Job, method: str, url: str, who: str
) -> None:
    # DefaultRouter added `<path>.json` routes to every view, and the actions take no
    # `format` keyword: a TypeError, for anyone, even an outsider. Now no such route exists.
    response = getattr(_as(client_for, who), method)(url.format(job=alice_job.pk))
    assert response.status_code == 404, response.status_code
    assert response.json() == {"detail": "Not found."}
    assert Job.objects.get(pk=alice_job.pk).state == Job.State.PENDING


# --- Idempotency-Key --------------------------------------------------------------------

BAD_KEYS = ["", "   ", "k" * 129, "a\tb"]


@pytest.mark.parametrize("key", BAD_KEYS, ids=["empty", "blank", "129 characters", "a tab"])
@pytest.mark.parametrize(
    ("url", "body"), [("/api/v1/jobs/", spec(name="keyed")), ("/api/v1/jobs/{job}/resubmit/", {})]
)
def test_an_idempotency_key_that_is_no_key_is_a_400(
    client_for: Any, alice_job: Job, url: str, body: dict[str, Any], key: str
) -> None:
    # An empty key was stored as a key: every later submit with one got the first job back,
    # and its own job was never stored.
    before = Job.objects.count()
    response = _as(client_for, "alice").post(
        url.format(job=alice_job.pk), body, format="json", HTTP_IDEMPOTENCY_KEY=key
    )
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["Idempotency-Key"]
    assert Job.objects.count() == before


def test_an_empty_idempotency_key_does_not_turn_a_new_job_into_an_old_one(
    client_for: Any, people: dict[str, Any]
) -> None:
    alice = _as(client_for, "alice")
    first = alice.post("/api/v1/jobs/", spec(name="first"), format="json", HTTP_IDEMPOTENCY_KEY="")
    second = alice.post(
        "/api/v1/jobs/", spec(name="second"), format="json", HTTP_IDEMPOTENCY_KEY=""
    )
    assert first.status_code == second.status_code == 400
    assert "Idempotency-Key" in second.json()
    assert not Job.objects.filter(name__in=["first", "second"]).exists()


def test_an_idempotency_key_is_taken_without_surrounding_spaces(client_for: Any) -> None:
    alice = client_for("alice")
    first = alice.post("/api/v1/jobs/", spec(), format="json", HTTP_IDEMPOTENCY_KEY=" k-1 ")
    again = alice.post("/api/v1/jobs/", spec(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]


# --- quotas under concurrency -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_two_admins_adding_quotas_at_once_stay_within_the_teams_ceiling(
    people: Any, teams: Any
) -> None:
    from concurrent.futures import ThreadPoolExecutor, wait

    from django.db import connection, transaction
    from rest_framework.exceptions import ValidationError

    from queue_service.tenancy.services import set_quota

    vision = teams["vision"]  # max_nominal_gpus=32; SIM-A100 already takes 8
    Membership.objects.filter(user=people["bob"], team=vision).update(role="admin")
    limits = {"borrowing_limit_gpus": 0}

    def bob_adds_a30() -> str:
        try:
            set_quota(people["bob"], vision, "A30", {"nominal_gpus": 24, **limits})
            return "done"
        except ValidationError:
            return "refused"
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        with transaction.atomic():  # dana adds H100: 8 + 24 = 32, not committed yet
            set_quota(people["dana"], vision, "H100", {"nominal_gpus": 24, **limits})
            bobs = pool.submit(bob_adds_a30)
            wait([bobs], timeout=2)
        outcome = bobs.result(timeout=30)

    total = sum(Quota.objects.filter(team=vision).values_list("nominal_gpus", flat=True))
    assert total <= vision.max_nominal_gpus, (outcome, total)
    assert outcome == "refused"


# --- a trailing newline -----------------------------------------------------------------

# (overrides, the field a 400 names, or None: taken, and stored without the newline).
# `$` matches before a final "\n": "CUDA_VISIBLE_DEVICES\n" escaped the reserved names, and
# the Slurm backend then failed the job at dispatch instead of the submit naming the field.
TRAILING_NEWLINE: list[tuple[dict[str, Any], str | None]] = [
    ({"env": {"FOO\n": "1"}}, "env"),
    ({"env": {"CUDA_VISIBLE_DEVICES\n": "1"}}, "env"),
    ({"kind": "agent\n"}, "kind"),
    ({"array": "0-2\n"}, "array"),
    ({"gpu_model": "A100\n"}, None),  # text fields drop surrounding whitespace
    ({"image": "nvcr.io/pytorch:24.01\n"}, None),
    ({"kind": "agent", "mig_profile": "1g.10gb\n", "gpus_per_node": None}, None),
    ({"team": "vision\n"}, None),
    ({"priority": "normal\n"}, None),
    ({"time_limit": "2h\n"}, None),
    ({"memory": "64G\n"}, None),
]


@pytest.mark.parametrize(("overrides", "field"), TRAILING_NEWLINE)
def test_a_trailing_newline_is_refused_or_dropped_never_stored(
    client_for: Any, people: dict[str, Any], overrides: dict[str, Any], field: str | None
) -> None:
    body = {k: v for k, v in spec(name="nl", **overrides).items() if v is not None}
    response = client_for("alice").post("/api/v1/jobs/", body, format="json")
    if field is not None:
        assert response.status_code == 400, response.json()
        assert field in response.json()
        assert not Job.objects.filter(name="nl").exists()
    else:
        assert response.status_code == 201, response.json()
        assert "\n" not in str(Job.objects.get(name="nl").spec)


def test_no_pattern_of_the_job_spec_ends_with_a_dollar() -> None:
    # With re.match or RegexField's search, `$` lets "NAME\n" through; \Z does not.
    patterns = [v for v in vars(job_spec).values() if isinstance(v, re.Pattern)]
    assert patterns
    assert [p.pattern for p in patterns if p.pattern.endswith("$")] == []


# --- a spec too large to run ------------------------------------------------------------

MIB = MAX_COMMAND_ENV_BYTES
ARG = "x" * 60_000
# (overrides, the field the 400 names): each item within its own limit, the whole too large
# for a backend (execve takes 2 MiB of argv and environment; etcd 1.5 MiB an object).
TOO_LARGE: list[tuple[dict[str, Any], str]] = [
    ({"command": [ARG] * 18}, "command"),
    ({"command": ["é" * 30_000] * 18}, "command"),  # bytes of UTF-8 are counted, not chars
    ({"env": {f"V{i}": "y" * 32_000 for i in range(33)}}, "env"),
    ({"command": [ARG] * 10, "env": {f"V{i}": "y" * 32_000 for i in range(15)}}, "command"),
    ({"command": [ARG] * 5, "env": {f"V{i}": "y" * 32_000 for i in range(25)}}, "env"),
]


@pytest.mark.parametrize(("overrides", "field"), TOO_LARGE)
def test_command_and_env_together_are_at_most_a_mebibyte(
    client_for: Any, people: dict[str, Any], overrides: dict[str, Any], field: str
) -> None:
    response = client_for("alice").post("/api/v1/jobs/", spec(name="big", **overrides), "json")
    assert response.status_code == 400, response.content[:300]
    assert list(response.json()) == [field]
    assert f"at most {MIB:,}" in response.json()[field][0]
    assert not Job.objects.filter(name="big").exists()


def test_a_yaml_alias_cannot_multiply_a_command_past_the_limit(client_for: Any) -> None:
    # A file of 60 kB whose command names one 60,000-character argument 20 times.
    text = f"name: big\nx-head: &a {ARG}\ncommand: [{', '.join(['*a'] * 20)}]\n"
    response = client_for("alice").post(
        "/api/v1/jobs/", data=text.encode(), content_type="application/yaml"
    )
    assert response.status_code == 400
    assert list(response.json()) == ["command"]  # the anchor's x- key is free
    assert "1,200,000 bytes" in response.json()["command"][0]


@pytest.mark.parametrize(
    ("command", "env", "problem"),
    [
        (["x" * (MIB - 1)], {}, None),
        (["x" * MIB], {}, None),
        (["x" * (MIB + 1)], {}, "command"),
        ("x" * (MIB - 10), {"AB": "c" * 8}, None),
        ("x" * (MIB - 10), {"AB": "c" * 9}, "command"),
        (["x"], {"A": "é" * (MIB // 2)}, "env"),  # 2 bytes a character
        (["x"], {"A": "é" * (MIB // 2 - 1)}, None),
    ],
)
def test_the_size_of_command_and_env_is_counted_in_utf8(
    command: list[str] | str, env: dict[str, str], problem: str | None
) -> None:
    found = command_env_problem(command, env)
    assert list(found) == ([] if problem is None else [problem])


# --- the request schema -------------------------------------------------------------------

# Bodies the server refuses for their form, which the documented request schema refuses too.
# (An env name such as "1BAD" is not among them: OpenAPI 3.0, which the schema is written
# in, has no propertyNames; the rule is in env's description, and in propertyNames once
# SPECTACULAR_SETTINGS["OAS_VERSION"] is 3.1.)
SCHEMA_GAPS = [
    (spec(env={"A": ["x"]}), "env"),  # server: strings or numbers
    (spec(env={"1BAD": "x"}), "env"),  # server: names as a shell's
    (spec(env={f"V{i}": "x" for i in range(257)}), "env"),  # server: at most 256
    (spec(array=1_000_000), "array"),  # server: indices go up to 999999
    (spec(command=["x"] * 1025), "command"),  # server: at most 1024 arguments
    (spec(command=["x" * 65_537]), "command"),  # server: at most 65536 characters each
]


@pytest.mark.parametrize(("body", "field"), SCHEMA_GAPS)
def test_the_job_spec_schema_refuses_what_the_server_refuses(
    client_for: Any, people: dict[str, Any], body: dict[str, Any], field: str
) -> None:
    import jsonschema

    from tests.service.test_api_schema import _json_schema

    alice = client_for("alice")
    response = alice.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()
    schema = alice.get("/api/schema/", {"format": "json"}).json()
    documented = schema["paths"]["/api/v1/jobs/"]["post"]["requestBody"]["content"]
    doc = {
        **_json_schema(documented["application/json"]["schema"]),
        "components": _json_schema(schema["components"]),
    }
    with pytest.raises(jsonschema.ValidationError) as refused:
        jsonschema.validate(body, doc)
    assert field in refused.value.absolute_path or field in refused.value.message
