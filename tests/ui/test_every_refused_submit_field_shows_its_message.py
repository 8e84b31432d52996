"""A refused submit says "fix the fields marked below": every field the API can refuse has
its message on the form. The kind of job (two radio buttons, so only a hand-made or a stale
request sends another value) had none: the page said to fix a field and marked nothing."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client

from queue_service.jobs.models import Job
from queue_service.jobs.spec import JobSpecSerializer
from tests.conftest import spec


def test_a_refused_kind_is_shown_at_the_kind_of_job(people: Any) -> None:
    client = Client()
    client.force_login(people["alice"])
    form = {"kind": "batch", "name": "n", "command": "true", "nodes": "1", "gpus_per_node": "1"}

    response = client.post("/submit/", form)

    page = response.content.decode()
    assert response.status_code == 400
    serializer = JobSpecSerializer(data=spec(kind="batch"))
    assert not serializer.is_valid()
    expected = str(serializer.errors["kind"][0]).replace('"', "&quot;")
    kind = page[page.index('<fieldset class="kind') : page.index("</fieldset>")]
    assert re.search(rf'<ul class="errors" id="e-kind">\s*<li>{re.escape(expected)}</li>', kind)
    assert 'aria-describedby="e-kind"' in kind
    assert not Job.objects.exists()
