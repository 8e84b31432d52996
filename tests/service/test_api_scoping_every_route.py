"""Owner / teammate / outsider (and team admin) access for the API routes the other tests
leave out.

Alice owns the jobs, Bob is her teammate in vision, Dana administers vision, Charlie is an
outsider (admin of language). Another team's objects are a 404, never a 403."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from queue_service.tenancy.models import Membership, Quota
from queue_service.tenancy.services import create_token
from tests.conftest import spec


@pytest.fixture
def alice_job(people: dict[str, Any]) -> Job:
    return submit_job(people["alice"], spec(name="alice-train")).job


def ids(response: Any) -> list[str]:
    body = response.json()
    rows = body["results"] if isinstance(body, dict) else body
    return [row["id"] for row in rows]


# --- jobs: list filters ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    ["team=vision", "user=alice", "name=alice", "state=pending", "array={array}"],
)
@pytest.mark.parametrize(("who", "visible"), [("alice", True), ("bob", True), ("charlie", False)])
def test_job_list_filters_never_widen_the_team_scope(
    client_for: Any, people: Any, query: str, who: str, visible: bool
) -> None:
    first = submit_job(people["alice"], spec(name="alice-sweep", array="0-1")).job
    response = client_for(who).get(f"/api/v1/jobs/?{query.format(array=first.array_id)}")
    assert response.status_code == 200, response.content
    assert (str(first.pk) in ids(response)) is visible


@pytest.mark.parametrize(("who", "visible"), [("alice", True), ("bob", True), ("charlie", False)])
def test_the_queue_filtered_by_the_owners_team_stays_scoped(
    client_for: Any, alice_job: Job, who: str, visible: bool
) -> None:
    response = client_for(who).get("/api/v1/queue/?team=vision")
    assert response.status_code == 200
    assert (str(alice_job.pk) in ids(response)) is visible
    assert response["X-Total-Count"] == ("1" if visible else "0")


# --- jobs: submit and preview into another team, or after another team's job -----------------


def test_an_outsider_cannot_submit_into_another_team(client_for: Any, people: Any) -> None:
    response = client_for("charlie").post(
        "/api/v1/jobs/", spec(name="intruder", team="vision"), format="json"
    )
    assert response.status_code == 400, response.content
    # Worded as for a team that does not exist: no telling which teams exist.
    unknown = client_for("charlie").post(
        "/api/v1/jobs/", spec(name="intruder", team="no-such-team"), format="json"
    )
    assert response.json()["team"] == [
        m.replace("no-such-team", "vision") for m in unknown.json()["team"]
    ]
    assert not Job.objects.filter(name="intruder").exists()


@pytest.mark.parametrize("url", ["/api/v1/jobs/", "/api/v1/jobs/preview/"])
@pytest.mark.parametrize(("who", "status"), [("alice", None), ("bob", None), ("charlie", 400)])
def test_after_another_teams_job_is_refused_as_an_unknown_job(
    client_for: Any, alice_job: Job, url: str, who: str, status: int | None
) -> None:
    response = client_for(who).post(
        url, spec(name="follower", after=[str(alice_job.pk)]), format="json"
    )
    if status is None:
        assert response.status_code in (200, 201), response.content
        return
    assert response.status_code == status, response.content
    assert response.json() == {"after": [f"no job {alice_job.pk} among those you can see"]}


def test_an_outsider_cannot_preview_into_another_team(client_for: Any, people: Any) -> None:
    response = client_for("charlie").post(
        "/api/v1/jobs/preview/", spec(team="vision"), format="json"
    )
    assert response.status_code == 400, response.content
    assert "team" in response.json()


# --- jobs: detail actions not yet checked per person -----------------------------------------


@pytest.mark.parametrize(
    ("who", "status"),
    [("alice", 200), ("dana", 200), ("staff", 200), ("bob", 403), ("charlie", 404)],
)
def test_only_the_owner_or_an_admin_changes_an_arrays_limit(
    client_for: Any, people: Any, who: str, status: int
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-3%2")).job
    response = client_for(who).patch(
        f"/api/v1/jobs/{first.pk}/", {"array": {"max_running": 4}}, format="json"
    )
    assert response.status_code == status, response.content
    first.array.refresh_from_db()
    assert first.array.max_running == (4 if status == 200 else 2)
    if status == 404:
        assert "sweep" not in response.content.decode()


@pytest.mark.parametrize(("who", "status"), [("alice", 201), ("bob", 201), ("charlie", 404)])
def test_resubmitting_an_arrays_failed_tasks_is_for_the_team_only(
    client_for: Any, people: Any, who: str, status: int
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-3")).job
    response = client_for(who).post(
        f"/api/v1/jobs/{first.pk}/resubmit/", {"array": "1,3"}, format="json"
    )
    assert response.status_code == status, response.content
    copies = Job.objects.exclude(array_id=first.array_id)
    assert copies.count() == (2 if status == 201 else 0)


@pytest.mark.parametrize("verb", ["cancel", "suspend", "resume", "resubmit"])
def test_an_outsiders_action_on_another_teams_job_looks_like_an_unknown_job(
    client_for: Any, alice_job: Job, verb: str
) -> None:
    charlie = client_for("charlie")
    theirs = charlie.post(f"/api/v1/jobs/{alice_job.pk}/{verb}/")
    unknown = charlie.post(f"/api/v1/jobs/00000000-0000-4000-8000-000000000000/{verb}/")
    assert (theirs.status_code, theirs.json()) == (unknown.status_code, unknown.json())
    assert theirs.status_code == 404


# --- clusters: the GPU map names another team, not its job -----------------------------------


@pytest.mark.parametrize(("who", "sees_job"), [("alice", True), ("bob", True), ("charlie", False)])
def test_the_cluster_map_shows_another_teams_job_as_its_team_only(
    client_for: Any, alice_job: Job, local_cluster: Any, who: str, sees_job: bool
) -> None:
    run_cycle()
    alice_job.refresh_from_db()
    assert alice_job.state == Job.State.ADMITTED
    for url in ("/api/v1/clusters/", "/api/v1/clusters/local/"):
        body = client_for(who).get(url).json()
        cluster = body[0] if isinstance(body, list) else body
        held = [g for n in cluster["nodes"] for g in n["layout"] if g["team"]]
        assert [g["team"] for g in held] == ["vision"]
        assert held[0]["job"] == (str(alice_job.pk) if sees_job else None)
        assert (str(alice_job.pk) in str(body)) is sees_job


# --- teams ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "slugs"),
    [("alice", ["vision"]), ("bob", ["vision"]), ("charlie", ["language"]), ("dana", ["vision"])],
)
def test_the_team_list_holds_only_ones_own_teams(client_for: Any, who: str, slugs: list) -> None:
    response = client_for(who).get("/api/v1/teams/")
    assert response.status_code == 200
    assert sorted(t["slug"] for t in response.json()) == slugs


@pytest.mark.parametrize(
    ("who", "status"),
    [("alice", 403), ("bob", 403), ("dana", 200), ("charlie", 404), ("staff", 200)],
)
def test_only_a_team_admin_adds_a_quota(client_for: Any, who: str, status: int) -> None:
    response = client_for(who).post(
        "/api/v1/teams/vision/quotas/",
        {"gpu_model": "SIM-H100", "nominal_gpus": 2, "borrowing_limit_gpus": 0},
        format="json",
    )
    assert response.status_code == status, response.content
    added = Quota.objects.filter(team__slug="vision", gpu_model="SIM-H100").exists()
    assert added is (status == 200)


@pytest.mark.parametrize(
    ("who", "status"),
    [("alice", 403), ("bob", 403), ("dana", 204), ("charlie", 404), ("staff", 204)],
)
def test_only_a_team_admin_deletes_a_quota(client_for: Any, who: str, status: int) -> None:
    response = client_for(who).delete("/api/v1/teams/vision/quotas/SIM-A100/")
    assert response.status_code == status, response.content
    kept = Quota.objects.filter(team__slug="vision", gpu_model="SIM-A100").exists()
    assert kept is (status != 204)


@pytest.mark.parametrize(
    ("who", "status"),
    [("alice", 403), ("bob", 403), ("dana", 200), ("charlie", 404), ("staff", 200)],
)
def test_only_a_team_admin_changes_a_members_role(client_for: Any, who: str, status: int) -> None:
    response = client_for(who).patch(
        "/api/v1/teams/vision/members/alice/", {"role": "admin"}, format="json"
    )
    assert response.status_code == status, response.content
    role = Membership.objects.get(team__slug="vision", user__username="alice").role
    assert role == ("admin" if status == 200 else "member")


@pytest.mark.parametrize(
    ("who", "status"),
    [("alice", 403), ("bob", 403), ("dana", 204), ("charlie", 404), ("staff", 204)],
)
def test_only_a_team_admin_removes_a_member(client_for: Any, who: str, status: int) -> None:
    response = client_for(who).delete("/api/v1/teams/vision/members/bob/")
    assert response.status_code == status, response.content
    kept = Membership.objects.filter(team__slug="vision", user__username="bob").exists()
    assert kept is (status != 204)


@pytest.mark.parametrize("who", ["alice", "bob", "dana"])
def test_members_of_one_team_see_nothing_of_anothers(client_for: Any, who: str) -> None:
    client = client_for(who)
    for url in (
        "/api/v1/teams/language/",
        "/api/v1/teams/language/members/",
        "/api/v1/teams/language/quotas/",
        "/api/v1/teams/language/usage/",
    ):
        response = client.get(url)
        assert response.status_code == 404, (url, response.content)
        assert "charlie" not in response.content.decode()
    assert client.delete("/api/v1/teams/language/members/charlie/").status_code == 404
    assert (
        client.patch(
            "/api/v1/teams/language/members/charlie/", {"role": "member"}, format="json"
        ).status_code
        == 404
    )
    assert client.delete("/api/v1/teams/language/quotas/SIM-A100/").status_code == 404
    assert Quota.objects.filter(team__slug="language").exists()


# --- tokens ---------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["bob", "dana", "charlie"])
def test_nobody_lists_or_revokes_anothers_tokens(client_for: Any, people: Any, who: str) -> None:
    token, _ = create_token(people["alice"], "alices-laptop")
    client = client_for(who)
    listed = client.get("/api/v1/tokens/").json()
    assert "alices-laptop" not in str(listed)
    assert client.delete(f"/api/v1/tokens/{token.pk}/").status_code == 404
    assert type(token).objects.filter(pk=token.pk).exists()


@pytest.mark.parametrize(("who", "allowed"), [("alice", True), ("bob", True), ("charlie", False)])
def test_after_another_teams_array_is_refused_as_an_unknown_job(
    client_for: Any, people: Any, who: str, allowed: bool
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-1")).job
    response = client_for(who).post(
        "/api/v1/jobs/", spec(name="merge", after=[str(first.array_id)]), format="json"
    )
    assert response.status_code == (201 if allowed else 400), response.content
    if not allowed:
        assert response.json() == {"after": [f"no job {first.array_id} among those you can see"]}


@pytest.mark.parametrize(
    "verb", ["", "events/", "logs/", "cancel/", "suspend/", "resume/", "resubmit/"]
)
def test_an_owner_who_left_the_team_no_longer_reaches_her_job(
    client_for: Any, people: Any, alice_job: Job, verb: str
) -> None:
    """can_manage lets an owner act whatever her team; the scoped queryset comes first."""
    client = client_for("alice")
    Membership.objects.filter(user=people["alice"], team__slug="vision").delete()
    url = f"/api/v1/jobs/{alice_job.pk}/{verb}"
    response = (
        client.post(url)
        if verb.endswith(("cancel/", "suspend/", "resume/", "resubmit/"))
        else client.get(url)
    )
    assert response.status_code == 404, response.content
    assert (
        client.patch(
            f"/api/v1/jobs/{alice_job.pk}/", {"time_limit": "2h"}, format="json"
        ).status_code
        == 404
    )
    alice_job.refresh_from_db()
    assert alice_job.state == Job.State.PENDING
