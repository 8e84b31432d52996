"""A job stored before its env's SRUN_*, SBATCH_* and SALLOC_* names were refused (see
test_an_env_name_srun_or_sbatch_reads_as_its_own_option_is_refused.py) still runs, handed to
its cluster without them: on the Slurm lab `SRUN_EXPORT_ENV=NONE` started gpuq's srun without
PATH. The job's timeline says, once, which names were left out and why; its stored spec stays
as it was asked (an update keeps it; a copy meets today's rule). Backends import no Django, so
the service that builds the backend's request drops them, for every kind of cluster: the rule
is the spec's, which is the same everywhere. PostgreSQL and the local backend's real
processes."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.dispatch import dispatch_request, read_logs
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job, update_job
from tests.conftest import spec
from tests.service.test_job_flow import run_until

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State
SAYS = ["/bin/sh", "-c", 'echo "$SEED ${SRUN_EXPORT_ENV-none} ${SBATCH_TIMELIMIT-none}"']
OLD_ENV = {
    "SEED": "7",
    "SRUN_EXPORT_ENV": "NONE",
    "SBATCH_TIMELIMIT": "1",
    "SRUN_CPUS_PER_TASK": "2",
}


def stored_before_the_rule(people: Any, env: dict[str, str]) -> Job:
    """A job as a row written before the rule holds it: its spec's env as it was taken."""
    job = submit_job(people["alice"], spec(command=SAYS, env={"SEED": "7"})).job
    Job.objects.filter(pk=job.pk).update(spec={**job.spec, "env": env})
    job.refresh_from_db()
    return job


def test_a_job_stored_with_launcher_env_names_runs_without_them_and_says_which_and_why(
    people: Any, local_cluster: Any
) -> None:
    job = stored_before_the_rule(people, OLD_ENV)

    job = run_until(job, lambda j: j.is_terminal)

    assert job.state == S.SUCCEEDED, job.reason
    assert read_logs(job, offset=0, limit=4096, stream="stdout").data == b"7 none none\n"
    (event,) = job.events.filter(code="env_dropped")
    assert event.details["names"] == ["SBATCH_TIMELIMIT", "SRUN_CPUS_PER_TASK", "SRUN_EXPORT_ENV"]
    assert sorted(event.details["why"]) == ["SBATCH_", "SRUN_"]
    assert event.details["why"]["SRUN_"].startswith("srun reads it as one of its options")
    assert event.details["why"]["SBATCH_"].startswith("sbatch reads it as one of its options")
    assert event.message.startswith(
        "handed to local without SBATCH_TIMELIMIT, SRUN_CPUS_PER_TASK, SRUN_EXPORT_ENV of its"
        " env, names refused in a job's env since it was stored: SBATCH_TIMELIMIT: sbatch reads"
    )
    assert "; SRUN_CPUS_PER_TASK, SRUN_EXPORT_ENV: srun reads it as one of" in event.message
    assert job.spec["env"] == OLD_ENV  # what was asked stays the job's record


def test_the_request_a_backend_is_handed_holds_the_rest_of_the_env(
    people: Any, local_cluster: Any
) -> None:
    env = {"SEED": "7", "SRUN_CPUS_PER_TASK": "2", "SALLOC_PARTITION": "x", "SRUNNER": "1"}
    job = stored_before_the_rule(people, env)
    job.cluster = local_cluster

    assert dispatch_request(job).env == {"SEED": "7", "SRUNNER": "1"}


def test_a_job_whose_env_holds_none_of_them_says_nothing(people: Any, local_cluster: Any) -> None:
    job = stored_before_the_rule(people, {"SEED": "7", "SRUNNER": "1"})

    job = run_until(job, lambda j: j.is_terminal)

    assert job.state == S.SUCCEEDED, job.reason
    assert not job.events.filter(code="env_dropped").exists()


def test_a_job_requeued_says_it_once(people: Any, local_cluster: Any) -> None:
    job = stored_before_the_rule(people, OLD_ENV)
    job = run_until(job, lambda j: j.is_terminal)
    # Its next attempt (as a node failure's requeue would make) is handed over the same way.
    Job.objects.filter(pk=job.pk).update(state=S.PENDING, placement=[], external_id="")
    job = run_until(job, lambda j: j.is_terminal and j.attempts == 2)

    assert job.state == S.SUCCEEDED, job.reason
    assert job.events.filter(code="env_dropped").count() == 1


def test_an_update_cannot_set_env_and_keeps_the_stored_one(
    people: Any, client_for: Any, local_cluster: Any
) -> None:
    """`gpuq update` changes a waiting job's priority, time limit, emails or array limit,
    never its env: the API refuses an env, and the service applies none it is given."""
    job = stored_before_the_rule(people, {"SEED": "7"})
    asked = {"time_limit": 600, "env": {"SRUN_EXPORT_ENV": "NONE"}}

    response = client_for("alice").patch(f"/api/v1/jobs/{job.pk}/", asked, format="json")
    job = update_job(people["alice"], job, asked)

    assert response.status_code == 400
    assert "env" in response.json()
    assert (job.spec["time_limit"], job.spec["env"]) == (600, {"SEED": "7"})
