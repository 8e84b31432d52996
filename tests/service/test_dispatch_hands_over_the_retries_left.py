"""A backend that retries in place (Volcano's `maxRetry`) is handed the retries the job has
left, not its spec's whole count again on every attempt: `retries.max` bounds the runs of the
job, whoever retries it (docs/kubernetes.md)."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.dispatch import dispatch_request
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job, transition
from tests.conftest import spec

pytestmark = pytest.mark.django_db
S = Job.State


@pytest.mark.parametrize(("requeues", "left"), [(0, 3), (1, 2), (3, 0), (5, 0)])
def test_a_requeued_job_is_dispatched_with_the_retries_it_has_left(
    people: Any, local_cluster: Any, requeues: int, left: int
) -> None:
    body = spec(retries={"max": 3, "on": ["node_failure", "preemption"]})
    job = submit_job(people["alice"], body).job
    for _ in range(requeues):
        Job.objects.filter(pk=job.pk).update(state=S.RUNNING, cluster=local_cluster)
        job.refresh_from_db()
        transition(job, S.PENDING, code="requeued_node_failure", message="node failure")
    # A suspend and resume adds an attempt, but uses no retry.
    Job.objects.filter(pk=job.pk).update(attempts=requeues + 2, cluster=local_cluster)
    job.refresh_from_db()

    assert dispatch_request(job).retries_max == left
