"""A job's env may not set a name srun, sbatch or salloc reads as one of its own options.

srun reads `SRUN_*` from its environment (SRUN_CPUS_PER_TASK is --cpus-per-task,
SRUN_EXPORT_ENV --export), and on Slurm gpuq launches multi-node training and image jobs
through an srun that holds the job's env: on the lab, `SRUN_CPUS_PER_TASK=2` failed the step
("More processors requested than permitted") and `SRUN_EXPORT_ENV=NONE` started it without
PATH ("execve(): bash: No such file or directory"). `SBATCH_*` and `SALLOC_*` never reach
gpuq's sbatch (the env is set on the job's launch line), so `SBATCH_TIMELIMIT=1` left the job's
limit as it was: set in env they only look as if they did something. `SLURM_*` is refused
already (`RESERVED_ENV_PREFIXES`); a job still reads the SLURM_* values Slurm gives it."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.models import Job
from tests.conftest import spec

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("SRUN_CPUS_PER_TASK", "srun reads it as one of its options"),
        ("SRUN_EXPORT_ENV", "srun reads it as one of its options"),
        ("SRUN_EXCLUSIVE", "srun reads it as one of its options"),
        ("SBATCH_TIMELIMIT", "sbatch reads it as one of its options"),
        ("SBATCH_EXCLUSIVE", "sbatch reads it as one of its options"),
        ("SALLOC_PARTITION", "salloc reads it as one of its options"),
    ],
)
def test_a_name_srun_sbatch_or_salloc_reads_is_refused_naming_it(
    client_for: Any, name: str, why: str
) -> None:
    response = client_for("alice").post(
        "/api/v1/jobs/", spec(env={"SEED": "7", name: "2"}), format="json"
    )

    assert response.status_code == 400, response.json()
    assert list(response.json()) == ["env"]
    assert list(response.json()["env"]) == [name]
    message = response.json()["env"][name]  # env's messages: one text per name
    assert message.startswith(why)
    assert not Job.objects.exists()


@pytest.mark.parametrize("name", ["SRUN", "SRUNNER", "MY_SRUN_X", "srun_cpus_per_task", "SBATCHX"])
def test_a_name_that_only_looks_alike_is_taken(client_for: Any, name: str) -> None:
    response = client_for("alice").post("/api/v1/jobs/", spec(env={name: "1"}), format="json")

    assert response.status_code == 201, response.json()
    assert Job.objects.get().spec["env"] == {name: "1"}


def test_a_job_stored_with_such_a_name_before_the_rule_can_still_be_updated(
    client_for: Any,
) -> None:
    alice = client_for("alice")
    created = alice.post("/api/v1/jobs/", spec(env={"SEED": "7"}), format="json")
    job = Job.objects.get(pk=created.json()["id"])
    old_env = {"SEED": "7", "SRUN_CPUS_PER_TASK": "2"}
    Job.objects.filter(pk=job.pk).update(spec={**job.spec, "env": old_env})

    response = alice.patch(f"/api/v1/jobs/{job.pk}/", {"priority": "high"}, format="json")

    assert response.status_code == 200, response.json()
    job.refresh_from_db()
    assert (job.spec["priority"], job.spec["env"]) == ("high", old_env)
    # A copy is a new submit: today's rule.
    copied = alice.post(f"/api/v1/jobs/{job.pk}/resubmit/", {}, format="json")
    assert copied.status_code == 400
    assert list(copied.json()["env"]) == ["SRUN_CPUS_PER_TASK"]
