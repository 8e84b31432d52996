"""A cluster that stays down does not flood a job's timeline: each failed submit retried is
counted on one event (`repeats`, `last_at`), the backoff still grows with every one of them,
and the job page says how many. Against our fake Kubernetes API server with injected faults
(docs/kubernetes.md)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from queue_service.jobs.dispatch import RETRY, retries_due_now, run_once
from queue_service.jobs.models import Job
from queue_service.jobs.services import note, submit_job
from tests.conftest import spec
from tests.service.test_disabled_cluster_dispatch import (  # noqa: F401 (the fixture)
    cluster_down,
    k8s,
    retry_due,
)
from tests.service.test_dispatch_races import failed_ago

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_cluster_down_for_many_retries_leaves_one_event_that_counts_them(
    k8s: Any,  # noqa: F811
    people: Any,
    client: Any,
) -> None:
    with k8s as (cluster, sim):
        job = submit_job(people["alice"], spec(name="patient", cluster=cluster.name)).job
        cluster_down(sim)
        run_once()
        for _ in range(5):
            retry_due(job)
            run_once()

        (retried,) = job.events.filter(code=RETRY)
        assert retried.details["repeats"] == 6
        assert "503" in retried.message
        client.force_login(people["alice"])
        page = client.get(f"/jobs/{job.pk}/").content.decode()
        assert "(\u00d76, the last at " in page


def test_the_backoff_grows_with_each_retry_counted_on_one_event(
    k8s: Any,  # noqa: F811
    people: Any,
) -> None:
    """RETRY_BACKOFF_S: the 4th failed submit waits 30 s before the next, not the 1st's 0 s,
    counted from that failure, not from the job's last write: an owner (or a tool) editing
    the job's notifications every minute must not keep its dispatch from being retried."""
    with k8s as (cluster, sim):
        job = submit_job(people["alice"], spec(name="backoff", cluster=cluster.name)).job
        cluster_down(sim)
        run_once()
        for _ in range(3):
            retry_due(job)
            run_once()
        assert job.events.get(code=RETRY).details["repeats"] == 4
        failed_ago(job, timedelta(seconds=20))
        assert retries_due_now(timezone.now()) == []
        failed_ago(job, timedelta(seconds=31))
        Job.objects.filter(pk=job.pk).update(updated_at=timezone.now())  # an edit just now
        assert retries_due_now(timezone.now()) == [str(job.pk)]


def test_a_different_note_between_two_retries_starts_a_new_event(
    k8s: Any,  # noqa: F811
    people: Any,
) -> None:
    with k8s as (cluster, _):
        job = submit_job(people["alice"], spec(name="interleaved", cluster=cluster.name)).job
        note(job, RETRY, "will retry: HTTP 503")
        note(job, RETRY, "will retry: HTTP 503")
        note(job, "stop_sent", "stop sent")
        note(job, RETRY, "will retry: HTTP 503")
        note(job, RETRY, "will retry: HTTP 502")

        rows = list(job.events.filter(code=RETRY).order_by("at", "id"))
        assert [(e.message, e.details.get("repeats")) for e in rows] == [
            ("will retry: HTTP 503", 2),
            ("will retry: HTTP 503", None),
            ("will retry: HTTP 502", None),
        ]
