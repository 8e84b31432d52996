"""A send cut short by the worker's time limit is tried again, not given up; a job after an
array that lost a task (deleted) is cancelled, not left waiting for ever."""

from __future__ import annotations

import contextlib
import signal
import socket
from datetime import timedelta
from typing import Any

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.utils import timezone

from queue_service.jobs.models import Job, Notification
from queue_service.jobs.notify import deliver, deliver_due
from queue_service.jobs.services import cancel_job, submit_job, transition
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import spec
from tests.service.conftest import Inbox

S = Job.State
N = Notification.State
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def inbox(mail_server: Inbox, settings: Any, people: dict[str, Any]) -> Inbox:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", mail_server.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.DEFAULT_FROM_EMAIL = "gpuq@example.org"
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    return mail_server


def _succeed(job: Job) -> Job:
    job.refresh_from_db()
    for to in (S.ADMITTED, S.DISPATCHING, S.QUEUED):
        transition(job, to, code=to)
    transition(job, S.RUNNING, code="running", started_at=timezone.now())
    return transition(job, S.SUCCEEDED, code="succeeded", exit_code=0)


def test_a_send_cut_short_by_the_workers_soft_time_limit_is_retried_not_given_up(
    inbox: Inbox, people: dict[str, Any], settings: Any
) -> None:
    # deliver() treated every exception other than OSError/SMTPException as "can never be sent"
    # and marked the row FAILED; Celery's SoftTimeLimitExceeded (raised inside the send when a
    # slow mail server outlasts send_notification's 50 s soft limit) is such an Exception, so a
    # transient slowness loses the email for good.
    job = submit_job(people["alice"], spec(name="slowmail", notify=["end"])).job
    cancel_job(people["alice"], job)
    row = Notification.objects.get()

    slow = socket.socket()  # a relay that takes the connection and is slow to answer
    slow.bind(("127.0.0.1", 0))
    slow.listen(4)
    settings.EMAIL_PORT = slow.getsockname()[1]

    def soft_limit(signum: int, frame: Any) -> None:  # as billiard's soft-timeout handler
        raise SoftTimeLimitExceeded()

    previous = signal.signal(signal.SIGALRM, soft_limit)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        # Letting the task's limit through is fine; giving the mail up is not.
        with contextlib.suppress(SoftTimeLimitExceeded):
            deliver(row.pk)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        slow.close()

    row.refresh_from_db()
    assert row.state != N.FAILED, row.error
    assert not job.events.filter(code="notify_failed").exists()
    settings.EMAIL_PORT = inbox.port  # the mail server answers again
    deliver_due(timezone.now() + timedelta(hours=1))
    assert inbox.subjects() == ["[gpuq] slowmail cancelled"]


def test_a_job_after_an_array_one_of_whose_tasks_was_deleted_is_cancelled_not_left_waiting(
    people: dict[str, Any],
) -> None:
    # after_status() treats a deleted job as "gone" and cancels its dependants, but
    # reports.array_states() only counts the tasks still stored against the array's size, so an
    # array missing a task (deleted in the admin) reads "1 of 2 tasks succeeded" forever and
    # the job after it waits for ever.
    first = submit_job(people["alice"], spec(name="sweep", array="0-1")).job
    merge = submit_job(people["alice"], spec(name="merge", after=[str(first.array_id)])).job
    task0, task1 = Job.objects.filter(array=first.array_id).order_by("array_index")
    _succeed(task0)
    Job.objects.filter(pk=task1.pk).delete()  # as the admin's delete does

    run_cycle()

    merge.refresh_from_db()
    assert merge.state == S.CANCELLED, merge.reason
    assert merge.reason["code"] == "after_never_met"
