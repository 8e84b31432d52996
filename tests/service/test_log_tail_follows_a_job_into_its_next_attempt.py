"""The job page's log tail follows a job, not one attempt of it: an attempt's log that ends
(the backend's `eof`, which is the attempt's) while the job goes on (preempted and requeued,
suspended and resumed) is followed by the next attempt's, on the local backend's real
processes and the embedded loop."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import transaction

from queue_service.jobs.dispatch import request_stop
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job, transition
from tests.conftest import spec
from tests.service.test_job_flow import run_until
from tests.service.test_lifecycle_edges import wait_for_verdict
from tests.ui.test_ui_edges import client_of, log_text, poll

S = Job.State
pytestmark = pytest.mark.django_db(transaction=True)
WHY = "reclaimed: team language needs its nominal quota back"


def preempt(job: Job) -> None:
    """As the cycle marks a victim: preempting, and its stop sent after commit."""
    with transaction.atomic():
        transition(
            job,
            S.PREEMPTING,
            code="preempting_reclaim",
            message=WHY,
            reason={"code": "preempting", "message": WHY, "details": {}},
        )
        request_stop(job)


def test_a_page_following_a_preempted_jobs_output_goes_on_to_its_next_attempt(
    people: Any, local_cluster: Any, settings: Any
) -> None:
    # The poller stopped for good ("End of stdout") once the cluster had ended the preempted
    # attempt, before gpuq's sync recorded the requeue: the requeued attempt's output never
    # showed without a reload.
    settings.GPUQ_PREEMPTION_GRACE_S = 1
    script = 'echo "attempt $GPUQ_ATTEMPT"; while true; do sleep 0.05; done'
    job = submit_job(people["alice"], spec(command=["/bin/sh", "-c", script])).job
    job = run_until(job, lambda j: j.state == S.RUNNING)
    alice = client_of(people["alice"])
    deadline = time.monotonic() + 10
    pieces: list[str] = []
    url = f"/jobs/{job.pk}/log/?offset=0"
    while "attempt 1" not in log_text(pieces):
        assert time.monotonic() < deadline, "attempt 1 wrote nothing"
        piece, url = poll(alice, url)
        pieces.append(piece)

    preempt(job)
    wait_for_verdict(local_cluster, job)  # the cluster ended it; no sync has seen that yet
    piece, url = poll(alice, url)
    pieces.append(piece)
    job.refresh_from_db()
    assert job.state == S.PREEMPTING  # not over: it is requeued once the sync sees the end
    # It says the attempt's output ended, and asks again, more slowly.
    assert "End of attempt 1's stdout" in piece and 'data-eof="false"' in piece, piece
    assert "every 5s" in piece

    job = run_until(job, lambda j: j.state == S.RUNNING and j.attempts == 2)
    deadline = time.monotonic() + 10
    while "attempt 2" not in log_text(pieces):
        assert url, f"the page stopped following the job: {piece}"
        assert time.monotonic() < deadline, "attempt 2's output never came"
        piece, url = poll(alice, url)
        pieces.append(piece)
    assert log_text(pieces) == "attempt 1\n— attempt 2 —attempt 2\n"
