"""The embedded loop's stops of a cycle's victims, against our fake Kubernetes
API server with an injected fault (docs/kubernetes.md)."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_fakeapi import Fault

from queue_service.jobs.dispatch import run_once
from queue_service.jobs.models import Job, JobEvent
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import spec

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


def test_one_victims_failed_stop_neither_fails_the_round_nor_loses_the_other_victims_stop(
    fake_k8s: Any, people: Any, teams: Any
) -> None:
    """language runs two 4-GPU jobs on borrowed quota; vision, within its nominal, reclaims
    the node. The first victim's deletion meets a 503 (a single transient failure): that
    stop is retried later, but the round goes on and the other victim is stopped now."""
    Quota.objects.create(
        team=teams["language"], gpu_model="*", nominal_gpus=0, borrowing_limit_gpus=8
    )
    Quota.objects.create(
        team=teams["vision"], gpu_model="*", nominal_gpus=8, borrowing_limit_gpus=0
    )
    with fake_k8s(
        setup=lambda sim: sim.node("gpu-1", gpus=8), image_default="busybox", max_retries=0
    ) as (_, sim):
        borrowers = [
            submit_job(people["charlie"], spec(name=f"b{i}", cluster="k8s", gpus_per_node=4)).job
            for i in range(2)
        ]
        run_once()
        for job in borrowers:
            job.refresh_from_db()
            assert job.state == S.QUEUED, job.reason
            sim.run(job.external_id)
        run_once()
        for job in borrowers:
            job.refresh_from_db()
            assert job.state == S.RUNNING
        submit_job(people["alice"], spec(name="mine", cluster="k8s", gpus_per_node=8))
        sim.api.inject(Fault("status", code=503, method="DELETE", times=1))

        errors = []
        try:
            run_once()
        except Exception as exc:  # the embedded worker would log the round as failed
            errors.append(exc)

        states = sorted(
            Job.objects.filter(pk__in=[j.pk for j in borrowers]).values_list("state", flat=True)
        )
        assert states == [S.PREEMPTING, S.PREEMPTING]
        delivered = JobEvent.objects.filter(
            job__in=borrowers, code="stop_sent", details__delivered=True
        ).count()
        assert (errors, delivered) == ([], 1)


def test_a_job_suspended_while_its_submit_is_refused_waits_suspended(
    fake_k8s: Any, people: Any, teams: Any
) -> None:
    """Suspended while a worker hands it over, then the cluster refuses the submit: nothing
    runs, and the job was asked to wait, so it waits suspended (resumable), as a cancel in
    the same place ends cancelled - not failed with the cluster's refusal."""
    from queue_service.jobs.dispatch import submit_admitted
    from queue_service.jobs.services import suspend_job, transition

    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=8)
    with fake_k8s(setup=lambda sim: sim.node("gpu-1", gpus=8), image_default="busybox") as (
        cluster,
        sim,
    ):
        job = submit_job(people["alice"], spec(name="refused", cluster=cluster.name)).job
        Job.objects.filter(pk=job.pk).update(state=S.ADMITTED, cluster=cluster)
        job = Job.objects.select_related("cluster", "team", "user", "priority_class").get(pk=job.pk)
        job = transition(job, S.DISPATCHING, code="dispatching", attempts=1)  # a worker...
        suspend_job(people["alice"], Job.objects.get(pk=job.pk))  # ...and the owner, meanwhile
        sim.api.inject(Fault("status", code=403, method="POST", path_contains="/jobs"))

        submit_admitted(job)

        job.refresh_from_db()
        assert job.state == S.SUSPENDED, (job.state, job.reason)
