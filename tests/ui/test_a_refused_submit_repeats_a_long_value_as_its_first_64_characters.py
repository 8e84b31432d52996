"""The submit page's messages repeat what was typed or pasted as the API's do
(queue_service/api/errors.py, tests/service/test_an_api_error_repeats_a_long_value_as_its_
first_64_characters.py): a long value as its first 64 characters and "…", so a megabyte
pasted is not a megabyte of messages. Pasted YAML, the form and the preview of either alike."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
import yaml
from django.test import Client

from queue_service.jobs.models import Job
from tests.conftest import spec

# Past where it is cut, what no message says: were it shown whole, it would show.
TAILED = "y" * 64 + "z" * 1_000_000
SHOWN = "y" * 64 + "…"
# Many short values, shown as str() shows a list: no value is long, so the message as a whole
# is cut, at 1,024 characters.
MANY = ["a"] * 50_000

# (the spec's bad field, the value, the message at it)
YAML_ECHOES: list[tuple[str, Any, str]] = [
    ("kind", TAILED, f'kind: "{SHOWN}" is not a valid choice.'),
    ("team", TAILED, f"team: you are not a member of team '{SHOWN}'"),
    ("team", f"  {TAILED} ", f"team: you are not a member of team '{SHOWN}'"),  # trimmed
    ("cluster", TAILED, f"cluster: no enabled cluster named '{SHOWN}'"),
    ("retries", {"on": [TAILED]}, f'retries.on.0: "{SHOWN}" is not a valid choice.'),
    (
        "env",
        {"A-" + TAILED: "1"},
        f"env.A-{'y' * 62}…: not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)",
    ),
    ("kind", MANY, "kind: " + f'"{MANY}" is not a valid choice.'[:1024] + "…"),
]
YAML_IDS = ["kind", "team", "team-trimmed", "cluster", "retries.on", "env-name", "kind-list"]


def _line_errors(page: str) -> list[str]:
    """The messages of a refused YAML's listing, each at its line."""
    return [html.unescape(m) for m in re.findall(r'<div class="line-error">(.*?)</div>', page)]


def _listed_errors(page: str) -> list[str]:
    """The messages of every `<ul class="errors">` (the form's fields, the preview's panel)."""
    lists = re.findall(r'<ul class="errors[^"]*"[^>]*>(.*?)</ul>', page, re.S)
    return [html.unescape(m) for ul in lists for m in re.findall(r"<li>(.*?)</li>", ul, re.S)]


@pytest.fixture
def alice(people: Any) -> Client:
    client = Client()
    client.force_login(people["alice"])
    return client


@pytest.mark.parametrize(("key", "value", "message"), YAML_ECHOES, ids=YAML_IDS)
def test_pasted_yaml_refused_shows_a_long_value_as_its_first_64_characters(
    alice: Client, key: str, value: Any, message: str
) -> None:
    text = yaml.safe_dump(spec(**{key: value}), width=2**31)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if t.startswith(f"{key}:"))

    response = alice.post("/submit/", {"mode": "yaml", "yaml": text})

    assert response.status_code == 400
    assert _line_errors(response.content.decode()) == [f"line {line}: {message}"]
    assert not Job.objects.exists()


def test_a_yaml_error_repeating_a_long_value_says_its_start_as_the_apis(
    alice: Client, client_for: Any
) -> None:
    text = f"name: n\ncommand: [a]\ngpus_per_node: !!int {TAILED}\n"
    # YAML's: read from no parsed value, so the loader cuts it (as every YAML message does).
    error = f"line 3: {TAILED[:40]!r} is not an integer"
    said = error  # its line said once: the listing's prefix is YAML's own

    response = alice.post("/submit/", {"mode": "yaml", "yaml": text})
    preview = alice.post("/submit/preview/", {"mode": "yaml", "yaml": text})
    api = client_for("alice").post("/api/v1/jobs/", data=text, content_type="application/yaml")

    assert response.status_code == 400
    assert _line_errors(response.content.decode()) == [said]
    assert _listed_errors(preview.content.decode()) == ["yaml: " + error]
    assert api.json() == {"detail": f"YAML parse error - {error}"}


# (the form's input, what is typed there, the message at it)
FORM_ECHOES: list[tuple[str, str, str]] = [
    ("kind", TAILED, f'"{SHOWN}" is not a valid choice.'),
    # alice is in one team: the form has no team picker, and names the field above it.
    ("team", TAILED, f"team: you are not a member of team '{SHOWN}'"),
    ("cluster", TAILED, f"no enabled cluster named '{SHOWN}'"),
    ("env", f"A-{TAILED}=1", f"A-{'y' * 62}…: not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)"),
]


@pytest.mark.parametrize(("name", "typed", "message"), FORM_ECHOES, ids=[e[0] for e in FORM_ECHOES])
def test_a_refused_form_shows_a_long_value_as_its_first_64_characters(
    alice: Client, name: str, typed: str, message: str
) -> None:
    form = {"kind": "training", "name": "n", "command": "true", "gpus_per_node": "1", name: typed}

    response = alice.post("/submit/", form)

    assert response.status_code == 400
    assert message in _listed_errors(response.content.decode())
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("form", "message"),
    [
        (
            {"mode": "yaml", "yaml": yaml.safe_dump(spec(team=TAILED), width=2**31)},
            f"team: you are not a member of team '{SHOWN}'",
        ),
        (
            {"name": "n", "command": "true", "cluster": TAILED},
            f"cluster: no enabled cluster named '{SHOWN}'",
        ),
    ],
    ids=["yaml", "form"],
)
def test_a_preview_shows_a_long_value_as_its_first_64_characters(
    alice: Client, form: dict[str, str], message: str
) -> None:
    response = alice.post("/submit/preview/", form)

    assert response.status_code == 200
    assert _listed_errors(response.content.decode()) == [message]
