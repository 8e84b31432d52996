"""A job's page follows its log from the start. Before the job had ever run, the tail said
"Following stdout (0 bytes so far)", as if it ran and printed nothing. It says the job has not
started yet, and still asks every 2 s, so that the output appears once it runs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.conftest import record_runs, spec

HX = {"HX-Request": "true"}


@pytest.fixture
def alice(people: Any) -> Client:
    client = Client()
    client.force_login(people["alice"])
    return client


@pytest.mark.parametrize(
    ("state", "attempts", "said"),
    [
        ("pending", 0, "has not started yet"),
        ("admitted", 0, "has not started yet"),
        ("dispatching", 1, "has not started yet"),
        ("queued", 1, "has not started yet"),  # its cluster has it, not yet running
        ("suspended", 0, "has not started yet"),  # held at submit, or suspended while waiting
        ("running", 1, "Following stdout"),  # started: printed nothing yet
    ],
)
def test_the_log_of_a_job_that_has_not_run_says_so_and_keeps_following(
    alice: Client, people: Any, state: str, attempts: int, said: str
) -> None:
    job = submit_job(people["alice"], spec(name="waits")).job
    Job.objects.filter(pk=job.pk).update(state=state, attempts=attempts)

    fragment = alice.get(f"/jobs/{job.pk}/log/?offset=0", headers=HX).content.decode()

    assert said in fragment
    assert "every 2s" in fragment  # asked again: its output shows once it runs
    if state != "running":
        assert "so far" not in fragment


def test_a_requeued_job_whose_last_attempt_printed_nothing_says_its_next_has_not_started(
    alice: Client, people: Any
) -> None:
    job = submit_job(people["alice"], spec(name="requeued")).job
    Job.objects.filter(pk=job.pk).update(state="queued", attempts=2)
    record_runs(job, (timezone.now() - timedelta(minutes=5), timezone.now()))

    fragment = alice.get(f"/jobs/{job.pk}/log/?offset=0&attempt=2", headers=HX).content.decode()

    assert "Its next attempt has not started yet" in fragment
    assert "every 2s" in fragment
