"""On the real Slurm lab: an attempt's log is its own output file (named by the attempt), read
by the external id its run kept once the job has gone on to its next attempt (suspended and
resumed here): what it wrote when stopped stays readable (the API's `attempt=`)."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import read_logs
from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, resume_job, submit_job, suspend_job
from tests.service.test_slurm_flow import slurm, wait  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.slurm]
S = Job.State


def test_a_stopped_attempts_last_words_are_read_after_the_next_attempt_began(
    slurm: Cluster,  # noqa: F811
    people: Any,
) -> None:
    command = (
        "trap 'echo checkpoint saved; exit 143' TERM; echo attempt $GPUQ_ATTEMPT; sleep 600 & wait"
    )
    job = submit_job(
        people["alice"],
        {"name": "agent", "command": ["/bin/sh", "-c", command], "cluster": "lab"},
    ).job
    wait([job], lambda j: j.state == S.RUNNING, timeout=60)
    wait([job], lambda j: read_logs(j, offset=0, limit=100, stream="stdout").data, timeout=30)
    try:
        suspend_job(people["alice"], job)
        wait([job], lambda j: j.state == S.SUSPENDED, timeout=120)
        resume_job(people["alice"], job)
        wait([job], lambda j: j.state == S.RUNNING and j.attempts == 2, timeout=60)
        wait([job], lambda j: read_logs(j, offset=0, limit=100, stream="stdout").data, timeout=30)

        first = read_logs(job, offset=0, limit=100, stream="stdout", attempt=1)
        latest = read_logs(job, offset=0, limit=100, stream="stdout")
        assert (first.data, first.eof) == (b"attempt 1\ncheckpoint saved\n", True)
        assert (latest.data, latest.eof) == (b"attempt 2\n", False)
    finally:
        cancel_job(people["alice"], Job.objects.get(pk=job.pk))
        wait([job], lambda j: j.is_terminal, timeout=120)
