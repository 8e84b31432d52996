"""Tenant scoping, endpoint by endpoint: Alice owns the job, Bob is her teammate, Charlie is
an outsider (admin of another team), Dana administers Alice's team."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import ApiToken, Membership, Quota
from tests.conftest import spec


@pytest.fixture
def alice_job(people: dict[str, Any]) -> Job:
    return submit_job(people["alice"], spec(name="alice-train")).job


READS = [
    "/api/v1/jobs/{job}/",
    "/api/v1/jobs/{job}/events/",
    "/api/v1/jobs/{job}/logs/",
    "/api/v1/teams/vision/",
    "/api/v1/teams/vision/members/",
    "/api/v1/teams/vision/quotas/",
]


@pytest.mark.parametrize("url", READS)
@pytest.mark.parametrize(("who", "status"), [("alice", 200), ("bob", 200), ("charlie", 404)])
def test_reads_are_scoped_to_the_team(
    client_for: Any, alice_job: Job, url: str, who: str, status: int
) -> None:
    response = client_for(who).get(url.format(job=alice_job.pk))
    assert response.status_code == status, response.content


@pytest.mark.parametrize(("who", "visible"), [("alice", True), ("bob", True), ("charlie", False)])
def test_job_list_and_queue_show_only_the_teams_jobs(
    client_for: Any, alice_job: Job, who: str, visible: bool
) -> None:
    client = client_for(who)
    listed = [j["id"] for j in client.get("/api/v1/jobs/").json()["results"]]
    queued = [j["id"] for j in client.get("/api/v1/queue/").json()]
    assert (str(alice_job.pk) in listed) is visible
    assert (str(alice_job.pk) in queued) is visible


def test_staff_see_every_teams_jobs(client_for: Any, alice_job: Job) -> None:
    assert client_for("staff").get(f"/api/v1/jobs/{alice_job.pk}/").status_code == 200


@pytest.mark.parametrize(
    ("who", "status", "state"),
    [
        ("alice", 200, "cancelled"),
        ("dana", 200, "cancelled"),
        ("bob", 403, "pending"),
        ("charlie", 404, "pending"),
    ],
)
def test_only_the_owner_or_a_team_admin_cancels(
    client_for: Any, alice_job: Job, who: str, status: int, state: str
) -> None:
    response = client_for(who).post(f"/api/v1/jobs/{alice_job.pk}/cancel/")
    assert response.status_code == status, response.content
    alice_job.refresh_from_db()
    assert alice_job.state == state


@pytest.mark.parametrize(
    ("who", "status", "states"),
    [
        ("alice", 200, ("suspended", "pending")),
        ("dana", 200, ("suspended", "pending")),
        ("bob", 403, ("pending", "pending")),
        ("charlie", 404, ("pending", "pending")),
    ],
)
def test_only_the_owner_or_a_team_admin_suspends_and_resumes(
    client_for: Any, alice_job: Job, who: str, status: int, states: tuple[str, str]
) -> None:
    client = client_for(who)
    seen = []
    for verb in ("suspend", "resume"):
        response = client.post(f"/api/v1/jobs/{alice_job.pk}/{verb}/")
        assert response.status_code == status, response.content
        alice_job.refresh_from_db()
        seen.append(alice_job.state)
    assert tuple(seen) == states


def test_resuming_a_job_that_is_not_suspended_is_a_409(client_for: Any, alice_job: Job) -> None:
    response = client_for("alice").post(f"/api/v1/jobs/{alice_job.pk}/resume/")
    assert response.status_code == 409
    assert response.json() == {"detail": "only a suspended job can be resumed; this one is pending"}


def test_cancelling_a_finished_job_is_a_409(client_for: Any, alice_job: Job) -> None:
    client = client_for("alice")
    assert client.post(f"/api/v1/jobs/{alice_job.pk}/cancel/").status_code == 200
    assert client.post(f"/api/v1/jobs/{alice_job.pk}/cancel/").status_code == 409


@pytest.mark.parametrize(
    ("who", "status"), [("alice", 403), ("bob", 403), ("dana", 200), ("charlie", 404)]
)
def test_only_a_team_admin_changes_quotas(client_for: Any, who: str, status: int) -> None:
    response = client_for(who).put(
        "/api/v1/teams/vision/quotas/SIM-A100/",
        {"nominal_gpus": 12, "borrowing_limit_gpus": 4},
        format="json",
    )
    assert response.status_code == status, response.content
    nominal = Quota.objects.get(team__slug="vision", gpu_model="SIM-A100").nominal_gpus
    assert nominal == (12 if status == 200 else 8)


def test_a_team_admin_cannot_touch_another_team(client_for: Any) -> None:
    charlie = client_for("charlie")  # admin of language
    assert (
        charlie.put(
            "/api/v1/teams/vision/quotas/SIM-A100/", {"nominal_gpus": 0}, format="json"
        ).status_code
        == 404
    )
    assert (
        charlie.post(
            "/api/v1/teams/vision/members/", {"username": "charlie", "role": "admin"}, format="json"
        ).status_code
        == 404
    )
    assert charlie.delete("/api/v1/teams/vision/members/alice/").status_code == 404
    assert not Membership.objects.filter(team__slug="vision", user__username="charlie").exists()


def test_a_team_admin_stays_within_the_sites_ceiling(client_for: Any) -> None:
    response = client_for("dana").put(
        "/api/v1/teams/vision/quotas/SIM-H100/", {"nominal_gpus": 30}, format="json"
    )
    assert response.status_code == 400
    assert "nominal_gpus" in response.json()


@pytest.mark.parametrize(
    ("borrowing", "message"),
    [
        ({}, "a team admin must give a limit: at most"),
        ({"borrowing_limit_gpus": None}, "a team admin must give a limit: at most"),
        ({"borrowing_limit_gpus": 500}, "at most"),
    ],
)
def test_a_team_admin_cannot_borrow_without_the_sites_limit(
    client_for: Any, borrowing: dict[str, Any], message: str
) -> None:
    response = client_for("dana").put(
        "/api/v1/teams/vision/quotas/SIM-A100/", {"nominal_gpus": 8, **borrowing}, format="json"
    )
    assert response.status_code == 400
    (text,) = response.json()["borrowing_limit_gpus"]
    assert text.startswith(message)
    assert text.endswith("GPUs for this team (set by the site)")


def test_a_team_admins_borrowing_limits_add_up_to_the_sites_ceiling_for_the_team(
    client_for: Any, teams: Any
) -> None:
    """The site lets vision borrow up to 10 GPUs; its SIM-A100 quota may borrow 8. A second
    quota may borrow 2 more, not another 10 (each quota was checked alone: N quotas could
    borrow N times the ceiling). Past a lowered ceiling, lowering a limit is still taken."""
    vision = teams["vision"]
    vision.max_borrowing_gpus = 10
    vision.save()
    dana = client_for("dana")

    def put(model: str, borrowing: float) -> Any:
        body = {"nominal_gpus": 0, "borrowing_limit_gpus": borrowing}
        return dana.put(f"/api/v1/teams/vision/quotas/{model}/", body, format="json")

    refused = put("SIM-H100", 8)
    assert refused.status_code == 400
    (text,) = refused.json()["borrowing_limit_gpus"]
    assert text.startswith("at most 2 GPUs (8 taken by its other quotas)"), text
    assert put("SIM-H100", 2).status_code == 200
    assert put("*", 1).status_code == 400
    vision.max_borrowing_gpus = 6  # the site lowers it: the team is 4 over
    vision.save()
    assert put("SIM-H100", 1).status_code == 200
    assert put("SIM-H100", 2).status_code == 400
    limits = dict(
        Quota.objects.filter(team=vision).values_list("gpu_model", "borrowing_limit_gpus")
    )
    assert limits == {"SIM-A100": 8, "SIM-H100": 1}


def test_a_quota_put_replaces_the_quota_and_a_limit_left_out_is_no_limit(
    client_for: Any, teams: Any
) -> None:
    """As the quota form draws an unlimited quota (an empty box): staff may leave a limit
    out; the old quota's limits are not kept, nor the model's default of 0."""
    url = "/api/v1/teams/vision/quotas/SIM-A100/"
    admin = client_for("staff")
    first = {"nominal_gpus": 8, "borrowing_limit_gpus": 4, "lending_limit_gpus": 2}
    assert admin.put(url, first, format="json").status_code == 200

    response = admin.put(url, {"nominal_gpus": 6}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["borrowing_limit_gpus"], body["lending_limit_gpus"]) == (None, None)
    new = admin.put("/api/v1/teams/vision/quotas/SIM-H100/", {"nominal_gpus": 2}, format="json")
    assert new.json()["borrowing_limit_gpus"] is None


@pytest.mark.django_db(transaction=True)
def test_two_admins_demoting_each_other_at_once_leave_the_team_an_admin(
    people: Any, teams: Any
) -> None:
    from concurrent.futures import ThreadPoolExecutor, wait

    from django.db import connection, transaction

    from queue_service.tenancy.services import set_membership

    vision = teams["vision"]
    Membership.objects.filter(user=people["bob"], team=vision).update(role="admin")

    def bob_demotes_dana() -> str:
        try:
            set_membership(people["bob"], vision, "dana", "member")
            return "done"
        except Exception as exc:
            return type(exc).__name__
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        with transaction.atomic():  # dana demotes bob; not committed yet
            set_membership(people["dana"], vision, "bob", "member")
            bobs = pool.submit(bob_demotes_dana)
            waited_for_dana = not wait([bobs], timeout=1).done
        outcome = bobs.result(timeout=30)

    assert waited_for_dana
    assert outcome == "PermissionDenied"  # bob is no longer an admin once he may act
    admins = Membership.objects.filter(team=vision, role="admin")
    assert list(admins.values_list("user__username", flat=True)) == ["dana"]


def test_a_team_admin_manages_members_but_keeps_an_admin(client_for: Any) -> None:
    dana = client_for("dana")
    assert (
        dana.post(
            "/api/v1/teams/vision/members/",
            {"username": "charlie", "role": "member"},
            format="json",
        ).status_code
        == 200
    )
    assert (
        dana.patch(
            "/api/v1/teams/vision/members/bob/", {"role": "admin"}, format="json"
        ).status_code
        == 200
    )
    assert dana.delete("/api/v1/teams/vision/members/charlie/").status_code == 204
    # Dana and Bob are admins now; demoting both would leave the team without one.
    assert (
        dana.patch(
            "/api/v1/teams/vision/members/bob/", {"role": "member"}, format="json"
        ).status_code
        == 200
    )
    response = dana.patch("/api/v1/teams/vision/members/dana/", {"role": "member"}, format="json")
    assert response.status_code == 400
    assert Membership.objects.get(team__slug="vision", user__username="dana").role == "admin"


def test_members_cannot_change_membership(client_for: Any) -> None:
    response = client_for("bob").post(
        "/api/v1/teams/vision/members/", {"username": "bob", "role": "admin"}, format="json"
    )
    assert response.status_code == 403
    assert Membership.objects.get(team__slug="vision", user__username="bob").role == "member"


@pytest.mark.parametrize("who", ["alice", "bob", "charlie"])
def test_clusters_and_priority_classes_are_readable_by_everyone(
    client_for: Any, local_cluster: Any, who: str
) -> None:
    client = client_for(who)
    assert client.get("/api/v1/clusters/").status_code == 200
    assert client.get("/api/v1/clusters/local/").json()["nodes"][0]["gpus"] == 4
    names = [p["name"] for p in client.get("/api/v1/priority-classes/").json()]
    assert names == ["high", "normal", "low"]


def test_cluster_settings_are_never_returned(client_for: Any, local_cluster: Any) -> None:
    body = client_for("alice").get("/api/v1/clusters/local/").json()
    assert "settings" not in body


def test_tokens_are_shown_once_and_only_to_their_owner(client_for: Any, people: Any) -> None:
    alice = client_for("alice")
    created = alice.post("/api/v1/tokens/", {"name": "laptop"}, format="json")
    assert created.status_code == 201
    key = created.json()["key"]
    assert ApiToken.objects.get(pk=created.json()["id"]).key_hash != key
    assert all("key" not in t for t in alice.get("/api/v1/tokens/").json())
    assert client_for("bob").delete(f"/api/v1/tokens/{created.json()['id']}/").status_code == 404
    assert alice.delete(f"/api/v1/tokens/{created.json()['id']}/").status_code == 204
    from rest_framework.test import APIClient

    revoked = APIClient()
    revoked.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert revoked.get("/api/v1/jobs/").status_code == 401


@pytest.mark.parametrize(
    "url", ["/api/v1/jobs/", "/api/v1/queue/", "/api/v1/teams/", "/api/v1/clusters/"]
)
def test_anonymous_requests_are_refused(db: Any, url: str) -> None:
    from rest_framework.test import APIClient

    assert APIClient().get(url).status_code == 401


def test_unknown_job_id_is_a_404_not_a_500(client_for: Any) -> None:
    client = client_for("alice")
    assert client.get("/api/v1/jobs/00000000-0000-0000-0000-000000000000/").status_code == 404
    assert client.get("/api/v1/jobs/not-a-uuid/").status_code == 404
