"""On the local backend a job of several nodes runs one process per node; every rank writes
the attempt's one stdout and stderr, as srun's tasks write Slurm's file, so a log read (API,
job page, download, `gpuq logs`) holds what each node wrote: a job that fails on its second
node shows why."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.services import submit_job
from tests.conftest import spec
from tests.service.test_an_attempts_log_is_read_to_its_end_before_the_next import run_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_multi_node_jobs_logs_hold_what_every_node_wrote(
    people: dict[str, Any], local_cluster: Any, client_for: Any
) -> None:
    command = (
        # Rank 1 fails once rank 0 has written (a failing rank stops the whole gang).
        'if [ "$GPUQ_NODE_RANK" = 1 ]; then sleep 1; echo "rank 1: CUDA out of memory" >&2;'
        " exit 1; fi;"
        ' echo "rank 0 ok"; echo "rank 0 done" >&2'
    )
    job = submit_job(
        people["alice"],
        spec(name="gang", nodes=2, gpus_per_node=4, command=["/bin/sh", "-c", command]),
    ).job
    job = run_until(job.pk, "failed", "succeeded")
    assert job.state == "failed" and job.exit_code == 1
    api = client_for("bob")

    stdout = api.get(f"/api/v1/jobs/{job.pk}/logs/").json()
    stderr = api.get(f"/api/v1/jobs/{job.pk}/logs/", {"stream": "stderr"}).json()

    assert stdout["text"] == "rank 0 ok\n"
    # Both ranks' lines, in whichever order they wrote them.
    assert sorted(stderr["text"].splitlines()) == ["rank 0 done", "rank 1: CUDA out of memory"]
