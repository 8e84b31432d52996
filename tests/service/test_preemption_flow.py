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
    # The minimal victim set: two 1-GPU jobs on one node free the 2 GPUs vision needs, and
    # language keeps more than its nominal 4.
    assert Job.objects.filter(team__slug="language", state=S.RUNNING).count() == 6


def test_every_run_is_recorded_for_fair_share(half_and_half: None, people: Any) -> None:
    from queue_service.jobs.models import JobRun

    borrowers = [
        submit_job(people["charlie"], spec(name=f"lang-{i}", command=["sleep", "60"])).job
        for i in range(8)
    ]
    for job in borrowers:
        run_until(job, lambda j: j.state == S.RUNNING)
    mine = submit_job(people["alice"], spec(gpus_per_node=2, command=["sleep", "60"])).job
    run_until(mine, lambda j: j.state == S.RUNNING, timeout=40)
    ended = JobRun.objects.filter(team__slug="language", ended_by=S.PENDING)
    assert ended.count() == 2 and all(r.ended_at >= r.started_at for r in ended)
    assert JobRun.objects.filter(ended_at__isnull=True).count() == 7  # 6 language + vision
