"""What gpuq charges for a job whose end only sacct still knows (squeue forgets a job
MinJobAge after it ends: a worker down a few minutes): through the service's own status
handling, with the lab's real sacct answers (data/sacct_final.txt, made by capture.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from queue_service.backends.slurm.parsers import parse_sacct
from queue_service.jobs.dispatch import _apply_status
from queue_service.jobs.models import Job, JobRun
from tests.service.test_lifecycle_charges import queued_on_cluster

DATA = Path(__file__).parent / "data"
JOBS: dict[str, str] = json.loads((DATA / "jobs.json").read_text())

# case -> whether it is charged: all six end `CANCELLED by <uid>|0:0` in sacct
CHARGED = {
    "resources": False,  # cancelled while it waited for GPUs
    "held_cancelled": False,  # cancelled by its user the moment it was submitted
    "cancelled": True,  # cancelled by its user while it ran
    "fill": True,  # cancelled by an admin while it ran
    # ran, was requeued, and was cancelled while it waited to run again (by an admin, and
    # by its user): the run before the requeue is charged
    "requeued": True,
    "requeued_cancelled": True,
}


@pytest.mark.parametrize("case", CHARGED)
def test_a_job_seen_ended_only_by_sacct_is_charged_only_if_it_ran(
    people: Any, local_cluster: Any, case: str
) -> None:
    status = parse_sacct((DATA / "sacct_final.txt").read_text())[JOBS[case]]
    job = queued_on_cluster(people, local_cluster)

    _apply_status(job, status)

    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    assert JobRun.objects.filter(job=job).exists() is CHARGED[case]
