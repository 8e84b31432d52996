"""Owner / teammate / outsider (and team admin) access for the UI routes the other tests leave
out, or test only in the browser lab: with the Django test client.

Alice owns the jobs, Bob is her teammate in vision, Dana administers vision, Charlie is an
outsider (admin of language). Another team's job or team is a 404 (docs/ui.md); a teammate
refused an owner's or admin's action gets a 403."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job, suspend_job
from queue_service.jobs.snapshot import run_cycle
from queue_service.tenancy.models import ApiToken, Membership, Quota
from queue_service.tenancy.services import create_token
from tests.conftest import spec

SECRET = "alices-secret-run"


def client_of(person: Any) -> Client:
    client = Client()
    client.force_login(person)
    return client


@pytest.fixture
def alice_job(people: dict[str, Any]) -> Job:
    return submit_job(people["alice"], spec(name=SECRET)).job


def state_of(job: Job) -> str:
    job.refresh_from_db()
    return str(job.state)


# --- a job's reads ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["", "live/", "log/?offset=0", "log/?stream=stderr", "log/download/", "cancel/"]
)
@pytest.mark.parametrize(("who", "status"), [("alice", 200), ("bob", 200), ("charlie", 404)])
def test_a_jobs_pages_and_fragments_are_the_teams_only(
    people: Any, alice_job: Job, path: str, who: str, status: int
) -> None:
    response = client_of(people[who]).get(f"/jobs/{alice_job.pk}/{path}")
    assert response.status_code == status
    if status == 404:
        assert SECRET not in response.content.decode()


@pytest.mark.parametrize(("who", "status"), [("alice", 200), ("bob", 200), ("charlie", 404)])
def test_a_copy_of_a_job_is_offered_to_its_team_only(
    people: Any, alice_job: Job, who: str, status: int
) -> None:
    for query in (f"from={alice_job.pk}", f"mode=yaml&from={alice_job.pk}"):
        response = client_of(people[who]).get(f"/submit/?{query}")
        assert response.status_code == status
        assert (SECRET in response.content.decode()) is (status == 200)


# --- a job's actions --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "status", "state"),
    [
        ("alice", 302, "cancelled"),
        ("dana", 302, "cancelled"),
        ("staff", 302, "cancelled"),
        ("bob", 403, "pending"),
        ("charlie", 404, "pending"),
    ],
)
def test_only_the_owner_or_an_admin_cancels_from_the_page(
    people: Any, alice_job: Job, who: str, status: int, state: str
) -> None:
    client = client_of(people[who])
    confirm = client.get(f"/jobs/{alice_job.pk}/cancel/")
    assert confirm.status_code == (404 if who == "charlie" else 200)
    response = client.post(f"/jobs/{alice_job.pk}/cancel/")
    assert response.status_code == status
    assert state_of(alice_job) == state
    if status == 403:
        assert (
            "only the job&#x27;s owner or a team admin can cancel it" in response.content.decode()
        )
    if status == 404:
        assert SECRET not in response.content.decode()


@pytest.mark.parametrize(
    ("who", "status", "states"),
    [
        ("alice", 302, ("suspended", "pending")),
        ("dana", 302, ("suspended", "pending")),
        ("bob", 403, ("pending", "pending")),
        ("charlie", 404, ("pending", "pending")),
    ],
)
def test_only_the_owner_or_an_admin_suspends_and_resumes_from_the_page(
    people: Any, alice_job: Job, who: str, status: int, states: tuple[str, str]
) -> None:
    client = client_of(people[who])
    seen = []
    for verb in ("suspend", "resume"):
        response = client.post(f"/jobs/{alice_job.pk}/{verb}/")
        assert response.status_code == status
        if status == 404:
            assert SECRET not in response.content.decode()
        seen.append(state_of(alice_job))
    assert tuple(seen) == states


def test_a_teammate_cannot_resume_a_job_the_owner_suspended(people: Any, alice_job: Job) -> None:
    suspend_job(people["alice"], alice_job)
    assert client_of(people["bob"]).post(f"/jobs/{alice_job.pk}/resume/").status_code == 403
    assert client_of(people["charlie"]).post(f"/jobs/{alice_job.pk}/resume/").status_code == 404
    assert state_of(alice_job) == "suspended"


def test_the_job_page_offers_a_teammate_no_suspend_or_update_form(
    people: Any, alice_job: Job
) -> None:
    page = client_of(people["bob"]).get(f"/jobs/{alice_job.pk}/").content.decode()
    assert f'action="/jobs/{alice_job.pk}/suspend/"' not in page
    assert f'action="/jobs/{alice_job.pk}/update/"' not in page
    owners = client_of(people["alice"]).get(f"/jobs/{alice_job.pk}/").content.decode()
    assert f'action="/jobs/{alice_job.pk}/suspend/"' in owners


# --- lists: dashboard, queue, clusters --------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/live/dashboard/",
        "/queue/",
        "/live/queue/",
        "/live/queue/?team=vision",
        "/live/queue/?state=all",
        "/live/queue/?state=all&team=vision",
    ],
)
@pytest.mark.parametrize(("who", "visible"), [("alice", True), ("bob", True), ("charlie", False)])
def test_lists_show_a_job_to_its_team_only(
    people: Any, alice_job: Job, path: str, who: str, visible: bool
) -> None:
    response = client_of(people[who]).get(path)
    assert response.status_code == 200
    page = response.content.decode()
    assert (SECRET in page) is visible
    assert (str(alice_job.pk) in page) is visible


@pytest.mark.parametrize("path", ["/", "/live/dashboard/", "/clusters/", "/live/clusters/"])
@pytest.mark.parametrize(("who", "visible"), [("alice", True), ("bob", True), ("charlie", False)])
def test_the_gpu_maps_link_a_running_job_for_its_team_only(
    people: Any, alice_job: Job, local_cluster: Any, path: str, who: str, visible: bool
) -> None:
    run_cycle()
    assert state_of(alice_job) == "admitted"
    page = client_of(people[who]).get(path).content.decode()
    assert (str(alice_job.pk) in page) is visible
    assert 'data-team="vision"' in page


# --- submit and preview -----------------------------------------------------------------------


@pytest.mark.parametrize(("who", "allowed"), [("alice", True), ("bob", True), ("charlie", False)])
def test_the_preview_and_the_form_refuse_to_run_after_another_teams_job(
    people: Any, alice_job: Job, who: str, allowed: bool
) -> None:
    client = client_of(people[who])
    form = {
        "kind": "training",
        "name": "follower",
        "command": "true",
        "nodes": "1",
        "gpus_per_node": "1",
        "priority": "normal",
        "after": str(alice_job.pk),
    }
    preview = client.post("/submit/preview/", form).content.decode()
    refused = f"no job {alice_job.pk} among those you can see"
    assert (refused in preview) is not allowed
    submitted = client.post("/submit/", form)
    assert submitted.status_code == (302 if allowed else 400)
    assert Job.objects.filter(name="follower").exists() is allowed


def test_an_outsider_cannot_submit_into_another_team_from_the_form(people: Any) -> None:
    response = client_of(people["charlie"]).post(
        "/submit/",
        {
            "kind": "training",
            "name": "intruder",
            "command": "true",
            "nodes": "1",
            "gpus_per_node": "1",
            "priority": "normal",
            "team": "vision",
        },
    )
    assert response.status_code == 400
    assert not Job.objects.filter(name="intruder").exists()


# --- teams ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "listed"),
    [("alice", ["vision"]), ("bob", ["vision"]), ("dana", ["vision"]), ("charlie", ["language"])],
)
def test_the_teams_page_lists_ones_own_teams(people: Any, who: str, listed: list[str]) -> None:
    page = client_of(people[who]).get("/teams/").content.decode()
    for slug in ("vision", "language"):
        assert (f"{slug}</span>" in page) is (slug in listed), slug


@pytest.mark.parametrize(
    ("who", "status"),
    [("dana", 200), ("staff", 200), ("alice", 403), ("bob", 403), ("charlie", 404)],
)
def test_the_team_admin_page_and_its_csv_are_for_its_admins(
    people: Any, who: str, status: int
) -> None:
    client = client_of(people[who])
    page = client.get("/teams/vision/")
    csv = client.get("/teams/vision/usage.csv")
    assert (page.status_code, csv.status_code) == (status, status)
    if status == 403:
        assert "Its admins: dana." in page.content.decode()
    if status == 404:
        assert "alice" not in page.content.decode() and "dana" not in page.content.decode()


TEAM_POSTS = [
    ("/teams/vision/members/", {"username": "charlie", "role": "member"}),
    ("/teams/vision/members/bob/remove/", {}),
    (
        "/teams/vision/quotas/",
        {"gpu_model": "SIM-A100", "nominal_gpus": "1", "borrowing_limit_gpus": "0"},
    ),
    ("/teams/vision/quotas/delete/", {"gpu_model": "SIM-A100"}),
]


def team_state() -> tuple[Any, ...]:
    members = sorted(
        Membership.objects.filter(team__slug="vision").values_list("user__username", "role")
    )
    quotas = sorted(
        Quota.objects.filter(team__slug="vision").values_list("gpu_model", "nominal_gpus")
    )
    return tuple(members), tuple(quotas)


@pytest.mark.parametrize(
    ("url", "data"), TEAM_POSTS, ids=["member-set", "member-remove", "quota-set", "quota-delete"]
)
@pytest.mark.parametrize(
    ("who", "status"), [("alice", 403), ("bob", 403), ("charlie", 404), ("dana", 302)]
)
def test_only_a_team_admin_changes_members_and_quotas_from_the_page(
    people: Any, url: str, data: dict[str, str], who: str, status: int
) -> None:
    before = team_state()
    response = client_of(people[who]).post(url, data)
    assert response.status_code == status
    assert (team_state() != before) is (status == 302)


def test_a_language_admin_changes_nothing_of_vision(people: Any) -> None:
    charlie = client_of(people["charlie"])
    before = team_state()
    for url, data in [
        *TEAM_POSTS,
        ("/teams/vision/members/", {"username": "charlie", "role": "admin"}),
    ]:
        assert charlie.post(url, data).status_code == 404
    assert team_state() == before


# --- tokens -----------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["bob", "dana", "charlie", "staff"])
def test_nobody_sees_or_revokes_anothers_token(people: Any, who: str) -> None:
    token, _ = create_token(people["alice"], "alices-laptop")
    client = client_of(people[who])
    assert "alices-laptop" not in client.get("/me/").content.decode()
    response = client.post(f"/me/tokens/{token.pk}/revoke/")
    assert response.status_code == 404
    assert ApiToken.objects.filter(pk=token.pk).exists()
    assert client_of(people["alice"]).post(f"/me/tokens/{token.pk}/revoke/").status_code == 302
    assert not ApiToken.objects.filter(pk=token.pk).exists()
