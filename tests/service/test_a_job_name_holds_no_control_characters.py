"""A job's name is text without control characters (C0 with tab, newline and carriage return
among them, DEL and C1), as a token's name is: an escape sequence would colour or rewrite
the terminal `gpuq`'s listings print to, and a tab or a newline would break their columns.
Refused at `name` from a JSON spec, a YAML file, a preview and an update alike; nothing is
stored. A job stored with a tab in its name before tabs were refused keeps it: it is shown,
and its other fields can still change."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.conftest import spec

MESSAGE = "must be non-empty text without control characters"

CONTROLS = [
    ("a tab", "nightly\trun"),
    ("a newline", "nightly\nrun"),
    ("a carriage return", "nightly\rrun"),
    ("an escape sequence", "nightly\x1b[2J"),
    ("a bell", "nightly\x07"),
    ("a vertical tab", "nightly\x0brun"),
    ("DEL", "nightly\x7frun"),
    ("NEL (C1)", "nightly\x85run"),
    ("CSI (C1)", "nightly\x9b2J"),
    # Unicode's format controls that make a name display as other text ("gpj.exe" shown as
    # "exe.jpg"), and its line and paragraph separators, newlines to some renderers.
    ("a right-to-left override", "report\u202egpj.exe"),
    ("a left-to-right embedding", "x\u202ay"),
    ("a first-strong isolate", "x\u2068y"),
    ("a line separator", "nightly\u2028run"),
    ("a paragraph separator", "nightly\u2029run"),
]


@pytest.mark.parametrize(("what", "name"), CONTROLS, ids=[c[0] for c in CONTROLS])
@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/api/v1/jobs/preview/"])
def test_a_job_name_with_a_control_character_is_refused_from_json(
    client_for: Any, people: Any, path: str, what: str, name: str
) -> None:
    response = client_for("alice").post(
        path, data=json.dumps(spec(name=name)), content_type="application/json"
    )

    assert response.status_code == 400, response.content
    assert response.json() == {"name": [MESSAGE]}
    assert not Job.objects.exists()


# A YAML double-quoted scalar's escapes, and a tab as it is inside quotes.
YAML_NAMES = [
    ("an escaped tab", 'name: "nightly\\trun"'),
    ("a tab as it is", 'name: "nightly\trun"'),
    ("an escaped escape", 'name: "nightly\\e[2J"'),
    ("an escaped NEL", 'name: "nightly\\Nrun"'),
]


@pytest.mark.parametrize(("what", "line"), YAML_NAMES, ids=[n[0] for n in YAML_NAMES])
def test_a_job_name_with_a_control_character_is_refused_from_a_yaml_file(
    client_for: Any, people: Any, what: str, line: str
) -> None:
    text = f"{line}\ncommand: [/bin/echo, hi]\n"
    response = client_for("alice").post(
        "/api/v1/jobs/", data=text.encode(), content_type="application/yaml"
    )

    assert response.status_code == 400, response.content
    assert response.json() == {"name": [MESSAGE]}
    assert not Job.objects.exists()


def test_a_job_name_with_a_tab_is_refused_from_the_submit_page(people: Any) -> None:
    client = Client()
    client.force_login(people["alice"])

    page = client.post("/submit/", {"name": "nightly\trun", "command": "train"})

    assert page.status_code == 400
    assert "without control characters" in page.content.decode()
    assert not Job.objects.exists()


def test_an_update_naming_a_name_is_refused_at_name(client_for: Any, people: Any) -> None:
    job = submit_job(people["alice"], spec(name="plain")).job

    response = client_for("alice").patch(
        f"/api/v1/jobs/{job.pk}/", {"name": "nightly\trun"}, format="json"
    )

    assert response.status_code == 400, response.content
    assert list(response.json()) == ["name"]
    job.refresh_from_db()
    assert job.name == job.spec["name"] == "plain"


def stored_with_a_tab(people: Any, name: str = "nightly\trun") -> Job:
    """A job as stored while a tab (or a bidirectional control) was taken in a name: written
    straight to the database."""
    job = submit_job(people["alice"], spec(name="nightly")).job
    Job.objects.filter(pk=job.pk).update(name=name, spec={**job.spec, "name": name})
    job.refresh_from_db()
    return job


def test_a_job_stored_with_a_tab_in_its_name_is_shown_with_it(client_for: Any, people: Any) -> None:
    job = stored_with_a_tab(people)
    page = Client()
    page.force_login(people["bob"])

    api = client_for("bob").get(f"/api/v1/jobs/{job.pk}/")
    html = page.get(f"/jobs/{job.pk}/")

    assert (api.status_code, api.json()["name"]) == (200, "nightly\trun")
    assert html.status_code == 200
    assert "nightly\trun" in html.content.decode()


@pytest.mark.parametrize("name", ["nightly\trun", "report\u202egpj.exe"], ids=["tab", "override"])
@pytest.mark.parametrize(
    ("change", "stored"),
    [
        ({"priority": "high"}, ("priority", "high")),
        ({"time_limit": "2h"}, ("time_limit", 7200)),
    ],
)
def test_a_job_stored_with_a_tab_in_its_name_can_change_its_other_fields(
    client_for: Any, people: Any, change: dict[str, Any], stored: tuple[str, Any], name: str
) -> None:
    job = stored_with_a_tab(people, name)

    response = client_for("alice").patch(f"/api/v1/jobs/{job.pk}/", change, format="json")

    assert response.status_code == 200, response.content
    job.refresh_from_db()
    key, value = stored
    assert (job.spec[key], job.spec["name"], job.name) == (value, name, name)


# Text is text: accents, other scripts, spaces inside a name.
@pytest.mark.parametrize(
    "name",
    # Right-to-left text with its mark, and an emoji of a zero-width joiner, are text too.
    ["resnet 50", "büro-lauf", "ノート", "sweep: lr=3e-4 (x2)", "تجربة\u200f 2", "👩\u200d💻 run"],
)
def test_a_job_name_of_text_is_taken(client_for: Any, people: Any, name: str) -> None:
    response = client_for("alice").post("/api/v1/jobs/", spec(name=name), format="json")

    assert response.status_code == 201, response.content
    assert Job.objects.get().name == name
