"""Text a shell or sbatch would interpret, submitted as a job through the service (the spec's
validation, the stored job, the dispatch request, the batch script) to the real lab, reaches
the job literally, in every place a user gives text: the name, an env value, the arguments,
the shell string, the checkpoint dir. Nothing else runs (no marker file appears) and what the
user asked runs (its output is the text, byte for byte)."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import read_logs, run_once, sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import lab_missing

from .conftest import CLUSTER_JSON

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

MARK = f"/tmp/gpuq-pwned-{uuid.uuid4().hex[:8]}"
HOSTILE = [
    f"$(touch {MARK})",
    f"`touch {MARK}`",
    f"a; touch {MARK}",
    f"it's \"quoted\" '; touch {MARK}; '",
    f"line one\n#SBATCH --partition=evil\ntouch {MARK}",
    "#SBATCH --account=evil",
    "--uid=0",
    "-a",
    "tab\there\r\x1b[31m ünïcödé ✓ 日本 \U0001f600",
    "back\\slash $HOME ${PATH} !! %j %u",
    "x" * 100,
]
PRINT = 'printf "%s\\0" "$GPUQ_JOB_NAME" "$HOSTILE" "$GPUQ_CHECKPOINT_DIR" "$@"'


@pytest.fixture
def lab(teams: Any) -> Iterator[Cluster]:
    if not CLUSTER_JSON.exists():
        lab_missing("the Slurm lab (deploy/slurm-lab/lab up)")
    cluster = Cluster.objects.create(
        name="lab", kind="slurm", settings=json.loads(CLUSTER_JSON.read_text())
    )
    sync_cluster(cluster.pk)
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=16)
    yield cluster
    assert not Path(MARK).exists()


def run_to_the_end(jobs: list[Job], timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run_once()
        for job in jobs:
            job.refresh_from_db()
        if all(job.is_terminal for job in jobs):
            return
        time.sleep(0.5)
    raise AssertionError([(j.name, j.state, j.reason) for j in jobs])


def log_of(job: Job) -> bytes:
    return read_logs(job, offset=0, limit=1 << 20, stream="stdout").data


def plain(text: str) -> bool:
    return not re.search(r"[\x00-\x1f\x7f-\x9f]", text)


def job_name(text: str) -> str:
    """The text as a name where the spec takes it (no control characters)."""
    return text if plain(text) else "hostile"


def checkpoint_dir(text: str) -> str:
    """The text in a checkpoint dir where the spec takes it (no control characters; `%`
    patterns are filled in, tested elsewhere)."""
    return "/tmp/gpuq-ckpt " + (text if plain(text) and "%" not in text else "plain")


def test_hostile_text_in_every_field_reaches_the_job_literally(lab: Cluster, people: Any) -> None:
    jobs = []
    for text in HOSTILE:
        spec = {
            "name": job_name(text),
            "cluster": "lab",
            "gpus_per_node": 0,
            "env": {"HOSTILE": text},
            "checkpoint": {"dir": checkpoint_dir(text)},
            "command": ["bash", "-c", PRINT, "gpuq", text, *HOSTILE[:3]],
        }
        jobs.append(submit_job(people["alice"], spec).job)
    run_to_the_end(jobs)
    for job, text in zip(jobs, HOSTILE, strict=True):
        assert job.state == Job.State.SUCCEEDED, (text, job.reason)
        words = log_of(job).decode().split("\0")[:-1]
        assert words == [job_name(text), text, checkpoint_dir(text), text, *HOSTILE[:3]]
