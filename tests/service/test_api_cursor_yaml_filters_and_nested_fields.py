"""The REST API's cursors and list filters, and the job spec's nested fields, names and YAML
typing: behaviours the API documents (or any client relies on). Alice owns the jobs, Bob is
her teammate in vision, Dana vision's admin."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import urlencode

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.conftest import spec


def _as(client_for: Any, who: str) -> Any:
    """A client that answers a server error as the 500 a real client gets, not a raise."""
    client = client_for(who)
    client.raise_request_exception = False
    return client


def _post_yaml(client: Any, text: str, **headers: Any) -> Any:
    return client.post(
        "/api/v1/jobs/", data=text.encode(), content_type="application/yaml", **headers
    )


# --- paging -----------------------------------------------------------------------------


def _cursor(position: str) -> str:
    """A cursor as DRF encodes one ("o=&r=&p=" in base64), at this position."""
    return base64.b64encode(urlencode({"p": position}).encode()).decode()


@pytest.mark.parametrize("offset", ["-16:00", "+18:00", "+23:59"])
def test_a_cursor_whose_position_has_a_far_time_zone_is_read_as_that_time_in_utc(
    client_for: Any, people: dict[str, Any], offset: str
) -> None:
    # Python (parse_datetime) takes UTC offsets up to ±23:59, PostgreSQL's timestamptz only
    # to ±15:59: the query failed in the database, a 500.
    submit_job(people["alice"], spec(name="one"))
    cursor = _cursor(f"2099-01-01 00:00:00{offset}")

    response = _as(client_for, "alice").get("/api/v1/jobs/", {"cursor": cursor})

    assert response.status_code == 200, (response.status_code, response.content[:200])
    assert [j["name"] for j in response.json()["results"]] == ["one"]


@pytest.mark.parametrize("position", ["0001-01-01 00:00:00+01:00", "9999-12-31 23:59:00-01:00"])
def test_a_cursor_whose_position_is_out_of_range_in_utc_is_a_400_naming_the_cursor(
    client_for: Any, people: dict[str, Any], position: str
) -> None:
    response = _as(client_for, "alice").get("/api/v1/jobs/", {"cursor": _cursor(position)})

    assert response.status_code == 400, (response.status_code, response.content[:200])
    assert list(response.json()) == ["cursor"]


# --- filters ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "query"),
    [
        ("dana", "user=alice&user=bob"),
        ("dana", "user=alice,bob"),
        ("alice", "user=me&user=bob"),
        ("bob", "user=alice,me"),
    ],
)
def test_the_user_filter_repeated_or_comma_separated_lists_each_users_jobs(
    client_for: Any, people: dict[str, Any], who: str, query: str
) -> None:
    # README: list filters are "comma-separated or repeated". `?user=alice&user=bob` kept only
    # the last value (QueryDict.get), so Alice's jobs silently vanished from the list.
    submit_job(people["alice"], spec(name="alices"))
    submit_job(people["bob"], spec(name="bobs"))
    submit_job(people["dana"], spec(name="danas"))

    response = client_for(who).get(f"/api/v1/jobs/?{query}")

    assert sorted(j["name"] for j in response.json()["results"]) == ["alices", "bobs"]


def test_the_name_filter_repeated_lists_names_containing_any_and_keeps_a_comma_as_text(
    client_for: Any, people: dict[str, Any]
) -> None:
    for name in ("lr=0.1,bs=32", "lr=0.2", "eval"):
        submit_job(people["alice"], spec(name=name))
    alice = client_for("alice")

    def names(query: str) -> list[str]:
        return sorted(j["name"] for j in alice.get(f"/api/v1/jobs/?{query}").json()["results"])

    assert names("name=0.1&name=eval") == ["eval", "lr=0.1,bs=32"]
    assert names(f"{urlencode({'name': '0.1,bs'})}") == ["lr=0.1,bs=32"]


def test_the_array_filter_repeated_or_comma_separated_lists_each_arrays_tasks(
    client_for: Any, people: dict[str, Any]
) -> None:
    a = submit_job(people["alice"], spec(name="a", array="0-1")).job.array_id
    b = submit_job(people["alice"], spec(name="b", array="0-1")).job.array_id
    submit_job(people["alice"], spec(name="c", array="0-1"))
    alice = client_for("alice")

    for query in (f"array={a}&array={b}", f"array={a},{b}"):
        rows = alice.get(f"/api/v1/jobs/?{query}").json()["results"]
        assert sorted(j["name"] for j in rows) == ["a", "a", "b", "b"], query
    bad = alice.get(f"/api/v1/jobs/?array={a},sweep")
    assert (bad.status_code, bad.json()) == (400, {"array": ["must be an array's id (a UUID)"]})


# --- the job spec -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "misspelt"),
    [
        ("retries", {"maximum": 0}, "maximum"),  # asked for no retries: got 3
        ("retries", {"max": 1, "only_on": ["node_failure"]}, "only_on"),
        ("checkpoint", {"dir": "/ckpt/x", "intervall": "30m"}, "intervall"),
    ],
)
def test_a_misspelt_key_inside_retries_or_checkpoint_is_refused_not_dropped(
    client_for: Any, people: dict[str, Any], field: str, value: dict[str, Any], misspelt: str
) -> None:
    # README: "any other field is refused with a 400 that names it ..., so a typo ... never
    # runs a job" other than asked. Inside retries and checkpoint a typo was silently
    # dropped and the default used instead (3 retries on every cause, no interval).
    response = _as(client_for, "alice").post(
        "/api/v1/jobs/", spec(name="typo", **{field: value}), format="json"
    )

    assert response.status_code == 400, response.json().get("spec", response.json())
    assert misspelt in str(response.json()[field])
    assert not Job.objects.filter(name="typo").exists()


@pytest.mark.parametrize("name", ["nightly\x85run", "evil\x9b31mred", "a\x90b"])
def test_a_job_name_with_a_c1_control_character_is_refused(
    client_for: Any, people: dict[str, Any], name: str
) -> None:
    # validate_name promises "text without control characters", and refuses C0 and DEL; the
    # C1 controls (U+0080-U+009F: NEL is a line break, CSI starts a terminal escape) passed.
    response = _as(client_for, "alice").post("/api/v1/jobs/", spec(name=name), format="json")

    assert response.status_code == 400, response.json().get("name")
    assert list(response.json()) == ["name"]


def test_a_time_limit_of_thousands_of_digits_of_days_is_a_400_saying_it_is_too_long(
    client_for: Any, people: dict[str, Any]
) -> None:
    # int() of over 4,300 digits raised with Python's own text ("sys.set_int_max_str_digits").
    limit = "9" * 5000 + "-00:00:00"
    response = client_for("alice").post("/api/v1/jobs/", spec(time_limit=limit), format="json")

    assert (response.status_code, response.json()) == (400, {"time_limit": ["at most 100 years"]})


# --- YAML job files -----------------------------------------------------------------------


def test_a_bare_date_in_a_yaml_job_file_is_text_as_in_json(
    client_for: Any, people: dict[str, Any]
) -> None:
    # ARCHITECTURE.md: a job file is "typed by YAML 1.2's core schema as JSON would type it".
    # The core schema has no timestamps, but the loader kept YAML 1.1's: a bare date became a
    # datetime.date, refused as a name ("expected a string") and as an env value.
    alice = _as(client_for, "alice")
    as_json = alice.post(
        "/api/v1/jobs/",
        spec(name="2024-06-01", env={"RUN_DATE": "2024-06-01"}),
        format="json",
    )
    assert as_json.status_code == 201, as_json.json()

    text = "name: 2024-06-01\ncommand: [/bin/echo, hello]\nenv: {RUN_DATE: 2024-06-01}\n"
    as_yaml = _post_yaml(alice, text)

    assert as_yaml.status_code == 201, as_yaml.json()
    assert as_yaml.json()["name"] == "2024-06-01"
    assert as_yaml.json()["spec"]["env"] == {"RUN_DATE": "2024-06-01"}


def test_a_bare_equals_sign_in_a_yaml_job_file_is_text_as_in_json(
    client_for: Any, people: dict[str, Any]
) -> None:
    # YAML 1.1's `=` (a "value" key) has no constructor: it was a parse error.
    response = _post_yaml(client_for("alice"), "name: =\ncommand: [/bin/echo, hello]\n")

    assert response.status_code == 201, response.json()
    assert response.json()["name"] == "="


HUGE = "0x" + "f" * 4000  # an integer of 4,817 decimal digits: str() of it raises ValueError


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (f"name: x\ncommand: [a]\nkind: !!set\n  ? {HUGE}\n", None),
        (f"name: x\ncommand: [a]\nkind: !!pairs [{{a: {HUGE}}}]\n", None),
        (f"name: x\ncommand: [a]\nretries: {{on: [!!omap [{{a: {HUGE}}}]]}}\n", None),
        (f"name: x\ncommand: [a]\nx-note: !!set\n  ? {HUGE}\n", "with-a-key-1"),
    ],
)
def test_a_huge_number_inside_a_yaml_set_pairs_or_omap_is_a_400(
    client_for: Any, people: dict[str, Any], text: str, key: str | None
) -> None:
    # shape.py bounds numbers of over 3,000 digits "before any field sees the document", but
    # walked only dicts and lists: YAML's !!set, !!pairs and !!omap (a set, lists of tuples)
    # carried one past it to a ChoiceField's str(), or the Idempotency-Key's fingerprint.
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}

    response = _post_yaml(_as(client_for, "alice"), text, **headers)

    assert response.status_code == 400, (response.status_code, response.content[:200])
    assert not Job.objects.filter(name="x").exists()
