"""A job file (application/yaml, the CLI's `gpuq submit job.yaml`, the UI's Paste YAML) means
what the same spec means as JSON: YAML 1.2's core schema, not YAML 1.1's, types its bare
scalars. So a key `on` is the word on (the README's `retries: {max: 3, on: [...]}`), not the
boolean true, and `12:00` is the text 12:00 (twelve hours, as in JSON), not the base-60
integer 720."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from queue_service.jobs.models import Job
from queue_service.jobs.spec import YamlError, load_yaml_spec

JOB_FILE = """\
name: only-node-failures
command: ["python", "train.py"]
gpus_per_node: 1
retries: {max: 2, on: [node_failure]}
"""


def _retries_as_asked(status: int, job: Job | None) -> None:
    assert status in (201, 302), status  # 302: the UI went on to the job's page
    assert job is not None
    # Asked: retry on node failures only. A preempted job must not be retried.
    assert job.spec["retries"] == {"max": 2, "on": ["node_failure"]}, job.spec["retries"]


def test_a_yaml_job_files_retries_on_is_stored_as_written(client_for: Any, people: Any) -> None:
    response = client_for("alice").post(
        "/api/v1/jobs/", data=JOB_FILE.encode(), content_type="application/yaml"
    )
    job = Job.objects.filter(name="only-node-failures").first()
    _retries_as_asked(response.status_code, job)


def test_pasted_yaml_retries_on_is_stored_as_written(people: Any) -> None:
    alice = Client()
    alice.force_login(people["alice"])
    response = alice.post("/submit/", {"mode": "yaml", "yaml": JOB_FILE})
    job = Job.objects.filter(name="only-node-failures").first()
    _retries_as_asked(response.status_code, job)


def test_a_yaml_time_limit_in_mm_ss_is_the_same_duration_as_in_json(
    client_for: Any, people: Any
) -> None:
    # DurationField reads "12:00" as Slurm's --time does (MM:SS): twelve minutes. A YAML file
    # hands it over as the text it is (YAML 1.1 read it as the base-60 integer 720, then
    # seconds, which matched only by chance; 1-12 would have been text there).
    alice = client_for("alice")
    as_json = alice.post(
        "/api/v1/jobs/", {"name": "json", "command": ["a"], "time_limit": "12:00"}, format="json"
    )
    assert as_json.status_code == 201
    assert as_json.json()["spec"]["time_limit"] == 12 * 60
    text = "name: yaml\ncommand: [a]\ntime_limit: 12:00\n"
    as_yaml = alice.post("/api/v1/jobs/", data=text.encode(), content_type="application/yaml")
    assert as_yaml.status_code == 201, as_yaml.json()
    assert as_yaml.json()["spec"]["time_limit"] == 12 * 60, as_yaml.json()["spec"]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("on", "on"),
        ("off", "off"),
        ("yes", "yes"),
        ("No", "No"),
        ("true", True),
        ("False", False),
        ("1:30", "1:30"),
        ("30:00", "30:00"),
        ("010", 10),
        ("0o17", 15),
        ("0x1f", 31),
        ("-5", -5),
        ("1e3", 1000.0),
        ("1_000", "1_000"),
        ("~", None),
    ],
)
def test_bare_yaml_scalars_are_typed_as_json_would_type_them(text: str, value: Any) -> None:
    assert load_yaml_spec(f"a: {text}\n") == {"a": value}


def test_an_explicit_integer_tag_on_a_non_integer_is_a_syntax_error_with_its_line() -> None:
    with pytest.raises(YamlError, match="line 2: 'abc' is not an integer"):
        load_yaml_spec("name: x\nnodes: !!int abc\n")
