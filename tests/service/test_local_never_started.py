"""a job whose program the local cluster could not start never ran. It must not be
recorded as running, nor charged a run (usage, fair share), nor emailed a `start`."""

from __future__ import annotations

import time
from typing import Any

import pytest

from queue_service.jobs.dispatch import run_once, sync_cluster
from queue_service.jobs.models import Job, JobRun, Notification
from queue_service.jobs.services import submit_job
from tests.conftest import spec
from tests.service.test_lifecycle_edges import moves, wait_for_verdict

S = Job.State


@pytest.mark.django_db(transaction=True)
def test_a_job_whose_program_could_not_be_started_is_neither_running_nor_charged(
    people: Any, local_cluster: Any, settings: Any
) -> None:
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    job = submit_job(
        people["alice"],
        spec(name="typo", command=["/no/such/program"], gpus_per_node=4, notify=["start"]),
    ).job
    run_once()  # sync, cycle, dispatch: handed over
    job.refresh_from_db()
    assert job.state == S.QUEUED, job.reason
    wait_for_verdict(local_cluster, job)  # the supervisor's "could not start"
    time.sleep(1.0)  # time that would be charged

    sync_cluster(local_cluster.pk)

    job.refresh_from_db()
    assert (job.state, job.exit_code) == (S.FAILED, 127), moves(job)
    assert "could not start" in job.reason["message"]
    # Nothing ran: no "running" move, no run charged, no start email.
    ran = {
        "running_move": S.RUNNING in [to for _, to in moves(job)],
        "runs": [
            (r.gpus, round((r.ended_at - r.started_at).total_seconds(), 1))
            for r in JobRun.objects.filter(job=job)
        ],
        "start_email": Notification.objects.filter(job=job, event="start").exists(),
    }
    assert ran == {"running_move": False, "runs": [], "start_email": False}, moves(job)
