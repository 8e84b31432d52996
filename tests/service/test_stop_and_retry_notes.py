"""Stops and submits that a cluster keeps failing or refusing, and what a job being cancelled
says while it waits: against our fake Kubernetes API server with injected faults
(docs/kubernetes.md).

- A stop's failure repeated is one `stop_retry` (or `stop_failed`) event that counts its
  repeats, and the re-sends between them one `stop_sent` ("stop sent again") event: the
  timeline does not grow with every re-send. Before: every stop first wrote its own
  `stop_sent`, so note() never saw a repeat, and each re-send added two events.
- A `stop_sent` counted again is under way again: the sync does not send the stop once more
  before grace + 30 s after that last send.
- A job whose submit is in doubt, suspended and then cancelled, says who cancelled it (before:
  "suspended by alice: resume it to queue it again"); so does a suspended job being stopped.
- A cluster whose settings cannot be used shows that its sync fails (before: the backend was
  built outside the sync's error handling, and the cluster looked fine).
- A refused stop that a later stop gets past no longer says it was refused.
- `gpuq show` says how often a repeated note happened, and when the last was."""

from __future__ import annotations

import re
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db.models import F
from k8s_fakeapi import Fault

from queue_service.backends import BackendError
from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import RETRY, run_once, stop_job, sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import (
    cancel_job,
    held_reason,
    submit_job,
    suspend_job,
    transition,
    update_job,
)
from queue_service.tenancy.models import Quota
from tests.conftest import spec
from tests.service.test_cli import gpuq  # noqa: F401 (the fixture)
from tests.service.test_disabled_cluster_dispatch import cluster_back, cluster_down, retry_due

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


@pytest.fixture
def k8s(fake_k8s: Any, teams: Any) -> Any:
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=8)
    # max_retries=0: one HTTP call per backend call (the in-call retries only slow the test).
    return fake_k8s(
        setup=lambda sim: sim.node("gpu-1", gpus=8),
        image_default="busybox",
        workload="indexed",
        max_retries=0,
    )


def queued_job(people: Any, cluster: Cluster, name: str) -> Job:
    job = submit_job(people["alice"], spec(name=name, cluster=cluster.name)).job
    run_once()
    job.refresh_from_db()
    assert job.external_id and job.state in (S.QUEUED, S.RUNNING)
    return job


def deletes_answered(sim: Any, code: int) -> None:
    """Every deletion of a workload from now on is answered `code`."""
    sim.api.inject(Fault("status", code=code, method="DELETE", path_contains="/jobs/", times=10**6))


def stop_events(job: Job) -> list[tuple[str, str, int]]:
    return [
        (e.code, e.message.split(":")[0], e.details.get("repeats", 1))
        for e in job.events.filter(code__startswith="stop_").order_by("at", "id")
    ]


@pytest.mark.parametrize(
    ("answer", "code", "said"),
    [
        (503, "stop_retry", "the stop alice asked for failed, sent again"),
        (403, "stop_failed", "the cluster refused the stop alice asked for"),
    ],
    ids=["failing", "refusing"],
)
def test_a_stop_the_cluster_keeps_failing_or_refusing_adds_no_event_per_re_send(
    k8s: Any, people: Any, answer: int, code: str, said: str
) -> None:
    """The cancel's stop, then three re-sends (the sync's, or Celery's retries), each
    answered 503 (or 403): one failure event counting 4, one "stop sent again" counting 3."""
    with k8s as (cluster, sim):
        job = queued_job(people, cluster, "unstoppable")
        deletes_answered(sim, answer)

        cancel_job(people["alice"], job)  # the embedded mode's stop: fails, logged
        for _ in range(3):
            try:
                stop_job(str(job.pk))
            except BackendError:
                assert answer == 503  # a transient failure is raised for a retry

        job.refresh_from_db()
        assert job.state == S.CANCELLING
        assert stop_events(job) == [
            ("stop_sent", "stop sent (30 s to end after TERM)", 1),
            (code, said, 4),
            ("stop_sent", "stop sent again", 3),
        ], [(e.message, e.details) for e in job.events.order_by("at", "id")]
        assert job.reason["code"] == ("stop_refused" if answer == 403 else "cancel_requested")


def resends(job: Job) -> None:
    """Wait for the stops the sync sent again (a thread each, in the embedded mode)."""
    for thread in threading.enumerate():
        if thread.name == f"gpuq-stop-{job.pk}":
            thread.join(30)


def time_passes(job: Job) -> None:
    """An hour passes: every stop sent so far, and the cancel, are long overdue."""
    hour = timedelta(hours=1)
    Job.objects.filter(pk=job.pk).update(
        updated_at=F("updated_at") - hour, stopping_since=F("stopping_since") - hour
    )
    job.events.update(at=F("at") - hour)


def test_a_stop_sent_again_on_an_earlier_event_is_not_sent_once_more_before_its_time(
    k8s: Any, people: Any
) -> None:
    """The sync sends a stop again once grace + 30 s have passed since the last one sent, as
    `last_at` of an event counting re-sends says it, not since that event's first send."""
    with k8s as (cluster, sim):
        job = queued_job(people, cluster, "resent")
        deletes_answered(sim, 503)
        cancel_job(people["alice"], job)

        for _ in range(2):  # overdue twice: sent again twice, counted on one event
            time_passes(job)
            sync_cluster(cluster.pk)
            resends(job)
        again = job.events.get(code="stop_sent", message="stop sent again")
        assert again.details["repeats"] == 2
        sync_cluster(cluster.pk)  # its first send is an hour old, its last just now
        resends(job)

        again.refresh_from_db()
        assert again.details["repeats"] == 2


def test_a_job_in_doubt_suspended_then_cancelled_says_who_cancelled_it(
    k8s: Any, people: Any
) -> None:
    """A job cancelled while its submit is in doubt says so in its reason (who, what it waits
    for), also when it was suspended first: the suspend's reason ("resume it to queue it
    again") no longer holds. Once the cluster answers, the job is stopped there and ends
    cancelled by alice."""
    with k8s as (cluster, sim):
        job = submit_job(people["alice"], spec(name="in-doubt", cluster=cluster.name)).job
        cluster_down(sim)
        run_once()
        job.refresh_from_db()
        assert (job.state, job.external_id, job.reason["code"]) == (S.DISPATCHING, "", RETRY)

        suspend_job(people["alice"], job)
        cancel_job(people["alice"], Job.objects.get(pk=job.pk))

        job.refresh_from_db()
        assert (job.state, job.external_id) == (S.CANCELLING, "")
        assert job.reason["message"].startswith("cancelled by alice; k8s did not answer"), (
            job.reason
        )
        assert "HTTP 503" in job.reason["message"]  # the cluster's answer, as it was

        cluster_back(sim)
        retry_due(job)  # its dispatch is stale: the sync resumes it, then stops it
        for _ in range(3):
            run_once()
        job.refresh_from_db()
        assert (job.state, job.reason["message"]) == (S.CANCELLED, "cancelled by alice")


def test_a_job_being_suspended_then_cancelled_says_who_cancelled_it(k8s: Any, people: Any) -> None:
    with k8s as (cluster, _):
        job = queued_job(people, cluster, "suspending")
        transition(  # as suspend_job leaves it while its stop is under way
            job,
            S.SUSPENDING,
            code="suspend_requested",
            message="suspend requested by alice",
            reason=held_reason(people["alice"]),
        )

        cancel_job(people["alice"], Job.objects.get(pk=job.pk))

        job.refresh_from_db()
        assert job.state == S.CANCELLING
        assert job.reason["message"] == "cancelled by alice; it is being stopped on its cluster"


def test_a_cluster_whose_settings_cannot_be_used_shows_that_its_sync_fails(
    client_for: Any, people: Any, teams: Any
) -> None:
    """A sync that fails because gpuq's settings for the cluster are unusable (here a broken
    kubeconfig) is shown as "gpuq's settings for the cluster are not usable", as any failed
    sync: the cluster page says what failed."""
    Cluster.objects.create(
        name="k8s-broken",
        kind="kubernetes",
        settings={"kubeconfig": "apiVersion: v1\nkind: Config\nclusters: [", "image_default": "x"},
    )

    run_once()

    shown = client_for("alice").get("/api/v1/clusters/k8s-broken/").json()
    assert shown["last_sync_error"].startswith("gpuq's settings for the cluster are not usable"), (
        shown
    )


def test_a_refused_stop_the_cluster_then_takes_no_longer_says_it_was_refused(
    k8s: Any, people: Any
) -> None:
    """A refused stop leaves the job cancelling with the reason `stop_refused`; once a stop
    sent again reaches the cluster (its `stop_sent` marked delivered, the workload deleted),
    the job, still cancelling while its pods end, says who cancelled it and that it is being
    stopped."""
    with k8s as (cluster, sim):
        job = queued_job(people, cluster, "kept")
        sim.api.inject(Fault("status", code=403, method="DELETE", path_contains="/jobs/"))
        cancel_job(people["alice"], job)
        job.refresh_from_db()
        assert job.reason["code"] == "stop_refused"

        stop_job(str(job.pk))  # the sync's re-send; the cluster takes it this time

        job.refresh_from_db()
        delivered = job.events.filter(code="stop_sent").order_by("-at", "-id").first()
        assert delivered is not None and delivered.details.get("delivered") is True
        assert job.state == S.CANCELLING  # its pods are given the grace to end
        assert job.reason["code"] == "cancel_requested", job.reason
        assert job.reason["message"].startswith("cancelled by alice; it is being stopped")


def test_gpuq_show_tells_a_retry_repeated_from_a_retry_made_once(
    k8s: Any,
    people: Any,
    gpuq: Any,  # noqa: F811
) -> None:
    """A repeated note is one event that counts its repeats (`repeats`, `last_at`): `gpuq
    show`, as the job page, says how many and when the last was."""
    with k8s as (cluster, sim):
        job = submit_job(people["alice"], spec(name="patient", cluster=cluster.name)).job
        cluster_down(sim)
        run_once()
        for _ in range(3):
            retry_due(job)
            run_once()
        assert job.events.get(code=RETRY).details["repeats"] == 4

        shown = gpuq("alice", "show", str(job.pk))

        assert shown.code == 0, shown.err
        retry_lines = [line for line in shown.out.splitlines() if "will retry" in line]
        assert len(retry_lines) == 1
        assert re.search(r"\(4 times, the last at \d{4}-\d\d-\d\d ", retry_lines[0]), shown.out
        submitted = next(line for line in shown.out.splitlines() if "submitted by" in line)
        assert "times" not in submitted


def test_an_overdue_stop_is_sent_again_though_the_job_was_written_to_since(
    k8s: Any, people: Any
) -> None:
    """The sync sends a lost stop again once grace + 30 s have passed since the job was asked
    to stop: not since its row was last written (its emails changed meanwhile), which put the
    resend off for as long as the writes went on."""
    with k8s as (cluster, sim):
        job = queued_job(people, cluster, "edited")
        deletes_answered(sim, 503)
        cancel_job(people["alice"], job)
        time_passes(job)
        people["alice"].email = "alice@example.org"
        people["alice"].save()
        update_job(people["alice"], Job.objects.get(pk=job.pk), {"notify": ["end"]})

        sync_cluster(cluster.pk)
        resends(job)

        sent = job.events.filter(code="stop_sent").order_by("at", "id")
        assert [e.message for e in sent][-1] == "stop sent again", [e.message for e in sent]
