"""Submitting is idempotent per key; every state change is one conditional UPDATE plus an
event, and a transition that lost a race changes nothing."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection

from queue_service.jobs.models import Job, JobEvent
from queue_service.jobs.services import ALLOWED, StaleState, submit_job, transition
from queue_service.tenancy.models import Membership
from tests.conftest import spec

S = Job.State


def test_the_same_idempotency_key_twice_creates_one_job(client_for: Any) -> None:
    client = client_for("alice")
    first = client.post("/api/v1/jobs/", spec(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = client.post("/api/v1/jobs/", spec(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert Job.objects.count() == 1


def test_idempotency_keys_belong_to_their_user(client_for: Any) -> None:
    a = client_for("alice").post("/api/v1/jobs/", spec(), format="json", HTTP_IDEMPOTENCY_KEY="k")
    b = client_for("bob").post("/api/v1/jobs/", spec(), format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert a.json()["id"] != b.json()["id"]
    assert Job.objects.count() == 2


def test_without_a_key_each_submit_is_a_new_job(client_for: Any) -> None:
    client = client_for("alice")
    client.post("/api/v1/jobs/", spec(), format="json")
    client.post("/api/v1/jobs/", spec(), format="json")
    assert Job.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_parallel_submits_with_one_key_create_one_job(people: Any) -> None:
    def submit(_: int) -> str:
        try:
            return str(submit_job(people["alice"], spec(), idempotency_key="race").job.pk)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=6) as pool:
        ids = set(pool.map(submit, range(12)))
    assert len(ids) == 1
    assert Job.objects.filter(idempotency_key="race").count() == 1


def test_a_submit_the_database_refuses_stores_nothing_and_says_so(client_for: Any) -> None:
    """An insert that fails (here a trigger stands in for a cluster deleted while the submit
    ran) is a 409 saying nothing was stored, not some earlier job of the user's as the
    'already submitted' answer of an Idempotency-Key."""
    client = client_for("alice")
    older = client.post("/api/v1/jobs/", spec(name="older"), format="json").json()
    with connection.cursor() as cursor:  # DDL is transactional: the test's rollback drops it
        cursor.execute(
            "CREATE FUNCTION refuse_doomed() RETURNS trigger AS $$ BEGIN"
            " IF NEW.name = 'doomed' THEN RAISE foreign_key_violation USING MESSAGE = 'gone';"
            " END IF; RETURN NEW; END $$ LANGUAGE plpgsql;"
            " CREATE TRIGGER refuse_doomed BEFORE INSERT ON jobs_job"
            " FOR EACH ROW EXECUTE FUNCTION refuse_doomed()"
        )

    response = client.post("/api/v1/jobs/", spec(name="doomed"), format="json")

    assert response.status_code == 409, response.content
    assert "not stored" in response.json()["detail"]
    assert older["id"] not in response.content.decode()
    assert list(Job.objects.values_list("name", flat=True)) == ["older"]


def test_an_idempotency_key_does_not_show_a_former_member_the_teams_job(
    client_for: Any, people: Any, teams: Any
) -> None:
    alice = client_for("alice")
    first = alice.post("/api/v1/jobs/", spec(), format="json", HTTP_IDEMPOTENCY_KEY="k1")
    job_id = first.json()["id"]
    Membership.objects.filter(user=people["alice"], team=teams["vision"]).delete()
    assert alice.get(f"/api/v1/jobs/{job_id}/").status_code == 404

    again = alice.post("/api/v1/jobs/", spec(), format="json", HTTP_IDEMPOTENCY_KEY="k1")

    assert again.status_code == 409
    assert job_id not in again.content.decode()
    assert "can no longer see" in again.json()["detail"]


def test_a_submit_records_an_event(people: Any) -> None:
    job = submit_job(people["alice"], spec()).job
    assert [(e.to_state, e.code) for e in job.events.all()] == [("pending", "submitted")]


def test_a_transition_updates_state_and_writes_one_event(people: Any) -> None:
    job = submit_job(people["alice"], spec()).job
    transition(job, S.CANCELLED, code="cancelled", message="test")
    job.refresh_from_db()
    assert job.state == S.CANCELLED and job.finished_at is not None
    assert JobEvent.objects.filter(job=job, from_state="pending", to_state="cancelled").count() == 1


def test_a_transition_from_a_stale_state_changes_nothing(people: Any) -> None:
    job = submit_job(people["alice"], spec()).job
    stale = Job.objects.get(pk=job.pk)
    transition(job, S.CANCELLED)
    with pytest.raises(StaleState):
        transition(stale, S.ADMITTED)
    job.refresh_from_db()
    assert job.state == S.CANCELLED
    assert job.events.count() == 2


@pytest.mark.parametrize("terminal", sorted(Job.TERMINAL))
def test_terminal_states_have_no_way_out(terminal: str) -> None:
    assert ALLOWED[terminal] == frozenset()


def test_every_state_has_a_transition_rule() -> None:
    assert set(ALLOWED) == set(S.values)


def test_an_invalid_transition_is_refused(people: Any) -> None:
    job = submit_job(people["alice"], spec()).job
    with pytest.raises(ValueError, match="not a valid transition"):
        transition(job, S.SUCCEEDED)
    job.refresh_from_db()
    assert job.state == S.PENDING


def test_terminal_and_active_subsets_do_not_overlap() -> None:
    assert not (Job.TERMINAL & Job.ACTIVE)
    assert S.PENDING not in Job.TERMINAL | Job.ACTIVE
