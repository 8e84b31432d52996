"""A job file goes to the API as it is (Content-Type: application/yaml), with the same
validation, bounds and line numbers as the UI's pasted YAML, and the same job as its JSON."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.models import Job

YAML = "application/yaml"
JOB_FILE = """\
# a job file, as users keep them next to their code
name: yaml-train
command: [torchrun, --nproc-per-node=8, train.py]
nodes: 2
gpus_per_node: 8
time_limit: 2h
env:
  EPOCHS: 3
retries: {max: 1}
"""
SAME_AS_JSON = {
    "name": "yaml-train",
    "command": ["torchrun", "--nproc-per-node=8", "train.py"],
    "nodes": 2,
    "gpus_per_node": 8,
    "time_limit": "2h",
    "env": {"EPOCHS": 3},
    "retries": {"max": 1},
}


def test_a_yaml_job_file_makes_the_same_job_as_its_json(client_for: Any) -> None:
    client = client_for("alice")
    from_yaml = client.post("/api/v1/jobs/", data=JOB_FILE, content_type=YAML)
    from_json = client.post("/api/v1/jobs/", SAME_AS_JSON, format="json")
    assert from_yaml.status_code == from_json.status_code == 201
    assert from_yaml.json()["spec"] == from_json.json()["spec"]
    assert from_yaml.json()["spec"]["time_limit"] == 7200


def test_a_yaml_job_file_can_be_previewed(client_for: Any, local_cluster: Any) -> None:
    response = client_for("alice").post("/api/v1/jobs/preview/", data=JOB_FILE, content_type=YAML)
    assert response.status_code == 200
    assert set(response.json()) == {
        "starts_now",
        "starts_soon",
        "reason",
        "position",
        "estimated_start",
    }
    assert Job.objects.count() == 0


BAD_FILES = [
    ("a bad field", JOB_FILE.replace("nodes: 2", "nodes: 0"), 400, "nodes"),
    ("a syntax error", "name: x\ncommand: [a, b\n", 400, "line 3"),
    ("not a mapping", "- just\n- a list\n", 400, "must be a mapping"),
    ("not UTF-8", b"name: \xff\xfe\ncommand: true\n", 400, "not UTF-8 at byte 6"),
    (
        "an alias bomb",
        'a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]\n'
        + "".join(
            f"{c}: &{c} [" + ", ".join([f"*{p}"] * 10) + "]\n"
            for p, c in zip("abcde", "bcdef", strict=True)
        )
        + "name: *f\ncommand: *f\n",
        400,
        "holds more than 100,000 values",
    ),
    ("over the body limit", "name: x\ncommand: '" + "y" * 3_000_000 + "'\n", 413, "larger than"),
    # int() of more than 4300 digits raises ValueError: the UI's YAML mode answered 500.
    (
        "a number of 5000 digits",
        "name: x\ncommand: [x]\narray: " + "9" * 5000 + "\n",
        400,
        "a number too long to read",
    ),
    # YAML reads 0x..., 0b... and 1:2:3 integers of any length; str() of one past 4300
    # digits (DRF's CharField, the env field) raised ValueError: a 500.
    ("a hex name of 4000 digits", f"name: 0x{'f' * 4000}\ncommand: x\n", 400, "over 3,000 digits"),
    (
        "a hex variable of 4000 digits",
        f"name: x\ncommand: x\nenv:\n  A: 0x{'f' * 4000}\n",
        400,
        "over 3,000 digits",
    ),
    # YAML 1.1 read 1:59:59... as a base-60 integer of any length; job files are YAML 1.2
    # (core schema), where it is text: too long for the field.
    (
        "a base-60 number",
        "name: x\ncommand: x\npriority: 1" + ":59" * 3000 + "\n",
        400,
        "no more than 32 characters",
    ),
    ("a hex key", f"? 0x{'f' * 4000}\n: 1\nname: x\ncommand: x\n", 400, "a key that is a number"),
]


@pytest.mark.parametrize(
    ("case", "body", "status", "word"), BAD_FILES, ids=[c[0] for c in BAD_FILES]
)
def test_a_bad_yaml_job_file_is_refused_with_a_reason(
    client_for: Any, case: str, body: str | bytes, status: int, word: str
) -> None:
    response = client_for("alice").post("/api/v1/jobs/", data=body, content_type=YAML)
    assert response.status_code == status, response.content
    assert word in str(response.json())
    assert Job.objects.count() == 0


HEX = f"0x{'f' * 4000}"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", "/api/v1/jobs/preview/", f"name: x\ncommand: x\npriority: {HEX}\n"),
        ("patch", "/api/v1/jobs/{id}/", f"priority: {HEX}\n"),
        ("post", "/api/v1/jobs/{id}/resubmit/", f"array: {HEX}\n"),
    ],
)
def test_a_huge_yaml_number_is_a_400_on_every_endpoint_that_reads_yaml(
    client_for: Any, method: str, path: str, body: str
) -> None:
    client = client_for("alice")
    job = client.post("/api/v1/jobs/", data="name: x\ncommand: x\n", content_type=YAML).json()
    response = getattr(client, method)(path.format(id=job["id"]), body, content_type=YAML)
    assert response.status_code == 400, response.content
    assert "over 3,000 digits" in str(response.json())
    assert Job.objects.count() == 1


# PyYAML's own constructors fail on an explicit tag whose text is not one, with errors that
# are no YAMLError: !!timestamp's AttributeError, !!bool's KeyError, an empty !!float's
# IndexError were 500s; a month 13 was a ValueError, answered as "a number too long".
BAD_TAGS = [
    ("time_limit", "!!timestamp abc", "'abc' is not a timestamp"),
    ("hold", "!!bool maybe", "'maybe' is not a boolean"),
    ("nodes", "!!float", "'' is not a number"),
    ("nodes", "!!float abc", "'abc' is not a number"),
    ("time_limit", "!!timestamp 2024-13-45", "'2024-13-45' is not a timestamp"),
    ("time_limit", "!!timestamp 2024-01-01 10:00:00 +99:00", "is not a timestamp"),
]


@pytest.mark.parametrize(("field", "value", "message"), BAD_TAGS)
def test_an_explicit_yaml_tag_that_does_not_fit_its_text_is_a_400_naming_its_line(
    client_for: Any, field: str, value: str, message: str
) -> None:
    client = client_for("alice")
    client.raise_request_exception = False
    body = f"name: x\ncommand: x\n{field}: {value}\n"
    response = client.post("/api/v1/jobs/", data=body, content_type=YAML)
    assert response.status_code == 400, response.content
    detail = response.json()["detail"]
    assert detail.startswith("YAML parse error - line 3: ") and message in detail, detail
    assert Job.objects.count() == 0
