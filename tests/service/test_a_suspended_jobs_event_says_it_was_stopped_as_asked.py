"""A running job that its owner suspends is stopped by its cluster as asked; the timeline's
line for it says so, and not "stopped (cancelled)", which reads as though the job was cancelled
instead of kept to resume. How it ended is said when it is not what the stop does (a job that
exits on its own as it is asked to stop). On the local backend's real processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from queue_service.jobs.dispatch import _suspended_says
from queue_service.jobs.models import Job
from queue_service.jobs.services import suspend_job
from tests.service.test_an_attempts_log_is_read_to_its_end_before_the_next import (
    run_until,
    runs_twice,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_suspended_jobs_line_says_it_was_stopped_not_cancelled(
    people: dict[str, Any], local_cluster: Any, tmp_path: Path
) -> None:
    job = runs_twice(people, tmp_path / "ran-once")
    suspend_job(people["alice"], Job.objects.get(pk=job.pk))
    run_until(job.pk, "suspended")

    said = Job.objects.get(pk=job.pk).events.filter(code="suspended").get().message
    assert "cancel" not in said.lower(), said
    assert said.startswith("stopped as asked") and said.endswith("suspended until resumed"), said


@pytest.mark.parametrize(
    ("remote", "native", "says"),
    [
        ("cancelled", "CANCELLED", "stopped as asked; suspended until resumed"),
        ("failed", "FAILED", "stopped as asked (it ended FAILED); suspended until resumed"),
        ("succeeded", "", "stopped as asked (it ended succeeded); suspended until resumed"),
    ],
)
def test_how_a_suspended_job_ended_is_said_when_the_stop_did_not_end_it(
    remote: str, native: str, says: str
) -> None:
    assert _suspended_says(remote, native) == says
