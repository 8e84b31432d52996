"""End to end through Celery: a real worker process (with beat) on a real Redis broker, the
test database, and the local backend. The test process only submits and watches."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from queue_service.jobs.models import Job
from tests.conftest import lab_missing, spec
from tests.service.conftest import Inbox

pytestmark = pytest.mark.django_db(transaction=True)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def redis_url() -> str:
    import redis

    url = os.environ["GPUQ_TEST_REDIS_URL"]
    try:
        client = redis.Redis.from_url(url, socket_timeout=2)
        client.ping()
    except redis.RedisError:
        lab_missing(f"Redis at {url}")
    client.flushdb()  # a private database number: stale tasks from another run must not leak
    return url


@pytest.fixture
def worker(
    redis_url: str, local_cluster: Any, settings: Any, tmp_path: Path, mail_server: Inbox
) -> Iterator[str]:
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "CELERY_BROKER_URL": redis_url,
        "GPUQ_SMTP_URL": f"smtp://127.0.0.1:{mail_server.port}",
        "GPUQ_CYCLE_INTERVAL_S": "1",
        "GPUQ_SYNC_INTERVAL_S": "0.5",
    }
    log = tmp_path / "worker.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "queue_service.celery",
            "worker",
            "-B",
            "--schedule",
            str(tmp_path / "beat-schedule"),
            "-Q",
            "celery,mail",
            "--pool",
            "solo",
            "--loglevel",
            "INFO",
        ],
        cwd=REPO,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    settings.CELERY_BROKER_URL = redis_url  # so this process's submits enqueue a cycle
    from queue_service.celery import app

    app.conf.broker_url = redis_url
    try:
        yield str(log)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def wait_state(job_id: str, states: set[str], log: str, timeout: float = 60) -> Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = Job.objects.get(pk=job_id)
        if job.state in states:
            return job
        time.sleep(0.2)
    tail = Path(log).read_text()[-3000:]
    raise AssertionError(f"job stayed {Job.objects.get(pk=job_id).state}; worker log:\n{tail}")


def test_submit_runs_to_success_through_celery_and_redis(worker: str, client_for: Any) -> None:
    response = client_for("alice").post(
        "/api/v1/jobs/", spec(command=["/bin/sh", "-c", "echo via celery"]), format="json"
    )
    assert response.status_code == 201
    job = wait_state(response.json()["id"], Job.TERMINAL, worker)
    assert (job.state, job.exit_code) == (Job.State.SUCCEEDED, 0)
    codes = [e.code for e in job.events.all()]
    assert codes[:4] == ["submitted", "admitted", "dispatching", "dispatched"]
    logs = client_for("bob").get(f"/api/v1/jobs/{job.pk}/logs/").json()
    assert logs["text"] == "via celery\n"


def test_a_notification_is_sent_by_the_worker_after_the_move_commits(
    worker: str, client_for: Any, people: Any, mail_server: Inbox
) -> None:
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    response = client_for("alice").post(
        "/api/v1/jobs/", spec(name="told", command="exit 4", notify=["fail"]), format="json"
    )
    job = wait_state(response.json()["id"], Job.TERMINAL, worker)
    # The SMTP server holds the mail a moment before the worker records "sent".
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (
        mail_server.mail and job.notifications.get().state != "sending"
    ):
        time.sleep(0.2)

    assert job.state == Job.State.FAILED
    assert mail_server.subjects() == ["[gpuq] told failed (exit code 4)"]
    assert job.notifications.get().state == "sent"


def test_a_new_addresss_confirmation_link_is_sent_by_the_mail_worker(
    worker: str, client_for: Any, people: Any, mail_server: Inbox
) -> None:
    response = client_for("alice").patch(
        "/api/v1/me/", {"email": "alice@example.org"}, format="json"
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not mail_server.mail:
        time.sleep(0.2)

    assert response.json()["pending_email"] == "alice@example.org"
    assert [to for _, to, _ in mail_server.mail] == [["alice@example.org"]], Path(
        worker
    ).read_text()[-3000:]
    assert "/me/email/confirm/" in mail_server.mail[0][2].get_content()
    people["alice"].refresh_from_db()
    assert people["alice"].email == ""


def test_cancel_through_celery_stops_the_process(worker: str, client_for: Any) -> None:
    client = client_for("alice")
    job_id = client.post("/api/v1/jobs/", spec(command=["sleep", "60"]), format="json").json()["id"]
    wait_state(job_id, {Job.State.RUNNING}, worker)
    assert client.post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 200
    job = wait_state(job_id, Job.TERMINAL, worker, timeout=30)
    assert job.state == Job.State.CANCELLED


def test_every_submit_of_a_burst_is_followed_by_a_cycle_and_at_most_two_a_second(
    redis_url: str, people: Any, settings: Any
) -> None:
    import json
    import math
    from datetime import datetime

    import redis

    from queue_service.celery import app
    from queue_service.jobs.services import submit_job

    settings.CELERY_BROKER_URL = redis_url
    app.conf.broker_url = redis_url
    jobs = [submit_job(people["alice"], spec(name="burst-0")).job]
    time.sleep(0.5)  # past the first cycle's countdown: it may read the queue before the rest
    for i in range(1, 10):
        jobs.append(submit_job(people["alice"], spec(name=f"burst-{i}")).job)
    client = redis.Redis.from_url(redis_url)
    messages = [
        json.loads(m) for m in client.lrange("celery", 0, -1) if b"gpuq.schedule_cycle" in m
    ]
    etas = sorted(datetime.fromisoformat(m["headers"]["eta"]) for m in messages)
    # Before, the first submit's cycle was the only one for a second: the later submits
    # waited for the periodic cycle.
    assert all(any(eta > job.submitted_at for eta in etas) for job in jobs)
    seconds = (jobs[-1].submitted_at - jobs[0].submitted_at).total_seconds()
    assert len(etas) <= 2 * math.ceil(seconds + 1e-9)
