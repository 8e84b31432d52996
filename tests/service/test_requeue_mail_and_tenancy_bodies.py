"""Notifications and team admin, as a user reads the README: a requeue asked for is emailed
whatever state the cluster requeued the job from (and only a requeue is), and member and
quota bodies refuse a field they do not take or a member or model other than their path's
(the rule for every body: a typo never changes something silently). Alice and Bob are
members of vision, Dana administers it."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from queue_service.jobs.models import Job, Notification
from queue_service.jobs.services import submit_job, transition
from queue_service.tenancy.models import Membership, Quota
from tests.conftest import spec

S = Job.State


@pytest.fixture
def alice_has_an_address(people: dict[str, Any]) -> None:
    people["alice"].email = "alice@example.org"
    people["alice"].save()


def test_a_job_requeued_while_the_cluster_held_it_queued_is_emailed_its_requeue(
    people: dict[str, Any], alice_has_an_address: None
) -> None:
    job = submit_job(
        people["alice"],
        spec(name="queued", notify=["requeue"], retries={"max": 2, "on": ["node_failure"]}),
    ).job
    Job.objects.filter(pk=job.pk).update(state=S.QUEUED, attempts=1, external_id="x-1")
    job.refresh_from_db()

    # As dispatch._end_or_requeue records a node failure of a job the cluster held queued
    # (never started there): a requeue, using one of its retries.
    with transaction.atomic():
        transition(
            job,
            S.PENDING,
            code="requeued_node_failure",
            message="node n1 failed; requeued (attempt 2)",
            external_id="",
            placement=[],
            started_at=None,
        )

    assert list(Notification.objects.values_list("event", flat=True)) == ["requeue"]


def test_changing_a_members_role_refuses_an_unknown_field_and_changes_nothing(
    client_for: Any, people: dict[str, Any]
) -> None:
    response = client_for("dana").patch(
        "/api/v1/teams/vision/members/bob/", {"role": "admin", "team": "language"}, format="json"
    )

    assert response.status_code == 400, response.content
    assert "team" in response.json()
    assert Membership.objects.get(user=people["bob"], team__slug="vision").role == "member"


def test_a_quota_put_whose_body_names_another_gpu_model_is_refused_and_changes_nothing(
    client_for: Any, people: dict[str, Any]
) -> None:
    response = client_for("dana").put(
        "/api/v1/teams/vision/quotas/SIM-A100/",
        {"gpu_model": "SIM-H100", "nominal_gpus": 2, "borrowing_limit_gpus": 2},
        format="json",
    )

    assert response.status_code == 400, response.content
    assert "gpu_model" in response.json()
    assert Quota.objects.get(team__slug="vision", gpu_model="SIM-A100").nominal_gpus == 8


@pytest.mark.parametrize("code", ["resumed", "placement_gone", "preempted_before_start"])
def test_a_job_back_to_pending_without_a_requeue_is_not_emailed_one(
    people: dict[str, Any], alice_has_an_address: None, code: str
) -> None:
    job = submit_job(people["alice"], spec(name="waits", notify=["requeue"])).job
    was = S.SUSPENDED if code == "resumed" else S.ADMITTED
    Job.objects.filter(pk=job.pk).update(state=was)
    job.refresh_from_db()

    with transaction.atomic():
        transition(job, S.PENDING, code=code, message="back to waiting")

    assert not Notification.objects.exists()


def test_a_body_may_repeat_the_member_or_gpu_model_its_path_names(
    client_for: Any, people: dict[str, Any]
) -> None:
    dana = client_for("dana")

    member = dana.patch(
        "/api/v1/teams/vision/members/bob/", {"username": "bob", "role": "admin"}, format="json"
    )
    quota = dana.put(
        "/api/v1/teams/vision/quotas/SIM-A100/",
        {"gpu_model": "SIM-A100", "nominal_gpus": 4, "borrowing_limit_gpus": 2},
        format="json",
    )

    assert (member.status_code, quota.status_code) == (200, 200), (member.content, quota.content)
    assert Membership.objects.get(user=people["bob"], team__slug="vision").role == "admin"
    assert Quota.objects.get(team__slug="vision", gpu_model="SIM-A100").nominal_gpus == 4
