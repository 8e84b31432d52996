"""A running job the cluster held waiting (reason `cluster_holds`) and then preempted ends,
or is requeued, in the cluster's words for the preemption: the hold is no reason for the
end (gpuq's own preemption sentence is kept only for a preemption gpuq asked for)."""

from __future__ import annotations

from typing import Any

from queue_service.backends.base import JobStatus, RemoteState
from queue_service.jobs.dispatch import _apply_status
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.conftest import spec

S = Job.State
PREEMPTED_SAYS = "pod on-k8s-1 preempted: Preempted by the scheduler to make room"


def _running(people: Any, retries: dict[str, Any]) -> Job:
    job = submit_job(people["alice"], spec(retries=retries)).job
    Job.objects.filter(pk=job.pk).update(state=S.RUNNING, external_id="x", attempts=1, reason={})
    job.refresh_from_db()
    return job


def _held_then_preempted(job: Job) -> None:
    _apply_status(job, JobStatus("x", RemoteState.QUEUED, reason="1 of 2 pods running"))
    job.refresh_from_db()
    assert job.reason["code"] == "cluster_holds"
    _apply_status(
        job, JobStatus("x", RemoteState.PREEMPTED, reason=PREEMPTED_SAYS, native_state="x")
    )
    job.refresh_from_db()


def test_a_job_the_cluster_held_then_preempted_ends_in_the_clusters_preemption_words(
    people: Any,
) -> None:
    job = _running(people, retries={"on": [], "max": 0})
    _held_then_preempted(job)
    assert job.state == S.PREEMPTED
    assert job.reason["message"] == PREEMPTED_SAYS
    assert job.events.get(to_state=S.PREEMPTED).message == PREEMPTED_SAYS


def test_a_requeue_after_the_clusters_preemption_of_a_held_job_says_why_it_was_preempted(
    people: Any,
) -> None:
    job = _running(people, retries={"on": ["preemption"], "max": 1})
    _held_then_preempted(job)
    assert job.state == S.PENDING
    message = job.events.get(code="requeued_preemption").message
    assert message == f"{PREEMPTED_SAYS}; requeued (attempt 2)"
