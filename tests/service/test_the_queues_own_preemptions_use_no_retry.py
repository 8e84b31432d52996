"""A preemption gpuq's own cycle decided (a team reclaiming its nominal quota, a priority
preemption) sends the job back to the queue whenever its `retries.on` lists `preemption`,
and uses none of `retries.max`, as Kueue requeues an evicted workload and Slurm's
PreemptMode=REQUEUE a preempted job: retries bound failures, not the queue's own choices.
A preemption its cluster made on its own (Slurm's, a Kubernetes eviction) still uses one,
and a node failure after any number of the cycle's preemptions still has every retry.

The cycle is the real one (run_cycle on PostgreSQL); what the cluster answers is reported
through _apply_status, as a sync's poll does. The tests' transactions never commit, so no
stop or dispatch is sent to the cluster: each step says what the cluster did."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from queue_service.backends.base import JobStatus, RemoteState
from queue_service.jobs.dispatch import _apply_status, dispatch_request
from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, submit_job, transition
from queue_service.jobs.snapshot import run_cycle
from queue_service.tenancy.models import Quota
from tests.conftest import spec

pytestmark = pytest.mark.django_db
S = Job.State
BOTH = ["node_failure", "preemption"]


def _reported(job: Job, status: JobStatus) -> Job:
    _apply_status(job, status)
    job.refresh_from_db()
    return job


def _handed_over(job: Job) -> Job:
    """The cycle admits the waiting job; the dispatcher records it queued on its cluster."""
    run_cycle()
    job.refresh_from_db()
    assert job.state == S.ADMITTED, (job.state, job.reason)
    transition(job, S.DISPATCHING, code="dispatching", attempts=job.attempts + 1)
    return transition(job, S.QUEUED, code="dispatched", external_id=f"run-{job.attempts}")


def _running(job: Job) -> Job:
    job = _handed_over(job)
    return _reported(job, JobStatus(job.external_id, RemoteState.RUNNING))


def _reclaimed_from(job: Job, people: Any, *, ran: bool) -> Job:
    """Vision, below its nominal 4 GPUs, takes them back from the job's borrowed ones: the
    cycle preempts it; the stop's end is reported, and the reclaiming job is then cancelled,
    so that the job runs again on the next step."""
    mine = submit_job(people["alice"], spec(name="reclaim", gpus_per_node=4)).job
    run_cycle()
    job.refresh_from_db()
    assert job.state == S.PREEMPTING and job.reason["code"] == "preempting", job.reason
    assert job.reason["message"].startswith(f"preempted by job {mine.pk}: "), job.reason
    job = _reported(
        job,
        JobStatus(job.external_id, RemoteState.CANCELLED, native_state="CANCELLED", started=ran),
    )
    cancel_job(people["alice"], mine)
    return job


def reclaimed(job: Job, people: Any) -> Job:
    return _reclaimed_from(_running(job), people, ran=True)


def reclaimed_while_queued(job: Job, people: Any) -> Job:
    # Still waiting on its cluster: it never ran.
    return _reclaimed_from(_handed_over(job), people, ran=False)


def cluster_preempts(job: Job, people: Any) -> Job:
    job = _running(job)
    said = JobStatus(job.external_id, RemoteState.PREEMPTED, reason="preempted by Slurm")
    return _reported(job, said)


def node_fails(job: Job, people: Any) -> Job:
    job = _running(job)
    return _reported(job, JobStatus(job.external_id, RemoteState.NODE_FAILURE, reason="NODE_FAIL"))


def succeeds(job: Job, people: Any) -> Job:
    job = _running(job)
    return _reported(job, JobStatus(job.external_id, RemoteState.SUCCEEDED, exit_code=0))


Step = Callable[[Job, Any], Job]


@pytest.mark.parametrize(
    ("retries", "steps", "after"),
    [
        pytest.param(
            {"max": 3, "on": BOTH},
            [reclaimed] * 5 + [succeeds],
            [(S.PENDING, 3)] * 5 + [(S.SUCCEEDED, 3)],
            id="reclaimed_5_times_with_3_retries_then_succeeds",
        ),
        pytest.param(
            {"max": 3, "on": BOTH},
            [reclaimed_while_queued] * 4 + [succeeds],
            [(S.PENDING, 3)] * 4 + [(S.SUCCEEDED, 3)],
            id="reclaimed_while_queued_on_its_cluster_before_it_ran",
        ),
        pytest.param(
            {"max": 0, "on": ["preemption"]},
            [reclaimed] * 2 + [succeeds],
            [(S.PENDING, 0)] * 2 + [(S.SUCCEEDED, 0)],
            id="requeued_by_its_on_list_alone",
        ),
        pytest.param(
            {"max": 2, "on": BOTH},
            [reclaimed, cluster_preempts, reclaimed, cluster_preempts, cluster_preempts],
            [(S.PENDING, 2), (S.PENDING, 1), (S.PENDING, 1), (S.PENDING, 0), (S.PREEMPTED, 0)],
            id="the_clusters_own_preemption_uses_a_retry",
        ),
        pytest.param(
            {"max": 3, "on": BOTH},
            [reclaimed] * 4 + [node_fails] * 4,
            [(S.PENDING, 3)] * 4 + [(S.PENDING, 2), (S.PENDING, 1), (S.PENDING, 0), (S.FAILED, 0)],
            id="node_failures_after_4_reclaims_keep_their_3_retries",
        ),
        pytest.param(
            {"max": 3, "on": ["node_failure"]},
            [reclaimed],
            [(S.PREEMPTED, 3)],
            id="preemption_not_in_on_ends_it_preempted",
        ),
    ],
)
def test_the_queues_own_preemptions_requeue_the_job_and_use_no_retry(
    people: Any,
    local_cluster: Any,
    settings: Any,
    retries: dict[str, Any],
    steps: list[Step],
    after: list[tuple[str, int]],
) -> None:
    # Retries, not protection, are under test: a job reclaimed once would otherwise run only
    # within its team's nominal and never borrow (and be reclaimed) again.
    settings.GPUQ_PROTECT_AFTER_PREEMPTIONS = None
    # Each team is guaranteed 4 of the 8 GPUs and may borrow 4: language runs a job no one
    # preempts on 4 of them, and the job under test on 4 more, which vision takes back.
    Quota.objects.filter(gpu_model="SIM-A100").update(nominal_gpus=4, borrowing_limit_gpus=4)
    _running(submit_job(people["charlie"], spec(name="own", gpus_per_node=4, priority="high")).job)
    job = submit_job(people["charlie"], spec(name="borrower", gpus_per_node=4, retries=retries)).job

    seen: list[tuple[str, int]] = []
    for step in steps:
        job = step(job, people)
        # What is left of retries.max is also what a cluster that retries in place (Volcano's
        # maxRetry) is handed on the next dispatch.
        seen.append((job.state, dispatch_request(job).retries_max))
        if job.state in Job.TERMINAL:
            break

    assert seen == after, list(job.events.values_list("code", "message"))
    # Each of the cycle's preemptions is told on its requeue, with the job that preempted it.
    own = [
        step in (reclaimed, reclaimed_while_queued) and state == S.PENDING
        for step, (state, _) in zip(steps, after, strict=True)
    ]
    marked = job.events.filter(code="requeued_preemption", details__own_preemption=True)
    assert marked.count() == sum(own)
    assert all(
        d["kind"] == "reclaim" and d["by_job"] for d in marked.values_list("details", flat=True)
    )
