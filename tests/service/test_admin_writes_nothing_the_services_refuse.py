"""The Django admin writes nothing the services would refuse.

The admin is where site staff look at what the services wrote; it must not write what the
services refuse (a job or token no service made, a team left without what the services keep)
nor answer a plain form with a 500."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from queue_service.jobs.models import Job, JobArray
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import ApiToken, Membership, Team
from tests.conftest import spec


def team_form(team: Team, **changes: dict[str, str]) -> dict[str, str]:
    """The admin's change form of `team` as drawn (its memberships and quotas inline), with
    `changes` per member's username applied to that member's row (e.g. DELETE or role)."""
    data = {
        "name": team.name,
        "weight": str(team.weight),
        "max_nominal_gpus": str(team.max_nominal_gpus),
        "max_borrowing_gpus": str(team.max_borrowing_gpus),
    }
    members = list(team.memberships.select_related("user").order_by("pk"))
    data |= {
        "memberships-TOTAL_FORMS": str(len(members)),
        "memberships-INITIAL_FORMS": str(len(members)),
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }
    for i, m in enumerate(members):
        row = {"id": str(m.pk), "team": str(team.pk), "user": str(m.user_id), "role": m.role}
        row |= changes.get(m.user.username, {})
        data |= {f"memberships-{i}-{k}": v for k, v in row.items()}
    quotas = list(team.quotas.order_by("pk"))
    data |= {
        "quotas-TOTAL_FORMS": str(len(quotas)),
        "quotas-INITIAL_FORMS": str(len(quotas)),
        "quotas-MIN_NUM_FORMS": "0",
        "quotas-MAX_NUM_FORMS": "1000",
    }
    for i, q in enumerate(quotas):
        row = {
            "id": str(q.pk),
            "team": str(team.pk),
            "gpu_model": q.gpu_model,
            "nominal_gpus": str(q.nominal_gpus),
            "borrowing_limit_gpus": ""
            if q.borrowing_limit_gpus is None
            else str(q.borrowing_limit_gpus),
            "lending_limit_gpus": "" if q.lending_limit_gpus is None else str(q.lending_limit_gpus),
            "max_running_jobs": "" if q.max_running_jobs is None else str(q.max_running_jobs),
        }
        data |= {f"quotas-{i}-{k}": v for k, v in row.items()}
    return data


def test_adding_an_api_token_in_the_admin_never_stores_a_token_without_a_key(
    site_admin: Client, people: Any
) -> None:
    # A key is made and shown once to its owner (account page, POST /api/v1/tokens/); the
    # admin's add form makes a row with no key at all, which nobody can ever use.
    for name in ("ci", "laptop"):
        response = site_admin.post(
            "/admin/tenancy/apitoken/add/", {"user": people["alice"].pk, "name": name}
        )
        assert response.status_code != 500, f"adding token {name!r} in the admin was a 500"

    assert not ApiToken.objects.filter(key_hash="").exists()


@pytest.mark.parametrize(
    ("path", "form"),
    [
        ("/admin/jobs/job/add/", {"events-TOTAL_FORMS": "0", "events-INITIAL_FORMS": "0"}),
        ("/admin/jobs/jobarray/add/", {}),
    ],
    ids=["job", "array"],
)
def test_the_admin_only_reads_jobs_so_adding_one_there_is_refused_not_a_500(
    site_admin: Client, people: Any, path: str, form: dict[str, str]
) -> None:
    # JobAdmin: "State changes go through services (cancel); the admin only reads jobs."
    response = site_admin.post(path, form)

    assert response.status_code == 403
    assert not Job.objects.exists() and not JobArray.objects.exists()


def test_the_admin_does_not_remove_a_member_whose_jobs_have_not_ended(
    site_admin: Client, people: Any, teams: Any
) -> None:
    # tenancy.services.remove_member refuses (409): the member's jobs would stay charged to
    # the team while the member could no longer see or cancel them.
    vision = teams["vision"]
    job = submit_job(people["alice"], spec(name="still-waiting")).job

    site_admin.post(
        f"/admin/tenancy/team/{vision.pk}/change/",
        team_form(vision, alice={"DELETE": "on"}),
    )

    assert Membership.objects.filter(team=vision, user=people["alice"]).exists()
    assert Job.objects.for_user(people["alice"]).filter(pk=job.pk).exists()


def test_the_admin_does_not_leave_a_team_without_an_admin(
    site_admin: Client, people: Any, teams: Any
) -> None:
    # tenancy.services._keep_an_admin: "a team must keep at least one admin". Dana is
    # vision's only one.
    vision = teams["vision"]

    site_admin.post(
        f"/admin/tenancy/team/{vision.pk}/change/", team_form(vision, dana={"role": "member"})
    )

    assert Membership.objects.filter(team=vision, role=Membership.Role.ADMIN).exists()
