"""The local backend (the embedded default) runs a job's command on this machine: it has no
containers, so a spec's `image` is not used there. The job's timeline says so, once (a
second attempt does not repeat it), instead of the job failing later for a program that
only its image holds."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.clusters.models import Cluster
from queue_service.jobs.models import Job, JobEvent
from queue_service.jobs.services import resume_job, submit_job, suspend_job
from tests.conftest import spec
from tests.service.test_job_flow import run_until

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


def test_a_local_job_with_an_image_is_told_once_that_the_image_is_not_used(
    local_cluster: Cluster, people: Any
) -> None:
    job = submit_job(
        people["alice"],
        spec(name="imaged", image="nvcr.io/nvidia/pytorch:24.05-py3", command=["sleep", "30"]),
    ).job
    job = run_until(job, lambda j: j.state == S.RUNNING)
    suspend_job(people["alice"], job)
    job = run_until(job, lambda j: j.state == S.SUSPENDED)
    resume_job(people["alice"], job)
    job = run_until(job, lambda j: j.state == S.RUNNING and j.attempts == 2)

    told = list(JobEvent.objects.filter(job=job, code="image_ignored"))
    assert len(told) == 1, [e.message for e in job.events.all()]
    assert told[0].message == (
        "cluster local runs the command on this machine, without containers:"
        " image nvcr.io/nvidia/pytorch:24.05-py3 is not used"
    )


def test_a_local_job_without_an_image_is_told_nothing_of_images(
    local_cluster: Cluster, people: Any
) -> None:
    job = submit_job(people["alice"], spec(name="plain")).job
    job = run_until(job, lambda j: j.state == S.SUCCEEDED)
    assert not JobEvent.objects.filter(job=job, code="image_ignored").exists()
