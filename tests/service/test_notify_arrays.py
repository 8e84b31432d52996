"""Email of an array whose tasks ask for `requeue` differently from the array: requeues are
told per task, so that difference alone does not make a task a lone job whose start and end
are told besides the array's. Alice submits on the local cluster (real processes)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from queue_service.jobs.models import Job, Notification
from queue_service.jobs.services import submit_job, transition, update_job
from tests.conftest import spec
from tests.service.test_job_flow import run_until

S = Job.State
pytestmark = pytest.mark.django_db(transaction=True)


def told(first: Job) -> list[tuple[int, str, str]]:
    stored = Notification.objects.filter(job__array=first.array).order_by("created_at", "id")
    return [
        (n.job.array_index, n.event, "task" if n.dedupe_key is None else "array") for n in stored
    ]


def requeue(task: Job) -> None:
    """As the sync records a node failure the task's retry policy turns into a new attempt."""
    with transaction.atomic():
        transition(
            task,
            S.PENDING,
            code="requeued_node_failure",
            message="node n1 failed; requeued (attempt 2)",
            external_id="",
            placement=[],
            started_at=None,
        )


@pytest.mark.parametrize(
    ("array_asks", "task_asks", "requeue_told"),
    [
        (["start"], ["start", "requeue"], [(0, "requeue", "task")]),  # added on one task
        (["start", "requeue"], ["start"], []),  # turned off on one task
    ],
    ids=["requeue-added", "requeue-removed"],
)
def test_a_task_whose_notify_differs_from_its_arrays_only_by_requeue_is_told_of_its_start_once(
    people: Any,
    local_cluster: Any,
    array_asks: list[str],
    task_asks: list[str],
    requeue_told: list[tuple[int, str, str]],
) -> None:
    """Both tasks run; the array's start is told once, and nothing else about starts: the
    task asked for the same start as the array. Its requeue is told as it asked."""
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    first = submit_job(
        people["alice"], spec(name="sweep", array="0-1", command=["sleep", "30"], notify=array_asks)
    ).job
    tasks = list(Job.objects.filter(array=first.array).order_by("array_index"))
    update_job(people["alice"], tasks[0], {"notify": task_asks})

    run_until(
        first,
        lambda _: (
            set(Job.objects.filter(array=first.array).values_list("state", flat=True))
            == {S.RUNNING}
        ),
    )

    assert [(kind, where) for _, kind, where in told(first)] == [("start", "array")]

    requeue(Job.objects.get(pk=tasks[0].pk))

    assert told(first)[1:] == requeue_told
