"""A victim the cycle preempts while it is still `admitted` (not yet handed to its cluster)
goes straight back to `pending` (snapshot.apply_decisions, `preempted_before_start`), saying
so: not the reason it was admitted with ("dispatching to the cluster"), which the job's page,
`gpuq ls` and the API would show of a pending job until a later cycle rewrote it."""

from __future__ import annotations

from typing import Any

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import spec

S = Job.State


def test_a_job_preempted_before_it_started_does_not_say_it_is_being_dispatched(
    people: Any, local_cluster: Any
) -> None:
    low = submit_job(
        people["alice"], spec(name="low", nodes=2, gpus_per_node=4, priority="low")
    ).job
    run_cycle()
    low.refresh_from_db()
    assert low.state == S.ADMITTED
    submit_job(people["bob"], spec(name="high", gpus_per_node=4, priority="high"))

    run_cycle()

    low.refresh_from_db()
    assert low.state == S.PENDING
    assert low.events.filter(code="preempted_before_start").exists()
    assert low.reason.get("code") != "admitted", low.reason
    assert "dispatching" not in low.reason.get("message", ""), low.reason
