"""The cycle's snapshot: a victim's grace runs from its first stop whatever else is written
to it (Job.stopping_since), and one cluster's malformed MIG settings do not stop every
cycle."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, submit_job, transition, update_job
from queue_service.jobs.snapshot import build_snapshot, run_cycle
from tests.conftest import spec

S = Job.State


def _victim_and_a_job_waiting_for_its_gpus(people: Any) -> tuple[Job, Job]:
    """alice's low-priority job on all 8 GPUs of the local cluster, queued there, preempted
    for bob's high-priority one; then bob's next job, which waits for the victim's GPUs
    (vision's nominal 8 are in use until the victim leaves)."""
    low = submit_job(
        people["alice"], spec(name="low", nodes=2, gpus_per_node=4, priority="low")
    ).job
    run_cycle()
    low.refresh_from_db()
    assert low.state == S.ADMITTED
    transition(low, S.DISPATCHING, code="dispatching", attempts=1)
    transition(low, S.QUEUED, code="dispatched", external_id="local-1")
    submit_job(people["bob"], spec(name="high", gpus_per_node=4, priority="high"))
    run_cycle()
    low.refresh_from_db()
    assert low.state == S.PREEMPTING, low.reason
    waiting = submit_job(people["bob"], spec(name="next", gpus_per_node=4)).job
    return low, waiting


def _asked_to_stop(job: Job, ago: timedelta) -> Any:
    """Say the cycle asked `job` to stop `ago` (its transition's time and event's)."""
    at = timezone.now() - ago
    Job.objects.filter(pk=job.pk).update(updated_at=at, stopping_since=at)
    job.events.filter(to_state=S.PREEMPTING).update(at=at)
    return at


@pytest.mark.parametrize("change", ["notify edited", "cancelled by its owner"])
def test_a_victims_grace_runs_from_its_stop_whatever_else_is_written_to_it(
    people: Any, local_cluster: Any, settings: Any, change: str
) -> None:
    # The snapshot took a stopping job's `updated_at` as the start of its grace
    # (preempting_since), but a `notify` edit (update_job) and a cancel of a job already being
    # preempted (no second stop is sent) bump it: the grace seemed to start again, and the
    # jobs waiting for the victim's GPUs were told they start later than they will.
    settings.GPUQ_PREEMPTION_GRACE_S = 600
    low, waiting = _victim_and_a_job_waiting_for_its_gpus(people)
    stop_at = _asked_to_stop(low, timedelta(seconds=300))
    grace_ends = stop_at + timedelta(seconds=600)
    run_cycle()
    waiting.refresh_from_db()
    assert waiting.state == S.PENDING and waiting.estimated_start is not None
    assert abs((waiting.estimated_start - grace_ends).total_seconds()) < 2

    if change == "notify edited":
        people["alice"].email = "alice@example.org"
        people["alice"].save()
        update_job(people["alice"], Job.objects.get(pk=low.pk), {"notify": ["end"]})
    else:
        cancel_job(people["alice"], Job.objects.get(pk=low.pk))

    (victim,) = build_snapshot(timezone.now())[0].running
    run_cycle()
    waiting.refresh_from_db()
    assert waiting.estimated_start is not None
    assert abs((waiting.estimated_start - grace_ends).total_seconds()) < 2, (
        f"planned to start at {waiting.estimated_start}, though the victim's grace ends at"
        f" {grace_ends}"
    )
    assert victim.preempting_since == pytest.approx(stop_at.timestamp(), abs=1)


def test_a_cluster_whose_mig_profiles_setting_is_not_a_mapping_does_not_stop_every_cycle(
    people: Any, local_cluster: Any
) -> None:
    # _mig_tables promises that a malformed `mig_profiles` table is logged and left out, but
    # it calls `.items()` on the setting outside its try: a list there (a slip in one
    # cluster's settings, which nothing validates) fails every cycle, for every cluster.
    local_cluster.settings["mig_profiles"] = [{"A30-24GB": {"compute_slices": 4}}]
    local_cluster.save()
    job = submit_job(people["alice"], spec(name="any")).job

    run_cycle()

    job.refresh_from_db()
    assert job.state == S.ADMITTED, job.reason
