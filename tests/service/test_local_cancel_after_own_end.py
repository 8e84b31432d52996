"""A cancel that reaches the local cluster after the job's own processes had ended
(exit 0), while its supervisor only waits out the grace for what they left behind. The
supervisor's verdict is the job's own (succeeded: the stop came after the end), and gpuq must
keep it (as ARCHITECTURE.md says: a job that had already ended on its own before the stop
keeps its own end), not record a cancellation: a job `after` it would be cancelled too."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from queue_service.jobs.dispatch import run_once, sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, submit_job
from tests.conftest import spec
from tests.service.test_lifecycle_edges import moves, wait_for_verdict

S = Job.State


def leader_ended(cluster: Any, job: Job) -> None:
    """Until the job's main process (its rank's leader) has exited: it printed `done` and
    is gone, while a child it left (deaf to TERM) keeps the supervisor waiting."""
    job_dir = Path(cluster.settings["workdir"]) / job.external_id
    deadline = time.monotonic() + 30
    while True:
        assert time.monotonic() < deadline, "the job's leader did not end"
        started = job_dir / "started.json"
        if started.exists() and (job_dir / "stdout").exists():
            (pid,) = json.loads(started.read_text())["pids"]
            # Reaped: the supervisor has seen it end (it polls its ranks every 0.1 s).
            if not Path(f"/proc/{pid}").exists() and (job_dir / "stdout").read_text() == "done\n":
                time.sleep(0.3)
                return
        time.sleep(0.05)


@pytest.mark.django_db(transaction=True)
def test_a_job_that_succeeded_before_the_cancel_reached_it_keeps_its_success(
    people: Any, local_cluster: Any
) -> None:
    # Its leader succeeds after a second, leaving a child that ignores SIGTERM: the
    # supervisor waits the cluster's grace (here 10 s) before it kills it and writes the
    # verdict.
    local_cluster.settings = {**local_cluster.settings, "grace_s": 10}
    local_cluster.save()
    job = submit_job(
        people["alice"],
        spec(
            name="finishing",
            command=["/bin/sh", "-c", "(trap '' TERM; exec sleep 30) & sleep 1; echo done"],
        ),
    ).job
    run_once()
    job.refresh_from_db()
    assert job.state == S.QUEUED, job.reason
    leader_ended(local_cluster, job)

    cancel_job(people["alice"], job)  # the stop runs inline (embedded mode)
    wait_for_verdict(local_cluster, job)
    verdict = json.loads(
        (Path(local_cluster.settings["workdir"]) / job.external_id / "result.json").read_text()
    )
    assert verdict["state"] == "succeeded"  # the cluster's own word: the stop came after
    sync_cluster(local_cluster.pk)

    job.refresh_from_db()
    assert (job.state, job.exit_code) == (S.SUCCEEDED, 0), moves(job)
