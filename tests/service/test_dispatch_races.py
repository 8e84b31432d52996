"""A submit whose outcome gpuq does not know, and a cancel that comes meanwhile, against our
fake Kubernetes API server with injected faults (docs/kubernetes.md). A transient error
does not say the cluster has no job (the create may have been stored and only its answer
lost), so the job stays dispatching and a retry submits the same attempt again, adopting
what the cluster has; a cancel waits for that retry to name the job, then stops it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db.models import F
from django.utils import timezone
from k8s_fakeapi import Fault
from k8s_sim import BATCH

from queue_service.backends.base import JobStatus, RemoteState
from queue_service.jobs.dispatch import (
    _apply_status,
    backend_for,
    dispatch_request,
    retries_due_now,
    run_once,
    submit_admitted,
    sync_cluster,
)
from queue_service.jobs.models import Job, JobEvent
from queue_service.jobs.services import (
    cancel_job,
    resume_job,
    submit_job,
    suspend_job,
    transition,
)
from queue_service.tenancy.models import Quota
from tests.conftest import spec

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


def failed_ago(job: Job, ago: timedelta) -> None:
    """Time passes: all that happened to the job (its failed submits, whose last the backoff
    counts from, included) happened `ago` earlier, in the same order."""
    fields = ("submitted_at", "admitted_at", "started_at", "stopping_since", "updated_at")
    Job.objects.filter(pk=job.pk).update(**{f: F(f) - ago for f in fields})
    for event in JobEvent.objects.filter(job=job):
        details = event.details if isinstance(event.details, dict) else {}
        if "last_at" in details:
            last = datetime.fromisoformat(details["last_at"]) - ago
            details = {**details, "last_at": last.isoformat()}
        JobEvent.objects.filter(pk=event.pk).update(at=event.at - ago, details=details)


@pytest.fixture
def k8s(fake_k8s: Any, teams: Any) -> Any:
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=8)
    return fake_k8s(
        setup=lambda sim: sim.node("gpu-1", gpus=8), image_default="busybox", workload="indexed"
    )


def workloads(sim: Any, *, live: bool = True) -> list[dict[str, Any]]:
    """The cluster's batch Jobs (live: those not being deleted)."""
    store = sim.api.store
    with store.lock:
        found = list(store.objects[store.types[BATCH]].values())
    return [o for o in found if not (live and o["metadata"].get("deletionTimestamp"))]


def create_stored_but_unanswered(sim: Any) -> None:
    """The next create is stored but its answer lost, and the backend's two in-call retries
    get 503: the submit ends in a transient error, with the workload on the cluster."""
    sim.api.inject(Fault("drop_after", method="POST", path_contains="/jobs"))
    sim.api.inject(Fault("status", code=503, method="POST", path_contains="/jobs", times=2))


def unanswered_submit(people: Any, cluster: Any, sim: Any) -> Job:
    """Alice's job after the embedded loop's first pass, whose create the cluster stored
    but whose answer was lost."""
    job = submit_job(people["alice"], spec(name="unsure", cluster=cluster.name)).job
    create_stored_but_unanswered(sim)
    run_once()
    job.refresh_from_db()
    return job


def dispatching(job: Job, cluster: Any) -> Job:
    """The job as a worker holds it while it submits: admitted to the cluster, then moved to
    dispatching (dispatch_job's first step), with what dispatch_request reads."""
    Job.objects.filter(pk=job.pk).update(state=S.ADMITTED, cluster=cluster)
    job = Job.objects.select_related("cluster", "team", "user", "priority_class").get(pk=job.pk)
    return transition(job, S.DISPATCHING, code="dispatching", attempts=1)


def test_a_create_stored_but_unanswered_leaves_the_job_dispatching_and_a_cancel_stops_it(
    k8s: Any, people: Any
) -> None:
    with k8s as (cluster, sim):
        job = unanswered_submit(people, cluster, sim)

        assert (job.state, job.external_id, job.reason["code"]) == (
            S.DISPATCHING,
            "",
            "dispatch_retry",
        )
        assert len(workloads(sim)) == 1  # the cluster has it; gpuq does not know its name

        cancel_job(people["alice"], job)
        job.refresh_from_db()
        assert job.state == S.CANCELLING  # not cancelled at once: the workload may run
        run_once()  # the retry adopts the workload (409 AlreadyExists), then stops it
        run_once()

        job.refresh_from_db()
        assert job.state == S.CANCELLED
        assert job.attempts == 1 and job.external_id
        assert "dispatched" in [e.code for e in job.events.all()]
        assert workloads(sim) == []


def test_a_transient_error_retries_the_same_attempt_and_adopts_what_the_cluster_has(
    k8s: Any, people: Any
) -> None:
    with k8s as (cluster, sim):
        job = unanswered_submit(people, cluster, sim)

        run_once()

        job.refresh_from_db()
        assert (job.state, job.attempts) == (S.QUEUED, 1)
        (only,) = workloads(sim)  # one workload: the first create's, adopted
        assert job.external_id.endswith("/" + only["metadata"]["name"])
        assert f"adopted {job.external_id}" in [e.message for e in job.events.all()]


def test_a_cancel_during_a_submit_the_cluster_refuses_ends_the_job_cancelled(
    k8s: Any, people: Any
) -> None:
    with k8s as (cluster, sim):
        job = submit_job(people["alice"], spec(name="refused", cluster=cluster.name)).job
        job = dispatching(job, cluster)  # a worker submits...
        cancel_job(people["alice"], Job.objects.get(pk=job.pk))  # ...and the owner, meanwhile
        sim.api.inject(Fault("status", code=403, method="POST", path_contains="/jobs"))

        submit_admitted(job)  # the worker, still holding the job as it read it

        job.refresh_from_db()
        assert job.state == S.CANCELLED
        assert "the cluster refused it" in job.events.get(code="cancelled").message


def test_a_submit_answered_after_its_job_moved_on_stops_what_it_made(k8s: Any, people: Any) -> None:
    """A submit can take long (SSH, a slow API server); meanwhile its job may have been
    stopped, admitted again and handed over as its next attempt. The late answer must not
    name the next attempt after the old workload (which would then run unfollowed): that
    workload is stopped, and the timeline says so."""
    with k8s as (cluster, sim):
        job = submit_job(people["alice"], spec(name="late", cluster=cluster.name)).job
        job = dispatching(job, cluster)  # a worker submits attempt 1...
        Job.objects.filter(pk=job.pk).update(attempts=2)  # ...while attempt 2 is under way

        submit_admitted(job)  # the worker, still holding attempt 1 as it read it

        job.refresh_from_db()
        assert (job.state, job.attempts, job.external_id) == (S.DISPATCHING, 2, "")
        assert workloads(sim) == []  # attempt 1's workload is being deleted
        (late,) = job.events.filter(code="late_submit_stopped")
        assert late.message.startswith("attempt 1's submit answered late (")


def test_a_cancel_after_a_worker_died_mid_dispatch_stops_what_it_had_created(
    k8s: Any, people: Any
) -> None:
    with k8s as (cluster, sim):
        job = submit_job(people["alice"], spec(name="orphan", cluster=cluster.name)).job
        job = dispatching(job, cluster)
        backend_for(cluster).submit(dispatch_request(job))  # then the worker died
        cancel_job(people["alice"], Job.objects.get(pk=job.pk))
        stale = timezone.now() - timedelta(hours=1)
        Job.objects.filter(pk=job.pk).update(updated_at=stale)

        sync_cluster(cluster.pk)  # resumes the dispatch: adopts, then stops
        sync_cluster(cluster.pk)

        job.refresh_from_db()
        assert job.state == S.CANCELLED and job.external_id
        assert workloads(sim) == []


@pytest.mark.parametrize(
    ("state", "remote", "ends"),
    [
        (S.CANCELLING, RemoteState.PREEMPTED, S.CANCELLED),
        (S.CANCELLING, RemoteState.NODE_FAILURE, S.CANCELLED),
        (S.SUSPENDING, RemoteState.PREEMPTED, S.SUSPENDED),
    ],
)
@pytest.mark.parametrize("stopped", [True, False], ids=["after the stop", "before the stop"])
def test_a_job_being_stopped_that_the_cluster_preempts_is_not_requeued(
    people: Any, local_cluster: Any, state: str, remote: str, ends: str, stopped: bool
) -> None:
    """The default retry policy requeues after a preemption or a node failure; a job its
    owner asked to cancel or suspend ends as asked instead (the move back to pending is no
    allowed one: every sync of the cluster used to stop at this job)."""
    job = submit_job(people["alice"], spec()).job
    Job.objects.filter(pk=job.pk).update(state=state, cluster=local_cluster, external_id="77")
    job.refresh_from_db()

    _apply_status(job, JobStatus("77", remote, exit_code=143), stopped=stopped)

    job.refresh_from_db()
    assert job.state == ends
    assert not job.events.filter(code__startswith="requeued").exists()


def test_the_embedded_loop_backs_off_a_submit_that_keeps_failing(k8s: Any, people: Any) -> None:
    with k8s as (cluster, sim):
        job = submit_job(people["alice"], spec(name="down", cluster=cluster.name)).job
        sim.api.inject(Fault("status", code=503, method="POST", path_contains="/jobs", times=10**6))

        for _ in range(4):  # the first submit, its retry at once, then a pause of 5 s
            run_once()

        # Failed submits in a row are counted on one event (services.FOLDED_NOTES).
        def failed_submits() -> int:
            return sum(
                e.details.get("repeats", 1) for e in job.events.filter(code="dispatch_retry")
            )

        assert failed_submits() == 2
        now = timezone.now()
        assert retries_due_now(now) == []
        assert retries_due_now(now + timedelta(seconds=6)) == [str(job.pk)]
        # The pauses grow with the failures (5, 15, 30 s ...), up to five minutes.
        failed_ago(job, timedelta(seconds=6))
        run_once()
        assert failed_submits() == 3
        assert retries_due_now(timezone.now() + timedelta(seconds=6)) == []
        assert retries_due_now(timezone.now() + timedelta(seconds=16)) == [str(job.pk)]


def test_a_job_suspended_while_its_submit_is_retried_is_stopped_once_named_and_waits(
    k8s: Any, people: Any
) -> None:
    with k8s as (cluster, sim):
        job = unanswered_submit(people, cluster, sim)
        assert (job.state, job.reason["code"]) == (S.DISPATCHING, "dispatch_retry")

        suspend_job(people["alice"], job)
        job.refresh_from_db()
        assert (job.state, job.reason["code"]) == (S.SUSPENDING, "suspended")
        assert len(workloads(sim)) == 1  # it may run: it is stopped once named, not dropped

        # The sync resumes the interrupted dispatch once it is stale: it adopts the
        # workload (409 AlreadyExists), then stops it.
        stale = timezone.now() - timedelta(minutes=10)
        Job.objects.filter(pk=job.pk).update(updated_at=stale)
        run_once()
        run_once()

        job.refresh_from_db()
        assert (job.state, job.reason["code"]) == (S.SUSPENDED, "suspended")
        assert workloads(sim) == []
        assert resume_job(people["alice"], job).state == S.PENDING
