"""How many times the queue preempted a job (Job.preemptions) is part of the job, as the API
and its page show it to those who may see the job: the reason it waits or runs only within
its team's nominal after a preemption then reads against a number the owner can check."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Membership, Quota
from tests.conftest import spec
from tests.service.test_the_queues_own_preemptions_use_no_retry import _running, reclaimed

pytestmark = pytest.mark.django_db
S = Job.State


def _reclaimed_once(people: Any, settings: Any) -> Job:
    settings.GPUQ_PROTECT_AFTER_PREEMPTIONS = None
    Quota.objects.filter(gpu_model="SIM-A100").update(nominal_gpus=4, borrowing_limit_gpus=4)
    # Language's nominal is full of its high job: the borrower borrows vision's, which
    # vision then reclaims.
    _running(submit_job(people["charlie"], spec(name="own", gpus_per_node=4, priority="high")).job)
    job = submit_job(people["charlie"], spec(name="borrower", gpus_per_node=4)).job
    job = reclaimed(job, people)
    assert job.state == S.PENDING, job.state
    return job


@pytest.mark.parametrize(("who", "sees"), [("charlie", True), ("lena", True), ("alice", False)])
def test_the_api_gives_a_jobs_count_of_the_queues_preemptions_to_whom_may_see_it(
    people: Any,
    teams: Any,
    make_user: Any,
    local_cluster: Any,
    settings: Any,
    client_for: Any,
    who: str,
    sees: bool,
) -> None:
    # Charlie's job (team language); lena is charlie's teammate, alice an outsider.
    people["lena"] = make_user("lena")
    Membership.objects.create(user=people["lena"], team=teams["language"], role="member")
    job = _reclaimed_once(people, settings)
    answer = client_for(who).get(f"/api/v1/jobs/{job.pk}/")
    if not sees:
        assert answer.status_code == 404
        return
    assert answer.status_code == 200
    assert answer.json()["preemptions"] == 1


def test_a_job_never_preempted_counts_none(
    people: Any, local_cluster: Any, client_for: Any
) -> None:
    job = submit_job(people["charlie"], spec(name="quiet")).job
    assert client_for("charlie").get(f"/api/v1/jobs/{job.pk}/").json()["preemptions"] == 0


def test_the_jobs_page_says_how_often_the_queue_preempted_it(
    people: Any, local_cluster: Any, settings: Any
) -> None:
    job = _reclaimed_once(people, settings)
    client = Client()
    client.force_login(people["charlie"])
    page = client.get(f"/jobs/{job.pk}/live/").content.decode()
    assert "preempted by the queue 1 time" in page
    quiet = submit_job(people["charlie"], spec(name="quiet")).job
    assert "preempted by the queue" not in client.get(f"/jobs/{quiet.pk}/live/").content.decode()
