"""A job gpuq saw running that its cluster puts back to waiting while still holding it (Kueue
evicting a Job, a Volcano gang restarting in place, Slurm requeueing it): gpuq keeps it running
(the cluster, not gpuq's queue, holds it) and says so, in the cluster's words, until it runs
again."""

from __future__ import annotations

import html
import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from queue_service.backends.base import JobStatus, RemoteState
from queue_service.jobs.dispatch import _apply_status, sync_cluster
from queue_service.jobs.models import Job, JobRun
from queue_service.jobs.services import _open_run, submit_job
from queue_service.jobs.snapshot import _usage_by_team, build_snapshot
from tests.conftest import spec

S = Job.State
KUEUE = "suspended: waiting for admission by Kueue"
HELD = f"the cluster holds it waiting: {KUEUE}"


def kueue_evicts(sim: Any, job: Job) -> None:
    """Kueue suspends the Job: the Job controller marks it Suspended and deletes its pods."""
    sim.held_by_kueue(job.external_id)
    for pod in sim.pods(job.external_id):
        with sim.store.lock:
            sim.store.delete(
                sim.store.types[("", "v1", "pods")],
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                None,
                None,
            )


def job_page(people: Any, job: Job) -> str:
    client = Client()
    client.force_login(people["alice"])
    page = client.get(reverse("job", args=[job.pk]))
    assert page.status_code == 200
    return html.unescape(page.content.decode())


def reason_box(page: str) -> str:
    return "".join(re.findall(r'<p class="reason-box">(.*?)</p>', page, re.S))


def test_a_running_job_the_cluster_puts_back_to_wait_stays_running_and_says_why(
    running_on_k8s: Any, people: Any, client_for: Any
) -> None:
    with running_on_k8s(workload="indexed") as (job, sim):
        kueue_evicts(sim, job)
        sync_cluster(job.cluster_id)

        body = client_for("alice").get(f"/api/v1/jobs/{job.pk}/").json()
        assert body["state"] == S.RUNNING
        assert body["reason"]["message"] == HELD
        assert body["remote_state"] == "Suspended"
        assert HELD in reason_box(job_page(people, job))


def test_the_clusters_wait_is_no_longer_shown_once_the_job_runs_again(
    running_on_k8s: Any, people: Any, client_for: Any
) -> None:
    with running_on_k8s(workload="indexed") as (job, sim):
        kueue_evicts(sim, job)
        sync_cluster(job.cluster_id)
        assert HELD in reason_box(job_page(people, job))

        sim.run(job.external_id)  # Kueue admits it again; its pods run
        sync_cluster(job.cluster_id)

        body = client_for("alice").get(f"/api/v1/jobs/{job.pk}/").json()
        assert (body["state"], body["reason"], body["remote_state"]) == (S.RUNNING, {}, "Running")
        # Only the timeline still tells that it was held.
        assert HELD not in reason_box(job_page(people, job))


def test_the_timeline_says_once_that_the_cluster_held_the_job_and_when_it_ran_it_again(
    running_on_k8s: Any, people: Any
) -> None:
    # Its run ended and a new one opened (usage counted apart) with no event: the timeline
    # showed the job running throughout.
    with running_on_k8s(workload="indexed") as (job, sim):
        kueue_evicts(sim, job)
        sync_cluster(job.cluster_id)
        sync_cluster(job.cluster_id)  # still held: said once
        sim.run(job.external_id)
        sync_cluster(job.cluster_id)

        notes = [
            (e.to_state, e.code, e.message, e.details)
            for e in job.events.filter(code__in=["cluster_holds", "cluster_runs_again"])
        ]
        held = f"{HELD}; its run ends (the wait is not charged)"
        again = "the cluster runs it again: a new run of the same attempt counts from now"
        assert notes == [
            ("", "cluster_holds", held, {"attempt": 1}),
            ("", "cluster_runs_again", again, {"attempt": 1}),
        ]
        page = job_page(people, job)
        assert held in page and again in page


@pytest.mark.parametrize(
    "stale",
    [
        JobStatus("x", RemoteState.QUEUED, reason="BeginTime", native_state="PENDING"),
        JobStatus("x", RemoteState.RUNNING, native_state="RUNNING"),
    ],
    ids=["waiting", "running"],
)
def test_a_stale_status_of_an_earlier_attempt_leaves_the_later_attempts_wait_alone(
    people: Any, stale: JobStatus
) -> None:
    job = submit_job(people["alice"], spec()).job
    Job.objects.filter(pk=job.pk).update(state=S.RUNNING, external_id="x", attempts=1, reason={})
    job.refresh_from_db()
    _apply_status(job, JobStatus("x", RemoteState.QUEUED, reason="", native_state="REQUEUED"))
    earlier = Job.objects.get(pk=job.pk)  # read by a sync while attempt 1 was held
    Job.objects.filter(pk=job.pk).update(external_id="y", attempts=2, reason={})  # ran again
    job.refresh_from_db()
    _apply_status(job, JobStatus("y", RemoteState.QUEUED, reason=KUEUE, native_state="Suspended"))

    _apply_status(earlier, stale)

    job.refresh_from_db()
    assert (job.state, job.reason["message"], job.remote_state) == (S.RUNNING, HELD, "Suspended")


def charged(job: Job, at: datetime) -> float:
    """The GPU-seconds fair share charges the job's team with, as of `at` (with a half-life of
    ten years: a day decays by some 2e-4)."""
    with override_settings(GPUQ_FAIR_SHARE_HALF_LIFE_S=3e8):
        team = _usage_by_team(at).get(job.team_id, ())
    return sum(bucket.gpu_seconds for bucket in team)


def test_a_job_the_cluster_holds_waiting_is_not_charged_for_the_wait(
    running_on_k8s: Any, people: Any
) -> None:
    with running_on_k8s(workload="indexed") as (job, sim):
        kueue_evicts(sim, job)
        sync_cluster(job.cluster_id)

        (run,) = JobRun.objects.filter(job=job)
        assert run.ended_at is not None and run.ended_by == "cluster_holds"
        later = timezone.now() + timedelta(hours=1)
        # The same, bar an hour's decay of what it used before (a charge would add 3600 s).
        assert charged(job, later + timedelta(hours=1)) == pytest.approx(
            charged(job, later), rel=1e-4
        )


def test_a_held_job_that_runs_again_is_charged_again_in_a_new_run_of_the_same_attempt(
    running_on_k8s: Any, people: Any
) -> None:
    with running_on_k8s(workload="indexed") as (job, sim):
        kueue_evicts(sim, job)
        sync_cluster(job.cluster_id)
        sim.run(job.external_id)
        sync_cluster(job.cluster_id)

        first, second = JobRun.objects.filter(job=job).order_by("id")
        assert (first.attempt, second.attempt) == (job.attempts, job.attempts)
        assert second.ended_at is None and second.started_at >= first.ended_at
        later = timezone.now() + timedelta(hours=1)
        assert charged(job, later + timedelta(hours=1)) - charged(job, later) == pytest.approx(
            job.gpus * 3600, rel=1e-4
        )


def test_two_syncs_that_both_read_a_held_job_running_again_open_one_run(people: Any) -> None:
    job = submit_job(people["alice"], spec()).job
    Job.objects.filter(pk=job.pk).update(state=S.RUNNING, external_id="x", attempts=1, reason={})
    job.refresh_from_db()
    _open_run(job, timezone.now())
    _apply_status(job, JobStatus("x", RemoteState.QUEUED, reason="", native_state="REQUEUED"))
    read_by_both = [Job.objects.get(pk=job.pk) for _ in range(2)]

    for read in read_by_both:
        _apply_status(read, JobStatus("x", RemoteState.RUNNING, native_state="RUNNING"))

    assert JobRun.objects.filter(job=job, ended_at__isnull=True).count() == 1
    assert JobRun.objects.filter(job=job).count() == 2


def test_a_held_job_that_runs_again_ends_by_its_limit_from_its_new_start(
    running_on_k8s: Any, people: Any
) -> None:
    # The cluster starts a held job over (Slurm's requeue, a restarted pod): its time limit
    # runs from then. The scheduler planned its end from the first start: too soon.
    with running_on_k8s(workload="indexed") as (job, sim):
        kueue_evicts(sim, job)
        sync_cluster(job.cluster_id)
        before = timezone.now()
        (held,) = build_snapshot(timezone.now())[0].running
        assert held.start_time >= before.timestamp() - 1  # held: a whole limit from now

        sim.run(job.external_id)
        sync_cluster(job.cluster_id)

        first, second = JobRun.objects.filter(job=job).order_by("id")
        (again,) = build_snapshot(timezone.now())[0].running
        assert again.start_time == second.started_at.timestamp() > first.started_at.timestamp()
