"""Job.preemptions: how many times the queue (the cycle) preempted the job, kept on its row by
the transition to `preempting` itself, so that the cycle reads it with the job instead of
counting events. It equals the job's events to `preempting`, whatever path the job took: a
cluster's own preemption and a victim stopped before it was handed over (which never goes
`preempting`) leave it as it was."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job, transition
from queue_service.tenancy.models import Quota
from tests.conftest import spec
from tests.service.test_the_queues_own_preemptions_use_no_retry import (
    Step,
    _running,
    cluster_preempts,
    node_fails,
    reclaimed,
    reclaimed_while_queued,
)

pytestmark = pytest.mark.django_db
S = Job.State


@pytest.mark.parametrize(
    ("steps", "preemptions"),
    [
        pytest.param([reclaimed, reclaimed], 2, id="reclaimed_twice"),
        pytest.param([reclaimed_while_queued, reclaimed], 2, id="queued_then_running"),
        pytest.param([cluster_preempts, reclaimed], 1, id="the_clusters_own_is_not_counted"),
        pytest.param([node_fails, cluster_preempts], 0, id="never_by_the_queue"),
    ],
)
def test_the_job_counts_the_queues_preemptions_of_it_as_its_events_do(
    people: Any, local_cluster: Any, settings: Any, steps: list[Step], preemptions: int
) -> None:
    # A job reclaimed once would otherwise be protected, and never borrow (be reclaimed) again.
    settings.GPUQ_PROTECT_AFTER_PREEMPTIONS = None
    Quota.objects.filter(gpu_model="SIM-A100").update(nominal_gpus=4, borrowing_limit_gpus=4)
    _running(submit_job(people["charlie"], spec(name="own", gpus_per_node=4, priority="high")).job)
    job = submit_job(people["charlie"], spec(name="borrower", gpus_per_node=4)).job

    for step in steps:
        job = step(job, people)
        assert job.state == S.PENDING, list(job.events.values_list("code", "message"))

    job.refresh_from_db()
    assert job.preemptions == preemptions
    assert job.events.filter(to_state=S.PREEMPTING).count() == preemptions


def test_the_transition_to_preempting_counts_once_in_the_job_it_returns(
    people: Any, local_cluster: Any
) -> None:
    job = _running(submit_job(people["alice"], spec(name="victim")).job)

    returned = transition(job, S.PREEMPTING, code="preempting_reclaim")

    # A plain number, not the UPDATE's expression: a later save() must not count it again.
    assert returned.preemptions == 1
    returned.save()
    job.refresh_from_db()
    assert job.preemptions == 1
