"""A refused YAML's listing shows each error at its line, prefixed with that line: a YAML
error that already names its line ("line 3: ...", as the API says it) is not prefixed twice."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.test import Client

from queue_service.jobs.models import Job


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("name: b\ncommand: [echo, hi\ngpus_per_node: 1\n", "line 3: "),
        ("name: n\ncommand: [a]\ngpus_per_node: !!int x\n", "line 3: 'x' is not an integer"),
    ],
    ids=["syntax", "constructor"],
)
def test_a_yaml_error_at_a_line_names_it_once(
    people: Any, local_cluster: Any, text: str, said: str
) -> None:
    client = Client()
    client.force_login(people["alice"])
    response = client.post("/submit/", {"mode": "yaml", "yaml": text})
    assert response.status_code == 400
    errors = re.findall(r'<div class="line-error">(.*?)</div>', response.content.decode())
    assert len(errors) == 1, errors
    error = html.unescape(errors[0])
    assert error.startswith(said), error
    assert error.count("line 3") == 1, error
    assert not Job.objects.exists()
