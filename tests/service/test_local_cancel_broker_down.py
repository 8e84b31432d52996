"""With workers (Celery), a cancel of a job on its cluster records `cancelling` and
sends the stop as a task. When the broker cannot take that task, the cancel has still been
recorded, and the sync sends a lost stop again (ARCHITECTURE.md, step 5): the API must answer
the cancel, not fail with a 500 (the submit's cycle kick is guarded the same way)."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.conftest import spec
from tests.service.conftest import free_port
from tests.service.test_job_flow import run_until

S = Job.State


@pytest.mark.django_db(transaction=True)
def test_cancel_of_a_running_job_answers_when_the_broker_cannot_take_the_stop(
    people: Any, local_cluster: Any, client_for: Any, settings: Any, monkeypatch: Any
) -> None:
    from queue_service.celery import app

    job = submit_job(people["alice"], spec(name="long", command=["sleep", "60"])).job
    job = run_until(job, lambda j: j.state == S.RUNNING)  # embedded loop: it runs
    client = client_for("alice")
    dead = f"redis://127.0.0.1:{free_port()}/0"  # workers' broker, unreachable now
    settings.CELERY_BROKER_URL = dead
    monkeypatch.setattr(app.conf, "broker_url", dead)
    monkeypatch.setattr(app, "_pool", None)

    client.raise_request_exception = False
    response = client.post(f"/api/v1/jobs/{job.pk}/cancel/")

    job.refresh_from_db()
    assert job.state == S.CANCELLING  # the cancel was recorded either way
    assert response.status_code == 200, (response.status_code, response.content[:300])
    assert response.json()["state"] == S.CANCELLING
