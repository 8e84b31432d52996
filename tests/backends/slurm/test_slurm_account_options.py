"""A team's cluster account may name its own Slurm `account` and `qos` (docs/slurm.md): a
team on an account of its own is billed and limited as itself in Slurm's accounting, not
as the cluster's shared account. Checked on the batch script, and on the real lab, whose
second user has an association with the lab's second Slurm account."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from queue_service.backends.base import BackendError
from queue_service.backends.slurm import SlurmBackend, script
from queue_service.backends.slurm.backend import slurm_job_id

from .conftest import lab_backend, request, second_account
from .test_slurm_accounts import backend_for, entry

HOSTILE = ["a b", "nlp\n#SBATCH --uid=0", "x;rm -rf ~", "$(id)", "a'b", ""]


def directives(backend: SlurmBackend, team: str) -> list[str]:
    job = request(team=team, command=("true",))
    text = script.render(job, backend.script_options(team), "/w")
    return [
        line
        for line in text.splitlines()
        if line.startswith(("#SBATCH --account", "#SBATCH --qos"))
    ]


def test_a_teams_account_bills_its_jobs_to_its_own_slurm_account_and_qos() -> None:
    backend = backend_for(
        account="shared",
        qos="normal",
        accounts={"nlp": entry(account="nlp", qos="inference")},
    )
    assert directives(backend, "nlp") == ["#SBATCH --account=nlp", "#SBATCH --qos=inference"]
    assert directives(backend, "vision") == ["#SBATCH --account=shared", "#SBATCH --qos=normal"]


def test_a_teams_account_without_its_own_keeps_the_clusters_slurm_account_and_qos() -> None:
    backend = backend_for(account="shared", qos="normal", accounts={"nlp": entry(qos="low")})
    assert directives(backend, "nlp") == ["#SBATCH --account=shared", "#SBATCH --qos=low"]


@pytest.mark.parametrize("key", ["account", "qos"])
@pytest.mark.parametrize("value", [*HOSTILE, 7, ["nlp"]])
def test_a_hostile_or_malformed_slurm_account_or_qos_is_a_permanent_error_naming_it(
    key: str, value: Any
) -> None:
    with pytest.raises(BackendError) as raised:
        backend_for(accounts={"nlp": entry(**{key: value})})
    assert raised.value.permanent
    assert raised.value.message.startswith(f"accounts.nlp.{key}: "), raised.value.message


def test_on_the_lab_a_teams_job_runs_under_its_own_slurm_account(slurm_lab: None) -> None:
    backend = lab_backend(accounts={"nlp": {**second_account(), "account": "lab-nlp"}})
    try:
        nlp = backend.submit(request(team="nlp", user="charlie", command=("sleep", "30")))
        vision = backend.submit(request(team="vision", command=("sleep", "30")))
        accounts = {
            team: conn.run(f"squeue -h -o %a -j {slurm_job_id(external_id)}").stdout.strip()
            for team, conn, external_id in (
                ("nlp", backend.account_connection("nlp"), nlp.external_id),
                ("vision", backend.connection, vision.external_id),
            )
        }
        assert accounts == {"nlp": "lab-nlp", "vision": "lab"}
    finally:
        backend.account_connection("nlp").run("scancel -u $(id -un)")
        backend.connection.run("scancel -u $(id -un)")
        backend.close()


def test_on_the_lab_a_slurm_account_the_user_has_no_association_with_is_refused(
    slurm_lab: None,
) -> None:
    """The cluster's user has no association with the second account: Slurm refuses the job
    (AccountingStorageEnforce=associations), a permanent error, so the setting reached sbatch."""
    backend = lab_backend(accounts={"nlp": {**second_account(), "account": "lab-nlp"}})
    settings = backend.settings
    assert settings.accounts["nlp"].user != settings.user
    wrong = lab_backend(account="lab-nlp")
    try:
        with pytest.raises(BackendError) as raised:
            wrong.submit(request(team="vision", name=f"x-{uuid.uuid4().hex[:6]}"))
        assert raised.value.permanent, raised.value.message
    finally:
        wrong.close()
        backend.close()
