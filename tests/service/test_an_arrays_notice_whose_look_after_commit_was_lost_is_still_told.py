"""An array's start and end are decided after a task's move commits (`notify.tell_array`, an
on_commit hook). A process that dies between the commit and the hook, or a hook that fails,
must not cost the array its email: the sweep run before each delivery (beat's
deliver_notifications, the embedded mail thread) stores what was not told, once, whoever
else tells it at the same time. Mail goes to a real SMTP server on loopback."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from queue_service.jobs import notify
from queue_service.jobs.models import Job, Notification
from queue_service.jobs.notify import deliver_due, tell_missed_arrays
from queue_service.jobs.services import submit_job, transition
from tests.conftest import spec
from tests.service.conftest import Inbox

S = Job.State


@pytest.fixture
def inbox(mail_server: Inbox, settings: Any, people: dict[str, Any]) -> Inbox:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", mail_server.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    return mail_server


def start(job: Job) -> Job:
    """As the cycle and the sync move it (no process runs: no sync follows here)."""
    job.refresh_from_db()
    for to in (S.ADMITTED, S.DISPATCHING, S.QUEUED):
        transition(job, to, code=to)
    return transition(job, S.RUNNING, code="running", started_at=timezone.now())


def array_notices() -> list[tuple[str, str]]:
    return sorted(
        Notification.objects.filter(dedupe_key__isnull=False).values_list("dedupe_key", "event")
    )


@pytest.mark.django_db
def test_an_arrays_start_and_end_whose_hooks_never_ran_are_stored_once_by_the_sweep(
    people: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    """The moves commit but their hooks are dropped, as a process that died right after
    each commit drops them; sweeping twice stores each notice once."""
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    first = submit_job(
        people["alice"], spec(name="sweep", array="0-1", notify=["start", "end"])
    ).job
    task0, task1 = Job.objects.filter(array=first.array_id).order_by("array_index")

    with django_capture_on_commit_callbacks(execute=False) as dropped:
        start(task0)
    assert dropped and array_notices() == []

    assert [tell_missed_arrays(), tell_missed_arrays()] == [1, 0]
    key = f"array:{first.array_id}"
    assert array_notices() == [(f"{key}:start", "start")]

    with django_capture_on_commit_callbacks(execute=False):
        transition(Job.objects.get(pk=task0.pk), S.SUCCEEDED, code="succeeded", exit_code=0)
        assert tell_missed_arrays() == 0  # task 1 has not ended: nothing to tell yet
        transition(task1, S.CANCELLED, code="cancelled", message="by a test")

    assert [tell_missed_arrays(), tell_missed_arrays()] == [1, 0]
    assert array_notices() == [(f"{key}:end", "end"), (f"{key}:start", "start")]
    end = Notification.objects.get(dedupe_key=f"{key}:end")
    assert end.subject == "[gpuq] array sweep[0-1] ended: 1 cancelled, 1 succeeded"


@pytest.mark.django_db(transaction=True)
def test_an_arrays_end_whose_hook_failed_is_emailed_by_the_next_delivery(
    inbox: Inbox, people: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = submit_job(people["alice"], spec(name="pair", array="0-1", notify=["end"])).job

    def failing(*args: Any) -> None:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(notify, "tell_array", failing)
    for task in Job.objects.filter(array=first.array_id):
        transition(task, S.CANCELLED, code="cancelled", message="by a test")
    monkeypatch.undo()
    assert array_notices() == []  # the hook's failure cost the move nothing, and told nothing

    deliver_due()
    deliver_due()

    assert inbox.subjects() == ["[gpuq] array pair[0-1] ended: 2 cancelled"]


@pytest.mark.django_db(transaction=True)
def test_the_sweep_and_the_hook_telling_an_arrays_end_at_once_store_it_once(
    people: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last task's hook and a sweep in another process both find the array ended and
    untold, and meet before storing: one notice."""
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    first = submit_job(people["alice"], spec(name="pair", array="0-1", notify=["end"])).job
    task0, task1 = Job.objects.filter(array=first.array_id).order_by("array_index")
    transition(task0, S.CANCELLED, code="cancelled", message="by a test")
    committed = threading.Event()
    both_there = threading.Barrier(2, timeout=10)
    real = notify.tell_array
    calls: list[str] = []

    def meeting(array_id: Any, job_id: Any, event: str) -> Any:
        calls.append(threading.current_thread().name)
        committed.set()  # the last move has committed: the sweep may look
        both_there.wait()
        return real(array_id, job_id, event)

    monkeypatch.setattr(notify, "tell_array", meeting)
    stored: list[int] = []
    errors: list[BaseException] = []

    def sweep() -> None:
        try:
            assert committed.wait(timeout=10)
            stored.append(tell_missed_arrays())
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()  # this thread's own connection

    sweeper = threading.Thread(target=sweep, name="sweep")
    sweeper.start()
    transition(task1, S.CANCELLED, code="cancelled", message="by a test")  # the hook meets it
    sweeper.join(timeout=30)

    assert errors == [] and sorted(calls) == ["MainThread", "sweep"]
    assert array_notices() == [(f"array:{first.array_id}:end", "end")]
