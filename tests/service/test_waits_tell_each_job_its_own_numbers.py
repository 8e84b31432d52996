"""What a waiting job is told: its reason's numbers, its position and its estimated start,
as the scheduler gives them and as a cycle stores them: each job's own, not its kind's
first job's, and not a whole grace period again at every cycle."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from queue_service.tenancy.models import Quota
from tests.conftest import spec
from tests.scheduler.builders import NOW, decide, job, nodes, running, snap, team, waits
from tests.service.test_job_flow import run_until

S = Job.State


@pytest.mark.django_db(transaction=True)
def test_a_preemptors_estimated_start_is_when_its_victims_grace_ends_not_a_grace_from_each_cycle(
    people: Any, local_cluster: Any, settings: Any
) -> None:
    # 2 nodes x 4 GPUs; each team is guaranteed 4 and may borrow 4. language runs two 4-GPU
    # jobs (one on borrowed quota); vision's 4-GPU job reclaims the borrowed one, which has
    # 30 s to checkpoint.
    settings.GPUQ_PREEMPTION_GRACE_S = 30
    Quota.objects.filter(gpu_model="SIM-A100").update(nominal_gpus=4, borrowing_limit_gpus=4)
    borrowers = [
        submit_job(
            people["charlie"], spec(name=f"lang-{i}", gpus_per_node=4, command=["sleep", "60"])
        ).job
        for i in range(2)
    ]
    for borrower in borrowers:
        run_until(borrower, lambda j: j.state == S.RUNNING)
    mine = submit_job(people["alice"], spec(name="mine", gpus_per_node=4)).job
    run_cycle()
    victim = Job.objects.get(team__slug="language", state=S.PREEMPTING)
    assert victim.stopping_since is not None
    leaves_by = victim.stopping_since + timedelta(seconds=30)

    # 20 s later the victim is still within its grace: it has 10 s left, not 30.
    run_cycle(now=victim.stopping_since + timedelta(seconds=20))

    mine.refresh_from_db()
    assert mine.state == S.PENDING and mine.reason["code"] == "preempting", mine.reason
    assert mine.estimated_start is not None
    assert mine.estimated_start <= leaves_by + timedelta(seconds=1), (
        f"estimated start {mine.estimated_start}, but its victim leaves by {leaves_by}"
    )
    assert "they have 10 s left to checkpoint" in mine.reason["message"], mine.reason


def test_a_job_told_it_would_delay_a_reservation_is_told_its_own_time_limit() -> None:
    # Two 8-GPU nodes; n1 half busy for an hour. A 2 x 8 gang of team b is reserved; team
    # a's 4-GPU jobs of one shape may use the free GPUs only if they end before it starts.
    busy = [running("r", {"n1": range(4)}, team="b", limit=3600, started=NOW - 600)]
    pending = [
        job("gang", team="b", gpus=8, nodes=2, submit=NOW - 300),
        job("short", team="a", gpus=4, submit=NOW - 200, limit=7200),
        job("long", team="a", gpus=4, submit=NOW - 100, limit=10_000),
        job("unlimited", team="a", gpus=4, submit=NOW - 50, limit=None),
    ]
    teams = [team("a", 100, borrow=None), team("b", 100, borrow=None)]
    told = waits(decide(snap(nodes(2, 8), teams, pending, busy)))

    assert dict(told["long"].reason.details)["reserved_for"] == "gang"
    unlimited = told["unlimited"].reason
    assert dict(unlimited.details).get("time_limit_s") is None, unlimited
    assert "no time limit" in unlimited.message, unlimited.message
