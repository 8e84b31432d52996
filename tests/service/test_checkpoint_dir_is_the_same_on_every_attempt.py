"""A spec's `checkpoint.dir` is where every attempt of the job finds what the last one saved
(a suspend and resume, a requeue after a preemption): an absolute path, since each attempt
runs somewhere of its own (the local backend's `<job>/<attempt>/work`, Slurm's --chdir per
attempt, a new pod), and for a task of an array its own by `%a`, as in sbatch's file names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from queue_service.backends.base import job_env
from queue_service.jobs.dispatch import dispatch_request
from queue_service.jobs.models import Job
from queue_service.jobs.services import resume_job, submit_job, suspend_job
from tests.conftest import spec
from tests.service.test_job_flow import run_until

S = Job.State

# Attempt 1 trains until TERM, then saves into $GPUQ_CHECKPOINT_DIR and exits 0; a later
# attempt says whether it found the save, and ends.
CHECKPOINTING = (
    'if [ "$GPUQ_ATTEMPT" != 1 ]; then'
    ' if [ -e "$GPUQ_CHECKPOINT_DIR/step" ];'
    ' then echo "resumed from step $(cat "$GPUQ_CHECKPOINT_DIR/step")";'
    " else echo 'no checkpoint found'; fi; exit 0; fi;"
    ' mkdir -p "$GPUQ_CHECKPOINT_DIR";'
    " trap 'echo 7 > \"$GPUQ_CHECKPOINT_DIR/step\"; exit 0' TERM;"
    " echo training; while true; do sleep 0.05; done"
)


@pytest.mark.parametrize("path", ["ckpt", "./ckpt", "~/ckpt", "%j/ckpt"])
def test_a_relative_checkpoint_dir_is_refused_at_its_field(client_for: Any, path: str) -> None:
    # Handed over as it was, it named another directory on every attempt: a resumed or
    # requeued job never found its checkpoint and started over.
    response = client_for("alice").post(
        "/api/v1/jobs/", spec(checkpoint={"dir": path}), format="json"
    )
    assert response.status_code == 400, response.content
    assert response.json() == {
        "checkpoint": {"dir": ["must be an absolute path, the same on every attempt"]}
    }
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_resumed_job_finds_the_checkpoint_it_saved_when_suspended(
    people: Any, local_cluster: Any, client_for: Any, tmp_path: Path
) -> None:
    job = submit_job(
        people["alice"],
        spec(
            command=["/bin/sh", "-c", CHECKPOINTING],
            checkpoint={"dir": str(tmp_path / "ckpt" / "%j")},
        ),
    ).job
    job = run_until(job, lambda j: j.state == S.RUNNING)
    suspend_job(people["alice"], job)
    job = run_until(job, lambda j: j.state == S.SUSPENDED)

    resume_job(people["alice"], job)
    job = run_until(job, lambda j: j.is_terminal)

    assert (job.state, job.attempts) == (S.SUCCEEDED, 2)
    logs = client_for("alice").get(f"/api/v1/jobs/{job.pk}/logs/").json()
    assert logs["text"] == "resumed from step 7\n"
    assert (tmp_path / "ckpt" / str(job.pk) / "step").read_text() == "7\n"


def test_each_task_of_an_array_has_a_checkpoint_dir_of_its_own(people: Any) -> None:
    # One dir for all of them let a requeued task resume from another task's checkpoint.
    first = submit_job(
        people["alice"], spec(array="0-2", checkpoint={"dir": "/ckpt/%A/task-%a/%j/100%%"})
    ).job
    tasks = Job.objects.filter(array=first.array).order_by("array_index")

    dirs = [job_env(dispatch_request(task))["GPUQ_CHECKPOINT_DIR"] for task in tasks]

    assert dirs == [
        f"/ckpt/{first.array_id}/task-{task.array_index}/{task.pk}/100%" for task in tasks
    ]
    assert len(set(dirs)) == 3


def test_a_job_that_is_no_array_may_not_name_an_array_task_in_its_checkpoint_dir(
    client_for: Any,
) -> None:
    response = client_for("alice").post(
        "/api/v1/jobs/", spec(checkpoint={"dir": "/ckpt/%A/%a"}), format="json"
    )
    assert response.status_code == 400, response.content
    assert response.json() == {
        "checkpoint": {
            "dir": ["%a and %A name an array's task and array: this job is not an array"]
        }
    }
    # Written as %%a it is the text %a.
    plain = client_for("alice").post(
        "/api/v1/jobs/", spec(checkpoint={"dir": "/ckpt/%%a"}), format="json"
    )
    assert plain.status_code == 201, plain.content
    job = Job.objects.get(pk=plain.json()["id"])
    assert dispatch_request(job).checkpoint_dir == "/ckpt/%a"
