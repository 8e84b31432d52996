"""`gpuq update --help` and `gpuq --help` say what update can change: priority, time limit,
what a job emails about (--notify) and its array's %N."""

from __future__ import annotations

import re

from queue_service.cli import parser


def _update() -> str:
    top = parser()
    (sub,) = [a for a in top._actions if a.dest == "command"]
    return str(sub.choices["update"].description)


def test_update_says_in_its_description_that_it_changes_what_jobs_email_about() -> None:
    description = _update()
    assert re.search(r"\bemail", description), description
    assert "--notify" in description, description
    for what in ("priority", "time limit", "limit of tasks at once"):
        assert what in description, description
