"""A stop task delivered twice (a broker's redelivery, two workers) is safe: the end the first
delivery's stop causes stays the stop's, however the second delivery interleaves with it. On
the real Slurm lab (deploy/slurm-lab/lab up) and PostgreSQL, each delivery on a thread of its
own, as two workers would run them.

Slurm's stop is slow to return: TERM, then a look every second until the job has ended. A
second delivery that arrives in that second finds the job already ended on the cluster, before
the first has recorded that its stop got there."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from queue_service.backends.base import RemoteState
from queue_service.clusters.models import Cluster
from queue_service.jobs import tasks
from queue_service.jobs.dispatch import backend_for, run_once, sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import held_reason, submit_job, transition
from queue_service.tenancy.models import Quota
from tests.backends.slurm.conftest import CLUSTER_JSON
from tests.conftest import lab_missing

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
S = Job.State


@pytest.fixture
def slurm(teams: Any) -> Iterator[Cluster]:
    if not CLUSTER_JSON.exists():
        lab_missing("the Slurm lab (deploy/slurm-lab/lab up)")
    cluster = Cluster.objects.create(
        name="lab", kind="slurm", settings=json.loads(CLUSTER_JSON.read_text())
    )
    sync_cluster(cluster.pk)
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=16)
    yield cluster


def running_job(people: Any) -> Job:
    job = submit_job(
        people["alice"],
        {
            "name": "stopped-twice",
            "command": ["sleep", "600"],
            "gpus_per_node": 1,
            "cluster": "lab",
            "gpu_model": "A100-SXM4-80GB",
        },
    ).job
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        run_once()
        job.refresh_from_db()
        if job.state == S.RUNNING:
            return job
        time.sleep(0.5)
    raise AssertionError((job.state, job.reason))


def delivery(job_id: str, errors: list[BaseException]) -> threading.Thread:
    """One delivery of the stop task (gpuq.cancel_job), on a worker thread of its own."""

    def run() -> None:
        try:
            tasks.cancel_job(job_id)
        except BaseException as exc:  # shown by the test
            errors.append(exc)
        finally:
            connection.close()

    return threading.Thread(target=run, name=f"stop-{job_id}")


@pytest.mark.parametrize("deliveries", [1, 2], ids=["once", "twice"])
def test_a_stop_delivered_again_while_the_first_waits_for_the_end_keeps_a_suspend_a_suspend(
    slurm: Cluster, people: Any, deliveries: int
) -> None:
    job = running_job(people)
    # As suspend_job leaves it, its stop task queued: each delivery below runs that task.
    transition(
        job,
        S.SUSPENDING,
        code="suspend_requested",
        message="suspend requested by alice",
        reason=held_reason(people["alice"]),
    )
    errors: list[BaseException] = []
    first, second = delivery(str(job.pk), errors), delivery(str(job.pk), errors)
    backend = backend_for(slurm)

    first.start()
    deadline = time.monotonic() + 30  # the first delivery's TERM ends `sleep` at once
    while backend.poll([job.external_id])[job.external_id].state not in RemoteState.TERMINAL:
        assert time.monotonic() < deadline, "the first stop did not end the job"
        time.sleep(0.05)
    if deliveries == 2:
        second.start()  # the same task again, while the first still waits to see the end
        second.join(60)
    first.join(60)
    assert not errors, errors
    for _ in range(3):
        run_once()

    job.refresh_from_db()
    codes = list(job.events.values_list("code", flat=True))
    said = list(job.events.values_list("code", "message"))
    assert job.state == S.SUSPENDED, "\n".join(map(str, [job.state, job.reason, *said]))
    assert "ended_before_stop" not in codes
