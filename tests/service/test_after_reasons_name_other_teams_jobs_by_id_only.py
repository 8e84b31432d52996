"""A job's `after` reasons are read by every member of its team, some of whom may not see a
job of another team it waits on (the API answers them 404 for it): such a job is named by
its id alone, without its name or state, as `gpuq show` and the job page name it. A job of
the waiting job's own team keeps its name and state."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, submit_job
from queue_service.jobs.snapshot import run_cycle
from queue_service.tenancy.models import Membership
from tests.conftest import spec

S = Job.State
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def alice_in_language(people: Any, teams: Any) -> None:
    # alice belongs to both teams; bob only to vision, so he cannot see language's jobs.
    Membership.objects.create(user=people["alice"], team=teams["language"], role="member")


def test_a_wait_for_another_teams_job_names_it_by_id_only(
    people: Any, alice_in_language: None, client_for: Any
) -> None:
    secret = submit_job(people["charlie"], spec(name="acquisition-due-diligence")).job
    mine = submit_job(
        people["alice"], spec(name="train", team="vision", after=[str(secret.pk)])
    ).job
    bob = client_for("bob")
    assert bob.get(f"/api/v1/jobs/{secret.pk}/").status_code == 404

    run_cycle()

    seen = bob.get(f"/api/v1/jobs/{mine.pk}/").json()
    assert seen["reason"]["code"] == "after"
    assert seen["reason"]["message"] == f"waiting for job {secret.pk} to succeed"


def test_a_wait_for_jobs_of_both_teams_names_only_its_own_teams_job(
    people: Any, alice_in_language: None
) -> None:
    secret = submit_job(people["charlie"], spec(name="acquisition-due-diligence")).job
    prep = submit_job(people["bob"], spec(name="prep")).job
    mine = submit_job(
        people["alice"], spec(team="vision", after=[str(prep.pk), str(secret.pk)])
    ).job

    run_cycle()

    mine.refresh_from_db()
    assert mine.reason["message"] == (
        f"waiting for 2 jobs to succeed: 'prep' (pending), {secret.pk}"
    )


def test_a_job_cancelled_after_another_teams_job_ended_is_told_its_id_only(
    people: Any, alice_in_language: None
) -> None:
    secret = submit_job(people["charlie"], spec(name="acquisition-due-diligence")).job
    mine = submit_job(people["alice"], spec(team="vision", after=[str(secret.pk)])).job
    cancel_job(people["charlie"], secret)

    run_cycle()

    mine.refresh_from_db()
    message = f"job {secret.pk} ended without succeeding, so this one can never start"
    assert mine.state == S.CANCELLED
    assert mine.reason == {"code": "after_never_met", "message": message, "details": {}}
    assert mine.events.last().message == message


def test_a_wait_for_another_teams_array_names_it_by_id_only(
    people: Any, alice_in_language: None
) -> None:
    sweep = submit_job(people["charlie"], spec(name="secret-sweep", array="0-1")).job
    mine = submit_job(people["alice"], spec(team="vision", after=[str(sweep.array_id)])).job

    run_cycle()

    mine.refresh_from_db()
    assert mine.reason["message"] == f"waiting for array {sweep.array_id} to succeed"

    cancel_job(people["charlie"], sweep)
    run_cycle()

    mine.refresh_from_db()
    assert mine.state == S.CANCELLED
    assert mine.reason["message"] == (
        f"a task of array {sweep.array_id} ended without succeeding, so this one can never start"
    )
