"""A job back in the queue (requeued after a preemption, resumed after a suspend, its placement
undone) waits with nothing of its last attempt: no backend id, no word of the cluster's about
the run that ended, no exit code, no placement, GPU model or borrowing, on the API and the job
page alike, until its next attempt reaches a cluster."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from queue_service.jobs.models import Job
from queue_service.jobs.services import resume_job, submit_job, suspend_job
from tests.conftest import spec
from tests.service.test_job_flow import run_until
from tests.ui.test_ui_edges import client_of

S = Job.State
pytestmark = pytest.mark.django_db(transaction=True)
LAST_ATTEMPT = ("external_id", "remote_state", "exit_code", "placement", "gpu_model", "borrowed")
WAITING = {
    "external_id": "",
    "remote_state": "",
    "exit_code": None,
    "placement": [],
    "gpu_model": "",
    "borrowed": False,
}


def said_of_it(client_for: Any, job: Job) -> dict[str, Any]:
    body = client_for("alice").get(f"/api/v1/jobs/{job.pk}/").json()
    return {key: body[key] for key in ("state", *LAST_ATTEMPT)}


def test_a_requeued_job_waiting_to_restart_does_not_say_what_the_cluster_said_of_its_last_run(
    people: Any, local_cluster: Any, client_for: Any, settings: Any
) -> None:
    # It said "the cluster says cancelled" (its ended attempt's) while it waited to be
    # restarted, and on its next attempt until that one ran.
    settings.GPUQ_PREEMPTION_GRACE_S = 1
    # Two jobs fill the cluster; a high-priority job then preempts the low one, which waits.
    job = submit_job(
        people["alice"],
        spec(name="victim", gpus_per_node=4, priority="low", command=["sleep", "60"]),
    ).job
    other = submit_job(
        people["bob"], spec(name="other", gpus_per_node=4, command=["sleep", "60"])
    ).job
    job = run_until(job, lambda j: j.state == S.RUNNING)
    assert job.gpu_model == "SIM-A100" and job.placement
    run_until(other, lambda j: j.state == S.RUNNING)
    high = submit_job(
        people["bob"],
        spec(name="urgent", gpus_per_node=4, priority="high", command=["sleep", "60"]),
    ).job
    run_until(high, lambda j: j.state == S.RUNNING)
    job.refresh_from_db()

    assert job.events.filter(code="requeued_preemption").exists()
    assert said_of_it(client_for, job) == {"state": S.PENDING, **WAITING}
    page = client_of(people["alice"]).get(reverse("job", args=[job.pk])).content.decode()
    assert "the cluster says" not in page


def test_a_resumed_job_does_not_say_what_the_cluster_said_of_its_last_run(
    people: Any, local_cluster: Any, client_for: Any
) -> None:
    job = submit_job(people["alice"], spec(command=["sleep", "60"])).job
    job = run_until(job, lambda j: j.state == S.RUNNING)
    suspend_job(people["alice"], job)
    job = run_until(job, lambda j: j.state == S.SUSPENDED)
    # Suspended, it keeps its last run's id and what the cluster said: its logs stay readable.
    assert job.external_id and job.remote_state

    resume_job(people["alice"], job)

    assert said_of_it(client_for, job) == {"state": S.PENDING, **WAITING}
