"""Jobs that run after others (Slurm's --dependency=afterok): a job with `after` starts only
once each of those jobs has succeeded; until then the scheduler does not see it and it says
what it waits for; if one of them ends otherwise, it is cancelled with why. On the local
backend with real processes, without Celery (the embedded loop)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, submit_job
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import spec
from tests.service.test_job_flow import run_until

S = Job.State
pytestmark = pytest.mark.django_db(transaction=True)


def test_a_job_starts_once_the_job_it_runs_after_has_succeeded(
    people: Any, local_cluster: Any
) -> None:
    first = submit_job(people["alice"], spec(name="prep", command="sleep 1; echo prepared")).job
    second = submit_job(people["bob"], spec(name="train", after=[str(first.pk)])).job
    run_cycle()

    second.refresh_from_db()
    assert (second.state, second.queue_position) == (S.PENDING, None)
    assert second.reason["code"] == "after"
    assert second.reason["message"] == "waiting for job 'prep' (pending) to succeed"
    assert second.reason["details"] == {"after": [str(first.pk)]}

    second = run_until(second, lambda j: j.is_terminal)
    first.refresh_from_db()

    assert (first.state, second.state) == (S.SUCCEEDED, S.SUCCEEDED)
    assert second.started_at >= first.finished_at


def test_a_job_after_one_that_failed_is_cancelled_with_why(people: Any, local_cluster: Any) -> None:
    first = submit_job(people["alice"], spec(name="prep", command="exit 3")).job
    second = submit_job(people["alice"], spec(name="train", after=[str(first.pk)])).job

    second = run_until(second, lambda j: j.is_terminal)

    assert second.state == S.CANCELLED and second.external_id == ""
    message = f"job 'prep' ({first.pk}) ended failed, so this one can never start"
    assert second.reason == {"code": "after_never_met", "message": message, "details": {}}
    assert second.events.last().code == "after_never_met"


def test_a_held_job_takes_no_place_in_the_queue(people: Any, local_cluster: Any) -> None:
    # The cluster (2 nodes x 4 GPUs) is full: everything else waits in the scheduler's order.
    blocker = submit_job(people["alice"], spec(name="all", nodes=2, gpus_per_node=4)).job
    run_cycle()
    waits_for = [str(blocker.pk), str(submit_job(people["alice"], spec(name="x")).job.pk)]
    held = submit_job(people["alice"], spec(name="held", after=waits_for)).job
    submit_job(people["alice"], spec(name="later"))

    run_cycle()

    queue = dict(Job.objects.filter(state=S.PENDING).values_list("name", "queue_position"))
    assert queue == {"x": 1, "held": None, "later": 2}
    held.refresh_from_db()
    assert (
        held.reason["message"] == "waiting for 2 jobs to succeed: 'all' (admitted), 'x' (pending)"
    )


def test_cancelling_the_first_job_cancels_the_one_after_it(people: Any, local_cluster: Any) -> None:
    first = submit_job(people["alice"], spec(name="prep", nodes=3, gpus_per_node=4)).job
    second = submit_job(people["alice"], spec(name="train", after=[str(first.pk)])).job
    cancel_job(people["alice"], first)

    run_cycle()

    second.refresh_from_db()
    assert second.state == S.CANCELLED
    assert "ended cancelled, so this one can never start" in second.reason["message"]


def test_after_names_jobs_you_can_see_that_can_still_succeed(client_for: Any, people: Any) -> None:
    alices = submit_job(people["alice"], spec(name="alices")).job
    charlies = submit_job(people["charlie"], spec(name="charlies")).job
    ended = submit_job(people["alice"], spec(name="ended")).job
    cancel_job(people["alice"], ended)
    bob = client_for("bob")

    def after(*ids: Any) -> Any:
        return bob.post("/api/v1/jobs/", spec(after=[str(i) for i in ids]), format="json")

    outsider = after(charlies.pk)
    assert outsider.status_code == 400
    assert outsider.json() == {"after": [f"no job {charlies.pk} among those you can see"]}
    assert after(ended.pk).json() == {
        "after": [f"job {ended.pk} ended cancelled: it can never succeed"]
    }
    assert "after" in after("not-a-job").json()
    assert "after" in after(*(uuid.uuid4() for _ in range(21))).json()
    accepted = after(alices.pk, alices.pk)
    assert accepted.status_code == 201, accepted.content
    assert accepted.json()["spec"]["after"] == [str(alices.pk)]  # each once
    assert Job.objects.count() == 4


def test_preview_says_a_job_would_wait_for_its_after_jobs(
    client_for: Any, people: Any, local_cluster: Any
) -> None:
    first = submit_job(people["alice"], spec(name="prep")).job

    answer = client_for("alice").post(
        "/api/v1/jobs/preview/", spec(after=[str(first.pk)]), format="json"
    )

    assert answer.status_code == 200
    assert answer.json() == {
        "starts_now": False,
        "starts_soon": False,
        "reason": {
            "code": "after",
            "message": "waiting for job 'prep' (pending) to succeed",
            "details": {"after": [str(first.pk)]},
        },
        "position": None,
        "estimated_start": None,
    }
