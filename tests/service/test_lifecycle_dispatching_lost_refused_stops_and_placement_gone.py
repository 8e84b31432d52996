"""The job lifecycle where a dispatch or a stop went only part of the way: an admission undone
before its dispatch leaves no admission behind; a job left `dispatching` with its cluster's id
is followed to its end (`lost` included); a stop the cluster refused is no stop, so the job's
own end is kept, while one whose workload's deletion went through counts though the pods'
deletion was refused. PostgreSQL, the local backend and the fake Kubernetes API server."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from queue_service.backends.base import JobStatus, RemoteState
from queue_service.clusters.models import Node
from queue_service.jobs.dispatch import (
    _apply_status,
    backend_for,
    dispatch_job,
    dispatch_request,
    sync_cluster,
)
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job, transition
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import spec

S = Job.State


def admitted(people: Any, **overrides: Any) -> Job:
    job = submit_job(people["alice"], spec(**overrides)).job
    run_cycle()
    job.refresh_from_db()
    assert job.state == S.ADMITTED, job.reason
    return job


# --- an admission undone before dispatch ------------------------------------------------------


def test_a_job_whose_placement_went_before_its_dispatch_waits_with_no_admission_time(
    people: Any, local_cluster: Any
) -> None:
    """A job the cycle placed on a node that stopped taking work before a worker handed it
    over goes back to pending, to be placed again. It is no longer admitted: it says so
    (no admission time), as a job the cycle un-admits for a preemptor does."""
    job = admitted(people)
    node = job.placement[0]["node"]
    Node.objects.filter(cluster=local_cluster, name=node).update(state=Node.State.DRAIN)

    dispatch_job(str(job.pk))

    job.refresh_from_db()
    assert (job.state, job.reason["code"]) == (S.PENDING, "placement_gone")
    assert job.placement == []
    assert job.admitted_at is None


# --- a dispatch interrupted after the cluster named the job ------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


@pytest.mark.django_db(transaction=True)
def test_a_job_left_dispatching_with_its_cluster_id_is_recorded_lost_when_its_cluster_loses_it(
    people: Any, local_cluster: Any
) -> None:
    """A worker handed the job over, recorded the cluster's id for it, and died before it
    recorded the job queued (submit_admitted's two writes). The sync follows such a job by
    that id; when the cluster then loses it (its supervisor gone, as after a reboot), the
    job ends `lost` and frees its GPUs, rather than staying `dispatching` for ever."""
    job = admitted(people, command=["/bin/sleep", "600"])
    # What dispatch_job does, up to the worker's death: admitted -> dispatching, the
    # backend's submit, and the external id written onto the job.
    transition(job, S.DISPATCHING, code="dispatching", attempts=job.attempts + 1)
    job = Job.objects.select_related("cluster", "team", "user", "priority_class").get(pk=job.pk)
    result = backend_for(local_cluster).submit(dispatch_request(job))
    Job.objects.filter(pk=job.pk).update(external_id=result.external_id)
    # The machine restarts: the job's supervisor is gone.
    job_dir = Path(local_cluster.settings["workdir"]) / result.external_id
    pid = int((job_dir / "supervisor.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)

    sync_cluster(local_cluster.pk)

    job.refresh_from_db()
    assert job.state == S.LOST, (job.state, job.reason)


@pytest.mark.parametrize(
    ("remote", "ended"),
    [(RemoteState.LOST, S.LOST), (RemoteState.TIMEOUT, S.TIMEOUT)],
)
def test_a_job_left_dispatching_with_its_cluster_id_takes_an_end_it_reached_without_running(
    people: Any, local_cluster: Any, remote: str, ended: str
) -> None:
    """The ends a poll reports of a job that never started, as of one recorded queued: lost,
    or a time limit (a deadline) reached while it waited there."""
    job = admitted(people)
    transition(job, S.DISPATCHING, code="dispatching", attempts=job.attempts + 1)
    Job.objects.filter(pk=job.pk).update(external_id="named-1")
    job.refresh_from_db()

    _apply_status(job, JobStatus("named-1", remote, reason="gone", started=False))

    job.refresh_from_db()
    assert job.state == ended


# --- a stop the cluster refused is no stop -----------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("asked", ["suspend", "cancel"])
def test_a_job_whose_only_stop_the_cluster_refused_keeps_the_success_it_reached_by_itself(
    running_on_k8s: Any, people: Any, asked: str
) -> None:
    """Alice asks to stop her running job; the cluster refuses the stop (403: gpuq's account
    may not delete workloads), so the job runs on untouched and then completes by itself,
    exit 0. No stop of its attempt ever reached the cluster: its end is its own (as
    ARCHITECTURE.md says: before a delivered stop, the job's own end is kept). It succeeded;
    it is neither `cancelled` nor `suspended` (which a resume would run all over again)."""
    from k8s_fakeapi import Fault

    from queue_service.jobs.dispatch import run_once
    from queue_service.jobs.services import cancel_job, suspend_job

    with running_on_k8s() as (job, sim):
        sim.api.inject(
            Fault("status", code=403, method="DELETE", path_contains="/jobs/", times=100)
        )
        (suspend_job if asked == "suspend" else cancel_job)(people["alice"], job)
        job.refresh_from_db()
        assert job.state in (S.SUSPENDING, S.CANCELLING)
        assert job.events.filter(code="stop_failed").exists()

        sim.succeed(job.external_id)
        for _ in range(5):
            run_once()
            job.refresh_from_db()
            if job.state in Job.TERMINAL or job.state == S.SUSPENDED:
                break

        assert (job.state, job.exit_code) == (S.SUCCEEDED, 0), (job.state, job.reason)


@pytest.mark.django_db(transaction=True)
def test_a_stop_that_deleted_the_workload_counts_though_its_cluster_refused_the_pods_deletion(
    running_on_k8s: Any, people: Any
) -> None:
    """gpuq's account may delete workloads but not pods (403 on the pods' deletion, which only
    gives them the stop's grace): the workload's deletion went through, so the stop reached the
    cluster and the job's end is the cancel's, not its own."""
    from k8s_fakeapi import Fault

    from queue_service.jobs.dispatch import run_once
    from queue_service.jobs.services import cancel_job

    with running_on_k8s() as (job, sim):
        sim.api.inject(
            Fault("status", code=403, method="DELETE", path_contains="/pods/", times=100)
        )
        cancel_job(people["alice"], job)
        job.refresh_from_db()
        assert not job.events.filter(code="stop_failed").exists()
        assert job.events.get(code="stop_sent").details["delivered"] is True

        for _ in range(5):
            run_once()
            job.refresh_from_db()
            if job.state in Job.TERMINAL:
                break

        assert job.state == S.CANCELLED, (job.state, job.reason)
        assert job.reason["message"] == "cancelled by alice"
