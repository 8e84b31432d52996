"""A submit in doubt (its attempt's directory exists: an earlier submit got that far) looks the
job up by its name and directory and adopts it (docs/slurm.md "What a submission does"). squeue
lists every user's jobs, and a job's name and WorkDir are visible to all (no PrivateData), so
another user can submit a job with the same name and `--chdir`: only a job of the account gpuq
submits as may be adopted. The lab test uses the lab's second user as that other user."""

from __future__ import annotations

import shlex

import pytest

from queue_service.backends.base import BackendError
from queue_service.backends.slurm import commands, script
from queue_service.backends.slurm.backend import slurm_job_id

from .conftest import lab_backend, request, second_account


@pytest.mark.parametrize("build", [commands.lookup_squeue, commands.lookup_sacct])
def test_the_lookup_of_a_submit_in_doubt_asks_only_for_the_accounts_jobs(build: object) -> None:
    assert callable(build)
    argv = shlex.split(build("gpuq-0c1d", "gpuq-nlp"))
    assert "--user=gpuq-nlp" in argv
    assert "--name=gpuq-0c1d" in argv


@pytest.mark.parametrize("build", [commands.lookup_squeue, commands.lookup_sacct])
@pytest.mark.parametrize("user", ["", "slurmuser,root"])
def test_a_lookup_for_no_user_or_several_is_refused(build: object, user: str) -> None:
    """`--user=` takes a comma-separated list: a user name holding a comma would widen it."""
    assert callable(build)
    with pytest.raises(BackendError) as raised:
        build("gpuq-0c1d", user)
    assert raised.value.permanent


@pytest.mark.slurm
def test_another_users_job_of_the_same_name_and_directory_is_not_adopted(
    slurm_lab: None,
) -> None:
    """slurmuser2 submits (held) a job named as gpuq's and with its attempt's directory as
    WorkDir. gpuq's submit of that attempt, in doubt, must submit its own job."""
    backend = lab_backend(accounts={"nlp": second_account()})
    other = backend.account_connection("nlp")
    job = request(team="vision", command=("true",))
    name = script.job_name(job.job_id)
    job_dir = script.job_dir(backend.workdir(), job)
    try:
        planted = other.run(
            f"sbatch --parsable --hold -J {shlex.quote(name)} --chdir={shlex.quote(job_dir)}"
            " -o /dev/null --wrap true"
        )
        assert planted.rc == 0, planted.stderr
        # As if an earlier submit of the attempt had made its directory and then died.
        assert backend.connection.make_dir(job_dir)

        result = backend.submit(job)

        assert not result.adopted
        assert slurm_job_id(result.external_id) != planted.stdout.strip()
        mine = backend.connection.run(f"squeue -h -a -t all -u slurmuser --name={name} -o %i")
        assert mine.stdout.split() == [slurm_job_id(result.external_id)]
    finally:
        other.run(f"scancel --name={shlex.quote(name)}")
        backend.connection.run(f"scancel --name={shlex.quote(name)}")
        backend.close()
