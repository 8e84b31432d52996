"""A job spec's text fields take text, in JSON and YAML alike, as Kubernetes' do: a number is
refused with `expected a string`, never stored as Python writes it (JSON's 1e400 was the
name "inf", YAML's `name: 007` the name "7", `1.10` "1.1"). A YAML name that looks like a
number is quoted: `name: "2024"`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.conftest import spec

YAML = "application/yaml"

# (what, the spec's changes as JSON text, where the message is)
JSON_NUMBERS = [
    ("an integer name", '"name": 12', ("name",)),
    ("a name past float's range", '"name": 1e400', ("name",)),
    ("a fractional name", '"name": 1.10', ("name",)),
    ("a negative name", '"name": -0', ("name",)),
    ("an integer image", '"image": 3', ("image",)),
    ("a numeric gpu_model", '"gpu_model": 100', ("gpu_model",)),
    ("a numeric priority", '"priority": 1', ("priority",)),
    ("a numeric team", '"team": 7', ("team",)),
    ("a numeric cluster", '"cluster": 7', ("cluster",)),
    ("a numeric checkpoint dir", '"checkpoint": {"dir": 5}', ("checkpoint", "dir")),
]


def _answer(where: tuple[str, ...]) -> dict[str, Any]:
    answer: Any = ["expected a string"]
    for key in reversed(where):
        answer = {key: answer}
    return answer  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("what", "change", "where"), JSON_NUMBERS, ids=[r[0] for r in JSON_NUMBERS]
)
@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/api/v1/jobs/preview/"])
def test_a_number_in_a_text_field_of_a_json_spec_is_refused(
    client_for: Any, people: Any, path: str, what: str, change: str, where: tuple[str, ...]
) -> None:
    body = json.dumps(spec(name="t")).removesuffix("}") + ", " + change + "}"
    response = client_for("alice").post(path, data=body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json() == _answer(where)
    assert not Job.objects.exists()


# (what, the YAML line, where the message is)
YAML_NUMBERS = [
    ("a year as a name", "name: 2024", ("name",)),
    ("a name with a leading zero", "name: 007", ("name",)),
    ("a version as a name", "name: 1.10", ("name",)),
    ("a hex name", "name: 0x10", ("name",)),
    ("an infinite name", "name: .inf", ("name",)),
    ("a numeric image", "image: 3", ("image",)),
    ("a numeric team", "team: 7", ("team",)),
]


@pytest.mark.parametrize(("what", "line", "where"), YAML_NUMBERS, ids=[r[0] for r in YAML_NUMBERS])
def test_a_number_in_a_text_field_of_a_yaml_file_is_refused_as_in_json(
    client_for: Any, people: Any, what: str, line: str, where: tuple[str, ...]
) -> None:
    text = "command: [/bin/echo, hi]\n" + ("" if line.startswith("name:") else "name: t\n") + line
    response = client_for("alice").post("/api/v1/jobs/", data=text, content_type=YAML)
    assert response.status_code == 400, response.content
    assert response.json() == _answer(where)
    assert not Job.objects.exists()


# Text that reads as a number is text: stored as written.
QUOTED = [
    ("application/json", '{"name": "12", "command": ["/bin/echo"]}', "12"),
    ("application/json", '{"name": "1e400", "command": ["/bin/echo"]}', "1e400"),
    (YAML, 'name: "2024"\ncommand: [/bin/echo]\n', "2024"),
    (YAML, "name: '007'\ncommand: [/bin/echo]\n", "007"),
]


@pytest.mark.parametrize(("kind", "body", "name"), QUOTED)
def test_a_number_written_as_text_is_a_name_as_written(
    client_for: Any, people: Any, kind: str, body: str, name: str
) -> None:
    response = client_for("alice").post("/api/v1/jobs/", data=body, content_type=kind)
    assert response.status_code == 201, response.content
    assert response.json()["name"] == name
    assert Job.objects.get().spec["name"] == name


def test_a_number_as_the_priority_of_an_update_is_refused(client_for: Any, people: Any) -> None:
    job = submit_job(people["alice"], spec(name="u")).job
    response = client_for("alice").patch(
        f"/api/v1/jobs/{job.pk}/", data='{"priority": 1}', content_type="application/json"
    )
    assert response.status_code == 400, response.content
    assert response.json() == {"priority": ["expected a string"]}
