"""The cycle's apply step: what it stores of the scheduler's decisions. An admission records
what the scheduler counted against quota; a victim the cycle cannot stop yet is left for the
next cycle; the quota report charges a job where the scheduler does."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job, transition
from queue_service.jobs.snapshot import build_snapshot, run_cycle
from queue_service.tenancy.models import Quota
from scheduler.engine import running_gpus
from scheduler.quota import Ledger
from tests.conftest import spec

S = Job.State


def scheduler_used(team: str, gpu_model: str) -> float:
    """What the scheduler counts as used on a team's quota, from the snapshot it is given."""
    snap, _, _ = build_snapshot(timezone.now())
    ledger = Ledger(snap.teams, [(j, running_gpus(j), True) for j in snap.running], [], True)
    return ledger.accounts[(team, gpu_model)].used


def reported_used(client_for: Any, gpu_model: str) -> float:
    response = client_for("dana").get("/api/v1/teams/vision/usage/")
    assert response.status_code == 200, response.content
    (row,) = [q for q in response.json()["quotas"] if q["gpu_model"] == gpu_model]
    return float(row["used_gpus"])


def test_a_victim_being_handed_to_its_cluster_waits_for_the_next_cycle(
    people: Any, local_cluster: Any
) -> None:
    """It has no external id until its submit returns, so it cannot be stopped yet; the cycle
    used to try (dispatching -> preempting is no allowed move) and roll back whole."""
    low = submit_job(people["alice"], spec(name="low", nodes=2, gpus_per_node=4, priority="low"))
    run_cycle()
    low.job.refresh_from_db()
    transition(low.job, S.DISPATCHING, code="dispatching", attempts=1)  # as dispatch_job does
    high = submit_job(people["bob"], spec(name="high", gpus_per_node=4, priority="high")).job

    summary = run_cycle()

    low.job.refresh_from_db()
    high.refresh_from_db()
    assert (low.job.state, high.state, summary["preempted"]) == (S.DISPATCHING, S.PENDING, 0)
    transition(low.job, S.QUEUED, code="dispatched")  # the submit returned
    run_cycle()
    low.job.refresh_from_db()
    assert low.job.state == S.PREEMPTING
    assert str(high.pk) in low.job.events.get(code="preempting_priority").message


def test_an_admitted_slice_counts_as_the_share_of_its_gpu_the_scheduler_counted(
    client_for: Any, people: Any, teams: Any, tmp_path: Any
) -> None:
    """A slice submitted without a model is stored as 1/7 of a GPU; on an A30 it is 1/4.
    The scheduler fills vision's 1-GPU A30 quota with four 1g.6gb slices and refuses a
    fifth, and the report (and the runs that fair share reads) say the same."""
    cluster = Cluster.objects.create(
        name="a30",
        kind="local",
        settings={
            "workdir": str(tmp_path / "jobs"),
            "nodes": [
                {
                    "name": "m1",
                    "gpus": 1,
                    "gpu_model": "A30-24GB",
                    "mig": True,
                    "mig_layout": [
                        {"gpu": 0, "profile": "1g.6gb", "start": i, "size": 1} for i in range(4)
                    ],
                }
            ],
        },
    )
    sync_cluster(cluster.pk)
    Quota.objects.create(
        team=teams["vision"], gpu_model="A30-24GB", nominal_gpus=1, borrowing_limit_gpus=0
    )
    jobs = []
    for i in range(5):
        body = spec(name=f"slice{i}", kind="agent", mig_profile="1g.6gb")
        del body["gpus_per_node"]
        jobs.append(submit_job(people["alice"], body).job)
    assert jobs[0].gpus == pytest.approx(1 / 7)

    run_cycle()

    for job in jobs:
        job.refresh_from_db()
    admitted = [j for j in jobs if j.state == S.ADMITTED]
    assert len(admitted) == 4
    assert [j.gpus for j in admitted] == [pytest.approx(1 / 4)] * 4
    (refused,) = [j for j in jobs if j.state == S.PENDING]
    assert refused.reason["code"] == "quota_exhausted"
    assert scheduler_used("vision", "A30-24GB") == pytest.approx(1.0)
    assert reported_used(client_for, "A30-24GB") == pytest.approx(1.0)


def test_the_quota_report_charges_a_job_to_one_quota_as_the_scheduler_does(
    client_for: Any, people: Any, teams: Any, local_cluster: Any
) -> None:
    """To its model's own quota if the team has one, else to "*" (Ledger.key): not both."""
    Quota.objects.create(
        team=teams["vision"], gpu_model="*", nominal_gpus=2, borrowing_limit_gpus=0
    )
    job = submit_job(people["alice"], spec(gpus_per_node=4)).job
    run_cycle()
    job.refresh_from_db()
    assert (job.state, job.gpu_model) == (S.ADMITTED, "SIM-A100")

    assert (scheduler_used("vision", "SIM-A100"), scheduler_used("vision", "*")) == (4, 0)
    assert (reported_used(client_for, "SIM-A100"), reported_used(client_for, "*")) == (4, 0)
