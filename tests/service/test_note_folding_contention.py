"""Repeated retry and stop notes written at once by many workers (Celery retries, the sync's
re-sent stops, the embedded loop's threads) still fold into one event counting every one of
them, on real PostgreSQL with real threads. Before: each writer read the same last event,
one conditional update won, and every loser added an event of its own (8 threads x 25 notes
counted 200 but left 118 events)."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

import pytest
from django.db import connection

from queue_service.jobs.models import Job
from queue_service.jobs.services import note, submit_job
from tests.conftest import spec

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 8
NOTES_EACH = 25


def noted_at_once(job: Job, code: str, message: str) -> list[BaseException]:
    """THREADS threads, each with a database connection of its own, start together and each
    write the same note NOTES_EACH times; the errors they met."""
    start = threading.Barrier(THREADS, timeout=30)
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            start.wait()
            for _ in range(NOTES_EACH):
                note(job, code, message, {"cluster": "cannot reach the cluster (SSH)"})
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, name=f"note-{n}") for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not [t.name for t in threads if t.is_alive()], "a writer is stuck"
    return errors


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("dispatch_retry", "will retry: cannot reach the cluster (SSH)"),
        ("stop_retry", "the stop alice asked for failed, sent again: cannot reach the cluster"),
    ],
    ids=["submit-retried", "stop-retried"],
)
def test_the_same_note_written_by_many_workers_at_once_is_one_event_counting_them_all(
    people: Any, code: str, message: str
) -> None:
    job = submit_job(people["alice"], spec(name="contended")).job

    errors = noted_at_once(job, code, message)

    assert errors == []
    events = list(job.events.filter(code=code))
    counted = [e.details.get("repeats", 1) for e in events]
    assert (sum(counted), len(counted)) == (THREADS * NOTES_EACH, 1)
    assert datetime.fromisoformat(events[0].details["last_at"]) >= events[0].at
    assert events[0].details["cluster"] == "cannot reach the cluster (SSH)"
