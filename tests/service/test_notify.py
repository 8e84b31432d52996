"""Emails about jobs (a spec's `notify`, as Slurm's --mail-type), sent over real SMTP to a
mail server on loopback (aiosmtpd), from real jobs on the local backend. Alice submits; her
address is alice@example.org."""

from __future__ import annotations

import socket
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from queue_service.jobs import notify
from queue_service.jobs.models import Job, Notification
from queue_service.jobs.notify import MAX_ATTEMPTS, deliver, deliver_due
from queue_service.jobs.services import cancel_job, submit_job, transition
from tests.conftest import on_sqlite, spec
from tests.service.conftest import Inbox, free_port
from tests.service.test_job_flow import run_until

S = Job.State
N = Notification.State
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def inbox(mail_server: Inbox, settings: Any, people: dict[str, Any]) -> Inbox:
    box = mail_server
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", box.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.DEFAULT_FROM_EMAIL = "gpuq@example.org"
    settings.GPUQ_PUBLIC_URL = "https://gpuq.example.org"
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    return box


def run(people: dict[str, Any], **overrides: Any) -> Job:
    job = submit_job(people["alice"], spec(**overrides)).job
    return run_until(job, lambda j: j.is_terminal)


def test_a_failed_job_emails_its_owner_once_with_why_and_where_to_look(
    inbox: Inbox, people: dict[str, Any], local_cluster: Any
) -> None:
    job = run(people, name="boom", command="exit 3", notify=["fail"])
    deliver_due()

    assert job.state == S.FAILED
    assert len(inbox.mail) == 1
    sender, to, message = inbox.mail[0]
    assert (sender, to) == ("gpuq@example.org", ["alice@example.org"])
    assert message["Subject"] == "[gpuq] boom failed (exit code 3)"
    body = message.get_content()
    assert body.startswith(f"Job boom ({job.pk}) failed (exit code 3).\nWhy: ")
    assert "Team: vision   Priority: normal   Cluster: local" in body
    assert f"Its page: https://gpuq.example.org/jobs/{job.pk}/" in body
    assert f"Its output: gpuq logs {job.pk}" in body
    assert "because the job's spec says notify: [fail]" in body
    row = Notification.objects.get()
    assert (row.event, row.state, row.attempts) == ("fail", N.SENT, 1)


def test_all_tells_of_the_start_and_the_end(
    inbox: Inbox, people: dict[str, Any], local_cluster: Any
) -> None:
    job = run(people, name="fine", command=["true"], notify="all")
    deliver_due()

    assert job.spec["notify"] == ["start", "end", "fail", "requeue"]
    subjects = inbox.subjects()
    assert len(subjects) == 2
    assert subjects[0].startswith("[gpuq] fine started on local: n")
    assert subjects[1] == "[gpuq] fine succeeded (exit code 0)"
    assert "(ran " in inbox.mail[1][2].get_content()


@pytest.mark.parametrize(
    ("notify_on", "command", "sent"),
    [
        (["fail"], ["true"], []),
        (["end"], ["true"], ["end"]),
        (["end"], "exit 1", ["end"]),
        (["end", "fail"], "exit 1", ["fail"]),  # one email, not two
        (["start"], "exit 1", ["start"]),
    ],
)
def test_only_what_was_asked_for_is_sent(
    inbox: Inbox,
    people: dict[str, Any],
    local_cluster: Any,
    notify_on: list[str],
    command: Any,
    sent: list[str],
) -> None:
    run(people, command=command, notify=notify_on)
    deliver_due()

    assert list(Notification.objects.values_list("event", flat=True)) == sent
    assert len(inbox.mail) == len(sent)


def test_a_job_without_notify_sends_nothing(
    inbox: Inbox, people: dict[str, Any], local_cluster: Any
) -> None:
    run(people, command="exit 1")
    deliver_due()

    assert not Notification.objects.exists()
    assert inbox.mail == []


def test_an_array_tells_its_start_once_and_its_end_once_with_the_counts(
    inbox: Inbox, people: dict[str, Any], local_cluster: Any
) -> None:
    first = submit_job(
        people["alice"],
        spec(name="sweep", array="0-3", command="exit $((GPUQ_ARRAY_TASK_ID == 2))", notify="all"),
    ).job
    for task in Job.objects.filter(array=first.array_id):
        run_until(task, lambda j: j.is_terminal)
    deliver_due()

    subjects = inbox.subjects()
    assert len(subjects) == 2, subjects
    assert subjects[0].startswith("[gpuq] array sweep[0-3] started: task ")
    assert subjects[1] == "[gpuq] array sweep[0-3] ended: 1 failed, 3 succeeded"
    assert Notification.objects.get(event="fail").job.array_id == first.array_id
    assert f"Its tasks: gpuq ls --array {first.array_id}" in inbox.mail[1][2].get_content()


def test_an_array_where_only_fail_was_asked_and_none_failed_sends_nothing(
    inbox: Inbox, people: dict[str, Any], local_cluster: Any
) -> None:
    first = submit_job(
        people["alice"], spec(name="sweep", array="0-1", command=["true"], notify=["fail"])
    ).job
    for task in Job.objects.filter(array=first.array_id):
        run_until(task, lambda j: j.is_terminal)
    deliver_due()

    assert inbox.mail == []


def test_cancelling_a_waiting_job_tells_of_its_end(inbox: Inbox, people: dict[str, Any]) -> None:
    job = submit_job(people["alice"], spec(name="never", notify=["end"])).job

    cancel_job(people["dana"], job)
    deliver_due()

    assert inbox.subjects() == ["[gpuq] never cancelled"]
    assert "Why: cancelled by dana" in inbox.mail[0][2].get_content()


def test_a_rolled_back_transition_sends_nothing(inbox: Inbox, people: dict[str, Any]) -> None:
    job = submit_job(people["alice"], spec(name="undone", notify=["end"])).job

    with pytest.raises(RuntimeError), transaction.atomic():
        transition(job, S.CANCELLED, code="cancelled", message="by a test")
        raise RuntimeError("the caller's transaction fails after the move")
    deliver_due()

    assert Job.objects.get(pk=job.pk).state == S.PENDING
    assert not Notification.objects.exists()
    assert inbox.mail == []


def test_delivering_twice_sends_once(inbox: Inbox, people: dict[str, Any]) -> None:
    job = submit_job(people["alice"], spec(name="once", notify=["end"])).job
    cancel_job(people["alice"], job)
    row = Notification.objects.get()

    assert [deliver(row.pk), deliver(row.pk), *deliver_due().keys()] == ["sent", "skipped"]
    assert len(inbox.mail) == 1


def test_a_send_whose_sender_died_is_sent_again_when_its_lease_runs_out(
    inbox: Inbox, people: dict[str, Any]
) -> None:
    job = submit_job(people["alice"], spec(name="lease", notify=["end"])).job
    cancel_job(people["alice"], job)
    now = timezone.now()
    # A sender claimed it and died before sending.
    Notification.objects.update(state=N.SENDING, attempts=1, next_attempt_at=now + notify.LEASE)

    early = deliver_due(now + notify.LEASE - timedelta(seconds=1))
    late = deliver_due(now + notify.LEASE)

    assert (early, late) == ({}, {"sent": 1})
    assert len(inbox.mail) == 1


def test_a_refusing_mail_server_is_retried_with_backoff_then_given_up_with_an_event(
    inbox: Inbox, people: dict[str, Any]
) -> None:
    inbox.refuse = True
    job = submit_job(people["alice"], spec(name="bounced", notify=["end"])).job
    cancel_job(people["alice"], job)
    row = Notification.objects.get()
    now = timezone.now()
    waits = []

    for _ in range(MAX_ATTEMPTS - 1):
        assert deliver(row.pk, now) == "retry"
        row.refresh_from_db()
        waits.append(round((row.next_attempt_at - now).total_seconds()))
        assert deliver(row.pk, now) == "skipped"  # not due yet
        now = row.next_attempt_at
    outcome = deliver(row.pk, now)

    assert waits == [30, 60, 120, 240, 480, 960, 1920] + [3600] * (MAX_ATTEMPTS - 8)
    assert sum(waits) / 3600 > 23  # about a day of trying, as mail servers do
    assert outcome == "failed"
    row.refresh_from_db()
    assert (row.state, row.attempts) == (N.FAILED, MAX_ATTEMPTS)
    assert row.error == "the mail server answered 550 mailbox unavailable"
    event = job.events.get(code="notify_failed")
    assert event.message.startswith(f"could not email alice@example.org after {MAX_ATTEMPTS}")
    assert deliver_due(now + timedelta(days=1)) == {}  # given up means given up


def test_an_unreachable_mail_server_is_retried(
    inbox: Inbox, people: dict[str, Any], settings: Any
) -> None:
    settings.EMAIL_PORT = free_port()  # nothing listens there
    job = submit_job(people["alice"], spec(name="nowhere", notify=["end"])).job
    cancel_job(people["alice"], job)

    assert deliver_due() == {"unreachable": 1}
    row = Notification.objects.get()
    assert (row.state, row.attempts) == (N.PENDING, 1)
    assert "ConnectionRefusedError" in row.error


def test_a_hostile_job_name_stays_in_the_subject(inbox: Inbox, people: dict[str, Any]) -> None:
    name = "x Bcc: mallory@example.org =?utf-8?q?=0D=0ABcc:_eve@example.org?= ünï"
    job = submit_job(people["alice"], spec(name=name, notify=["end"])).job
    cancel_job(people["alice"], job)
    deliver_due()

    ((_, to, message),) = inbox.mail
    assert to == ["alice@example.org"]
    assert message["Bcc"] is None
    # Folded over lines as it travels, it reads back whole (the fold leaves a leading space).
    assert str(message["Subject"]).strip() == f"[gpuq] {name} cancelled"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("sometimes", "unknown event 'sometimes'"),
        (["end", "begin"], "unknown event 'begin'"),
        ([1], "expected a list of events"),
        ({"on": "end"}, "expected a list of events"),
    ],
)
def test_a_bad_notify_names_the_field(client_for: Any, value: Any, says: str) -> None:
    response = client_for("alice").post("/api/v1/jobs/", spec(notify=value), format="json")

    assert response.status_code == 400, response.content
    assert says in response.json()["notify"][0]
    assert not Job.objects.exists()


def test_notify_needs_an_email_address(client_for: Any, people: dict[str, Any]) -> None:
    response = client_for("bob").post("/api/v1/jobs/", spec(notify=["end"]), format="json")

    assert response.status_code == 400, response.content
    assert "no email address" in response.json()["notify"][0]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ("end", ["end"]),
        (["requeue", "start", "start"], ["start", "requeue"]),
        ("all", ["start", "end", "fail", "requeue"]),
        ([], None),
    ],
)
def test_notify_is_stored_as_a_list_in_one_order(
    inbox: Inbox, people: dict[str, Any], value: Any, stored: list[str] | None
) -> None:
    job = submit_job(people["alice"], spec(notify=value)).job

    assert job.spec.get("notify") == stored


def test_the_embedded_default_prints_notifications_on_its_console(tmp_path: Path) -> None:
    printed = on_sqlite(
        tmp_path,
        textwrap.dedent(
            """
            import time
            from queue_service.jobs.dispatch import run_once
            alice.email = "alice@example.org"
            alice.save()
            job = submit_job(alice, {"name": "told", "command": ["true"], "notify": ["end"]}).job
            for _ in range(100):
                run_once()
                job.refresh_from_db()
                if job.is_terminal:
                    break
                time.sleep(0.1)
            run_once()
            """
        ),
    )
    text = "\n".join(printed)
    assert "Subject: [gpuq] told succeeded (exit code 0)" in text
    assert "To: alice@example.org" in text


def test_two_last_tasks_ending_at_once_tell_the_arrays_end_once(
    inbox: Inbox, people: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both moves have committed when each asks whether it was the last: both see every
    task ended, and the array's end must still be told once."""
    import threading

    from django.db import connection

    first = submit_job(people["alice"], spec(name="pair", array="0-1", notify=["end"])).job
    both_there = threading.Barrier(2, timeout=5)
    real = notify.tell_array

    def meeting(array_id: Any, job_id: Any, event: str) -> Any:
        both_there.wait()  # both moves committed: each sees the other's end
        return real(array_id, job_id, event)

    monkeypatch.setattr(notify, "tell_array", meeting)
    errors: list[BaseException] = []

    def end(task: Job) -> None:
        try:
            transition(task, S.CANCELLED, code="cancelled", message="by a test")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=end, args=(task,))
        for task in Job.objects.filter(array=first.array_id)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    deliver_due()

    assert errors == []
    assert inbox.subjects() == ["[gpuq] array pair[0-1] ended: 2 cancelled"]


def test_a_broker_that_is_down_costs_the_move_nothing_and_the_mail_goes_later(
    tmp_path: Path,
) -> None:
    # In a process of its own: Celery keeps the producers it made for the dead broker.
    printed = on_sqlite(
        tmp_path,
        textwrap.dedent(
            f"""
            from django.conf import settings
            from django.core import mail
            from queue_service.celery import app
            from queue_service.jobs.models import Notification
            from queue_service.jobs.notify import deliver_due
            from queue_service.jobs.services import cancel_job
            alice.email = "alice@example.org"
            alice.save()
            settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
            mail.outbox = []
            settings.CELERY_BROKER_URL = app.conf.broker_url = (
                "redis://127.0.0.1:{free_port()}/0"
            )
            job = submit_job(alice, {{"name": "unkicked", "command": ["x"], "notify": ["end"]}}).job
            cancel_job(alice, job)
            job.refresh_from_db()
            print("moved", job.state, Notification.objects.get().state)
            print("later", deliver_due(), [m.subject for m in mail.outbox])
            """
        ),
    )
    assert printed[-2:] == [
        "moved cancelled pending",
        "later {'sent': 1} ['[gpuq] unkicked cancelled']",
    ]


def _start(job: Job) -> Job:
    job.refresh_from_db()
    for to in (S.ADMITTED, S.DISPATCHING, S.QUEUED):
        transition(job, to, code=to)
    return transition(job, S.RUNNING, code="running", started_at=timezone.now())


def test_an_arrays_start_is_told_once_even_when_its_first_task_starts_again(
    inbox: Inbox, people: dict[str, Any]
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-1", notify=["start"])).job
    task0, task1 = Job.objects.filter(array=first.array_id).order_by("array_index")

    _start(task0)
    transition(task0, S.PENDING, code="requeued_node_failure", message="node failure")
    _start(task0)
    _start(task1)
    deliver_due()

    assert inbox.subjects() == ["[gpuq] array sweep[0-1] started: task 0 first, of 2"]


def test_the_cycle_cancelling_an_array_while_its_owner_cancels_it_tells_its_end_once(
    inbox: Inbox, people: dict[str, Any], monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """The cycle cancels, in one transaction, the tasks whose `after` job failed; the owner
    cancels one of them meanwhile (`gpuq cancel --array`). A lock on the array taken in the
    middle of the cycle's transaction made these two deadlock (an email lost, or the cycle
    rolled back)."""
    import logging
    import threading
    import time

    from django.db import connection

    from queue_service.jobs.snapshot import run_cycle

    dep = submit_job(people["alice"], spec(name="dep")).job
    first = submit_job(
        people["alice"], spec(name="sweep", array="0-1", after=[str(dep.pk)], notify=["end"])
    ).job
    transition(dep, S.FAILED, code="failed", message="by a test")
    real = notify.on_transition
    outcome: list[object] = []

    def owner_cancels(pk: Any) -> None:
        try:
            cancel_job(people["alice"], Job.objects.get(pk=pk))
            outcome.append("cancelled")
        except BaseException as exc:
            outcome.append(exc)
        finally:
            connection.close()

    threads: list[threading.Thread] = []

    def pausing(job: Job, *args: Any) -> None:
        real(job, *args)
        if threading.current_thread() is threading.main_thread() and not threads:
            other = Job.objects.exclude(pk=job.pk).get(array=job.array_id)
            threads.append(threading.Thread(target=owner_cancels, args=(other.pk,)))
            threads[0].start()
            time.sleep(0.5)  # the owner's cancel has taken its task's row by now

    monkeypatch.setattr(notify, "on_transition", pausing)
    caplog.set_level(logging.ERROR)
    run_cycle()
    threads[0].join(timeout=30)
    deliver_due()

    assert [r.getMessage() for r in caplog.records] == []
    assert outcome == ["cancelled"]
    states = set(Job.objects.filter(array=first.array_id).values_list("state", flat=True))
    assert states == {S.CANCELLED}
    assert inbox.subjects() == ["[gpuq] array sweep[0-1] ended: 2 cancelled"]


def test_a_mail_that_can_never_go_is_given_up_at_once_and_the_rest_still_go(
    inbox: Inbox, people: dict[str, Any], settings: Any
) -> None:
    jobs = [submit_job(people["alice"], spec(name=n, notify=["end"])).job for n in "ab"]
    for job in jobs:
        cancel_job(people["alice"], job)
    settings.DEFAULT_FROM_EMAIL = "gpuq@example.org, ops@example.org"  # set after start-up
    first = deliver_due()
    settings.DEFAULT_FROM_EMAIL = "gpuq@example.org"

    assert first == {"failed": 2}
    assert list(Notification.objects.values_list("state", "attempts")) == [(N.FAILED, 1)] * 2
    event = jobs[0].events.get(code="notify_failed")
    assert "Invalid address" in event.message
    assert deliver_due(timezone.now() + timedelta(days=2)) == {}


def test_a_spent_lease_on_the_last_try_is_given_up(inbox: Inbox, people: dict[str, Any]) -> None:
    job = submit_job(people["alice"], spec(name="spent", notify=["end"])).job
    cancel_job(people["alice"], job)
    now = timezone.now()
    Notification.objects.update(state=N.SENDING, attempts=MAX_ATTEMPTS, next_attempt_at=now)

    assert deliver_due(now) == {"skipped": 1}

    row = Notification.objects.get()
    assert (row.state, row.attempts) == (N.FAILED, MAX_ATTEMPTS)
    assert job.events.filter(code="notify_failed").exists()
    assert inbox.mail == []


def test_a_mail_server_that_never_answers_stops_the_batch_after_one_try(
    people: dict[str, Any], settings: Any, inbox: Inbox
) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # takes connections, says nothing: a hung relay
    settings.EMAIL_PORT = silent.getsockname()[1]
    settings.EMAIL_TIMEOUT = 1
    for name in ("a", "b", "c"):
        cancel_job(
            people["alice"], submit_job(people["alice"], spec(name=name, notify=["end"])).job
        )
    try:
        outcome = deliver_due()
    finally:
        silent.close()

    assert outcome == {"unreachable": 1}
    rows = list(Notification.objects.order_by("id").values_list("attempts", "next_attempt_at"))
    assert [attempts for attempts, _ in rows] == [1, 0, 0]
    # Backoff counted from when the try ended, not from when the batch began.
    assert rows[0][1] > timezone.now() + timedelta(seconds=25)


def test_the_address_read_when_sending_is_the_users_address_then(
    inbox: Inbox, people: dict[str, Any]
) -> None:
    job = submit_job(people["alice"], spec(name="moved", notify=["end"])).job
    cancel_job(people["alice"], job)
    people["alice"].email = "alice@new.example.org"
    people["alice"].save()

    deliver_due()

    assert inbox.mail[0][1] == ["alice@new.example.org"]
    assert Notification.objects.get().to == "alice@new.example.org"


def test_a_site_with_workers_but_no_mail_server_refuses_notify(
    client_for: Any, people: dict[str, Any], settings: Any
) -> None:
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{free_port()}/0"
    settings.EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"

    response = client_for("alice").post("/api/v1/jobs/", spec(notify=["end"]), format="json")

    assert response.status_code == 400, response.content
    assert response.json()["notify"] == ["this site sends no email (GPUQ_SMTP_URL is not set)"]


def test_notify_added_while_a_job_runs_tells_its_end(
    inbox: Inbox, people: dict[str, Any], local_cluster: Any
) -> None:
    from queue_service.jobs.services import update_job

    job = submit_job(people["alice"], spec(name="late", command=["sleep", "2"])).job
    job = run_until(job, lambda j: j.state == S.RUNNING)

    update_job(people["alice"], job, {"notify": ["end"]})
    run_until(job, lambda j: j.is_terminal)
    deliver_due()

    assert inbox.subjects() == ["[gpuq] late succeeded (exit code 0)"]


def test_a_success_is_told_without_a_why_that_repeats_it(
    inbox: Inbox, people: dict[str, Any], local_cluster: Any
) -> None:
    run(people, name="fine", command=["true"], notify=["end"])
    deliver_due()

    body = inbox.mail[0][2].get_content()
    assert "Why:" not in body
    assert body.startswith("Job fine (")
