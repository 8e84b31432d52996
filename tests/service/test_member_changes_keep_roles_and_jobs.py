"""Adding and removing team members: adding someone again without a role keeps their role,
and a member whose jobs have not all ended cannot be removed (their jobs would stay charged
to the team while they could neither see nor cancel them). Alice and Bob are members of
vision, Dana administers it, Charlie administers language."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Membership
from tests.conftest import spec

ADMIN, MEMBER = Membership.Role.ADMIN, Membership.Role.MEMBER


@pytest.mark.parametrize(
    ("username", "was", "body", "becomes"),
    [
        ("bob", ADMIN, {}, ADMIN),  # no role given: not demoted
        ("bob", MEMBER, {}, MEMBER),
        ("charlie", None, {}, MEMBER),  # a new member: a member
        ("bob", ADMIN, {"role": MEMBER}, MEMBER),  # a role named is a change of role
        ("charlie", None, {"role": ADMIN}, ADMIN),
    ],
)
def test_adding_a_member_without_a_role_keeps_the_role_they_have(
    client_for: Any,
    people: Any,
    username: str,
    was: str | None,
    body: dict[str, str],
    becomes: str,
) -> None:
    """POST /teams/{slug}/members/ adds a member (role `member` unless named); for someone who
    is a member already it changes only what it names: a change of role is asked for by
    naming it (POST with `role`, or PATCH members/<username>/)."""
    if was is not None:
        Membership.objects.filter(user=people[username], team__slug="vision").update(role=was)

    response = client_for("dana").post(
        "/api/v1/teams/vision/members/", {"username": username, **body}, format="json"
    )

    assert response.status_code == 200, response.content
    assert Membership.objects.get(user=people[username], team__slug="vision").role == becomes
    assert {"username": username, "role": becomes} in response.json()


def _alice_runs_one_job_and_waits_for_another(people: Any) -> Job:
    running = submit_job(people["alice"], spec(name="running")).job
    Job.objects.filter(pk=running.pk).update(state=Job.State.RUNNING, gpu_model="SIM-A100")
    submit_job(people["alice"], spec(name="waiting"))
    return running


def test_removing_a_member_whose_jobs_have_not_ended_is_a_409_saying_how_many(
    client_for: Any, people: Any
) -> None:
    """As Slurm's sacctmgr ("Job(s) active, cancel job(s) before remove"): a 409 naming how
    many of the member's jobs have not ended, and she stays a member who sees her jobs."""
    running = _alice_runs_one_job_and_waits_for_another(people)

    response = client_for("dana").delete("/api/v1/teams/vision/members/alice/")

    assert response.status_code == 409, response.content
    assert response.json()["detail"] == (
        "alice has 2 jobs in vision that have not ended (1 pending, 1 running): cancel them,"
        " or wait for them to end, before removing alice"
    )
    assert Membership.objects.filter(user=people["alice"], team__slug="vision").exists()
    assert client_for("alice").get(f"/api/v1/jobs/{running.pk}/").status_code == 200


@pytest.mark.parametrize(
    ("state", "removed"),
    [
        (Job.State.SUSPENDED, False),  # holds nothing, but resuming it queues it again
        (Job.State.CANCELLING, False),
        (Job.State.SUCCEEDED, True),
        (Job.State.CANCELLED, True),
    ],
)
def test_a_member_is_removed_once_all_her_jobs_have_ended(
    client_for: Any, people: Any, state: str, removed: bool
) -> None:
    job = submit_job(people["alice"], spec()).job
    Job.objects.filter(pk=job.pk).update(state=state)

    response = client_for("dana").delete("/api/v1/teams/vision/members/alice/")

    assert response.status_code == (204 if removed else 409), response.content
    still = Membership.objects.filter(user=people["alice"], team__slug="vision").exists()
    assert still is not removed


def test_the_team_admin_page_shows_why_a_member_cannot_be_removed(people: Any) -> None:
    _alice_runs_one_job_and_waits_for_another(people)
    dana = Client()
    dana.force_login(people["dana"])

    response = dana.post("/teams/vision/members/alice/remove/")

    assert response.status_code == 409
    assert "alice has 2 jobs in vision that have not ended" in response.content.decode()
    assert Membership.objects.filter(user=people["alice"], team__slug="vision").exists()


@pytest.mark.django_db(transaction=True)
def test_a_submit_racing_the_members_removal_is_refused_or_seen_never_lost(
    people: Any,
) -> None:
    """The removal refuses while the member has jobs, and a submit made while it runs must
    not slip past that check (a job charged to the team that its owner could no longer see
    or cancel): both lock the membership, so the submit waits for the removal and is then
    refused, naming the team."""
    import threading

    from django.db import connection, transaction
    from rest_framework.exceptions import ValidationError

    outcome: list[object] = []

    def submit() -> None:
        try:
            outcome.append(submit_job(people["alice"], spec(name="racing")).job)
        except ValidationError as exc:
            outcome.append(exc.detail)
        finally:
            connection.close()  # this thread's own connection

    with transaction.atomic():  # a removal under way: its lock taken, its check made
        (membership,) = Membership.objects.select_for_update().filter(
            user=people["alice"], team__slug="vision"
        )
        racing = threading.Thread(target=submit)
        racing.start()
        racing.join(timeout=2)
        assert racing.is_alive() and outcome == []  # the submit waits for the removal
        membership.delete()
    racing.join(timeout=30)

    assert outcome == [{"team": ["you are not a member of team 'vision'"]}]
    assert not Job.objects.filter(user=people["alice"]).exists()


def test_a_teams_slug_cannot_be_changed_in_the_admin(client: Client, teams: Any) -> None:
    """The slug names the team on its clusters (Kubernetes namespace and Volcano queue, Slurm
    account in `accounts`): renamed, its running workloads would no longer be its own. The
    admin shows it read-only once the team exists."""
    from django.contrib.auth import get_user_model

    root = get_user_model().objects.create_superuser("super", "super@example.org", "pw")
    client.force_login(root)
    vision = teams["vision"]
    page = client.get(f"/admin/tenancy/team/{vision.pk}/change/").content.decode()
    assert 'name="slug"' not in page and "vision" in page
    assert 'name="slug"' in client.get("/admin/tenancy/team/add/").content.decode()
