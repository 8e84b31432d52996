"""Preemption end to end on real processes: a team below its nominal quota takes its GPUs back
from a team running on borrowed quota; the victims get SIGTERM, then go back to the queue."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import spec
from tests.service.test_job_flow import run_until

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


@pytest.fixture
def half_and_half(teams: Any, local_cluster: Any, settings: Any) -> None:
    """8 GPUs; each team is guaranteed 4 and may borrow 4."""
    settings.GPUQ_PREEMPTION_GRACE_S = 1
    Quota.objects.filter(gpu_model="SIM-A100").update(nominal_gpus=4, borrowing_limit_gpus=4)


def _reclaim(people: Any) -> Job:
    """language runs 8 1-GPU jobs (4 borrowed); vision's 2-GPU job reclaims two of them."""
    borrowers = [
        submit_job(people["charlie"], spec(name=f"lang-{i}", command=["sleep", "60"])).job
        for i in range(8)
    ]
    for job in borrowers:
        run_until(job, lambda j: j.state == S.RUNNING)
    mine = submit_job(people["alice"], spec(gpus_per_node=2, command=["sleep", "60"])).job
    return run_until(mine, lambda j: j.state == S.RUNNING, timeout=40)


def test_a_team_below_nominal_reclaims_borrowed_gpus(half_and_half: None, people: Any) -> None:
    borrowers = [
        submit_job(people["charlie"], spec(name=f"lang-{i}", command=["sleep", "60"])).job
        for i in range(8)
    ]
    for job in borrowers:
        run_until(job, lambda j: j.state == S.RUNNING)
    assert Job.objects.filter(team__slug="language", borrowed=True).count() == 4

    mine = submit_job(
        people["alice"], spec(name="vision-0", gpus_per_node=2, command=["sleep", "60"])
    ).job
    mine = run_until(mine, lambda j: j.state == S.RUNNING, timeout=40)

    requeued = Job.objects.filter(team__slug="language", events__code="requeued_preemption")
    assert requeued.distinct().count() == 2
    for victim in requeued.distinct():
        assert victim.state in (S.PENDING, S.ADMITTED)
        message = victim.events.get(code="preempting_reclaim").message
        assert "vision" in message and str(mine.pk) in message
        # The requeue says why the run ended, not how the backend saw it stop ("cancelled").
        assert victim.events.get(code="requeued_preemption").message == (
            f"{message}; requeued (attempt 2)"
        )
    # The minimal victim set: two 1-GPU jobs on one node free the 2 GPUs vision needs, and
    # language keeps more than its nominal 4.
    assert Job.objects.filter(team__slug="language", state=S.RUNNING).count() == 6


def test_every_run_is_recorded_for_fair_share(half_and_half: None, people: Any) -> None:
    from queue_service.jobs.models import JobRun

    _reclaim(people)
    ended = JobRun.objects.filter(team__slug="language", ended_by=S.PENDING)
    assert ended.count() == 2 and all(r.ended_at >= r.started_at for r in ended)
    assert JobRun.objects.filter(ended_at__isnull=True).count() == 7  # 6 language + vision


def test_a_restarted_victim_brings_its_preemptions_to_the_scheduler(
    half_and_half: None, people: Any
) -> None:
    # Policy.max_priority_preemptions reads RunningJob.preemptions: the snapshot counts them.
    from django.utils import timezone

    from queue_service.jobs.services import cancel_job
    from queue_service.jobs.snapshot import build_snapshot

    mine = _reclaim(people)
    victims = list(Job.objects.filter(events__code="requeued_preemption").distinct())
    assert len(victims) == 2
    cancel_job(people["alice"], mine)
    for victim in victims:
        run_until(victim, lambda j: j.state == S.RUNNING, timeout=40)
    snap, _, _ = build_snapshot(timezone.now())
    counts = {r.request.id: r.preemptions for r in snap.running}
    assert {counts[str(v.pk)] for v in victims} == {1}
    assert sorted(counts.values()) == [0] * 6 + [1, 1]
