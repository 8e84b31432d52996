"""On Kubernetes a stopped attempt's workload is deleted, its pods and their logs with it: once
the job runs its next attempt, the API says the earlier attempt's log is `gone`, and the job
page says so where that attempt's output would end, before the next attempt's. Against the
fake API server; Alice and Bob are teammates in vision (Alice owns the job)."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.dispatch import run_once
from queue_service.jobs.models import Job
from queue_service.jobs.services import resume_job, suspend_job
from tests.service.test_cli import Gpuq, gpuq  # noqa: F401
from tests.service.test_cli_follow_attempt import moving_proxy
from tests.ui.test_ui_edges import client_of, log_text, poll

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_attempt_whose_workload_was_deleted_has_its_log_said_to_be_gone(
    running_on_k8s: Any, people: dict[str, Any], client_for: Any
) -> None:
    with running_on_k8s() as (job, sim):
        (pod,) = sim.pods(job.external_id)
        sim.log(pod, b"epoch 1\n")
        alice = client_of(people["alice"])
        first, url = poll(alice, f"/jobs/{job.pk}/log/?stream=stdout&offset=0")
        assert log_text([first]) == "epoch 1\n"

        suspend_job(people["alice"], job)
        run_once()
        resume_job(people["alice"], Job.objects.get(pk=job.pk))
        run_once()
        job.refresh_from_db()
        assert (job.state, job.attempts) == ("queued", 2)
        (pod,) = sim.run(job.external_id)
        sim.log(pod, b"resumed at epoch 1\n")
        run_once()

        chunk = client_for("bob").get(f"/api/v1/jobs/{job.pk}/logs/", {"attempt": 1}).json()
        assert (chunk["text"], chunk["gone"], chunk["attempt_eof"]) == ("", True, True)
        piece, url = poll(alice, url)
        assert log_text([first, piece]) == (
            "epoch 1\n— attempt 1's stdout is gone from its cluster —— attempt 2 —"
            "resumed at epoch 1\n"
        )


def test_logs_follow_says_an_attempts_log_is_gone_and_goes_on_to_the_next(
    running_on_k8s: Any, people: dict[str, Any], gpuq: Gpuq, live_server: Any
) -> None:
    with running_on_k8s() as (job, sim):
        (pod,) = sim.pods(job.external_id)
        sim.log(pod, b"epoch 1\n")

        def stopped_and_run_again() -> None:
            suspend_job(people["alice"], Job.objects.get(pk=job.pk))
            run_once()
            resume_job(people["alice"], Job.objects.get(pk=job.pk))
            run_once()
            eid = Job.objects.get(pk=job.pk).external_id
            (pod,) = sim.run(eid)
            sim.log(pod, b"resumed at epoch 1\n")
            sim.succeed(eid)
            run_once()

        # The first log read gets "epoch 1"; before the second, attempt 1 is stopped (its
        # workload deleted) and attempt 2 runs to its end.
        with moving_proxy(live_server.url, {("logs", 1): stopped_and_run_again}) as url:
            result = gpuq("alice", "logs", "-f", "--interval", "0.1", str(job.pk), url=url)

        assert (result.code, result.out) == (0, "epoch 1\nresumed at epoch 1\n"), result.err
        assert "gpuq: attempt 1's stdout is gone from its cluster" in result.err
