"""The cycle reads the active jobs and the pending ones in separate queries (READ COMMITTED on
PostgreSQL: each sees what was committed when it ran). A job requeued by another connection
between the two must not reach the scheduler both as holding its GPUs and as waiting for
some: it would count a GPU twice in one cycle."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from queue_service.jobs import snapshot
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job, transition
from scheduler import types as st
from tests.conftest import spec
from tests.service.between_reads import after_the_first_read

S = Job.State
pytestmark = pytest.mark.django_db(transaction=True)


def running(job: Job) -> Job:
    """As the cycle and the sync move it (no process runs: no sync follows here)."""
    snapshot.run_cycle()
    job.refresh_from_db()
    assert job.state == S.ADMITTED, job.reason
    for to in (S.DISPATCHING, S.QUEUED):
        transition(job, to, code=to)
    return transition(job, S.RUNNING, code="running", started_at=timezone.now())


def after_the_first_read_of_jobs_by_state(change: Any) -> Any:
    """Runs `change`, committed, right after the cycle's first query of jobs by their state
    (whichever of the two reads comes first)."""
    return after_the_first_read(lambda sql: '"jobs_job"."state"' in sql, change)


def test_a_job_requeued_between_the_cycles_two_reads_is_not_both_running_and_pending(
    people: Any, local_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = running(submit_job(people["alice"], spec(name="held", gpus_per_node=4)).job)
    seen: list[st.Snapshot] = []
    real_decide = snapshot.decide

    def deciding(snap: st.Snapshot, now: Any) -> st.Decisions:
        seen.append(snap)
        return real_decide(snap, now)

    def requeue() -> None:
        transition(
            Job.objects.get(pk=job.pk),
            S.PENDING,
            code="requeued_node_failure",
            message="node n1 failed; requeued (attempt 2)",
            external_id="",
            placement=[],
            started_at=None,
        )

    monkeypatch.setattr(snapshot, "decide", deciding)
    wrapper, fired = after_the_first_read_of_jobs_by_state(requeue)
    with connection.execute_wrapper(wrapper):
        snapshot.run_cycle()

    assert fired and Job.objects.get(pk=job.pk).state != S.RUNNING  # the requeue came between
    (snap,) = seen
    as_running = [r.request.id for r in snap.running if r.request.id == str(job.pk)]
    as_pending = [p.request.id for p in snap.pending if p.request.id == str(job.pk)]
    assert len(as_running) + len(as_pending) <= 1, (as_running, as_pending)
