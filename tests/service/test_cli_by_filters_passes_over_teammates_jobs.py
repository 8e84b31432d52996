"""A teammate (same team, neither the owner nor a team admin) may see a teammate's jobs but not
change them. Named by id, the command fails (exit 1) with the API's own words for the 403.
Selected by filters (`gpuq cancel --team vision`), the teammate's jobs are passed over, as
`scancel` with filters leaves others' jobs, with one line on stderr saying how many and why:
the command acts on the user's own jobs and exits 0. Before, every teammate job was a 403
printed as a failure, and the command exited 1."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

import json
from typing import Any

import pytest

from queue_service.jobs.models import Job, JobEvent
from queue_service.jobs.services import submit_job
from tests.conftest import spec
from tests.service.test_cli import Gpuq, gpuq  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


@pytest.mark.parametrize(
    ("verb", "done", "argv"),
    [
        ("cancel", "cancelled", ()),
        ("suspend", "suspended", ()),
        ("update", "priority high", ("--priority", "high")),
    ],
)
def test_by_filters_a_teammates_jobs_are_passed_over_and_the_command_succeeds(
    gpuq: Gpuq, people: dict[str, Any], verb: str, done: str, argv: tuple[str, ...]
) -> None:
    alices = [submit_job(people["alice"], spec(name=f"a{n}")).job for n in range(2)]
    bobs = submit_job(people["bob"], spec(name="b")).job

    result = gpuq("bob", verb, "--team", "vision", *argv)

    assert result.code == 0, result.err
    line = f"{bobs.pk}  b  {done}" if verb == "update" else f"{bobs.pk}  {done}"
    assert result.out == line + "\n"
    assert result.err == (
        f"gpuq: passed over 2 jobs you may not {verb}:"
        f" only the job's owner or a team admin can {verb} it\n"
    )
    for job in alices:
        job.refresh_from_db()
        assert (job.state, job.priority_class.name) == (S.PENDING, "normal")
    assert not JobEvent.objects.filter(job__in=alices).exclude(code="submitted").exists()


def test_resume_by_filters_passes_over_a_teammates_suspended_job(
    gpuq: Gpuq, people: dict[str, Any]
) -> None:
    alices = submit_job(people["alice"], spec(name="a", hold=True)).job
    bobs = submit_job(people["bob"], spec(name="b", hold=True)).job

    result = gpuq("bob", "resume", "--team", "vision", "--json")

    assert result.code == 0, result.err
    assert [j["id"] for j in json.loads(result.out)] == [str(bobs.pk)]
    assert result.err == (
        "gpuq: passed over 1 job you may not resume:"
        " only the job's owner or a team admin can resume it\n"
    )
    alices.refresh_from_db()
    assert alices.state == S.SUSPENDED


def test_by_filters_only_others_jobs_selected_does_nothing_and_says_so(
    gpuq: Gpuq, people: dict[str, Any]
) -> None:
    alices = submit_job(people["alice"], spec(name="a")).job

    result = gpuq("bob", "cancel", "--name", "a", "--team", "vision")

    assert (result.code, result.out) == (0, "")
    assert result.err == (
        "gpuq: passed over 1 job you may not cancel:"
        " only the job's owner or a team admin can cancel it\n"
    )
    alices.refresh_from_db()
    assert alices.state == S.PENDING


def test_by_filters_a_teammates_array_is_asked_once_for_its_limit(
    gpuq: Gpuq, people: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-3%1")).job

    result = gpuq("bob", "update", "--team", "vision", "--max-running", "4")

    assert (result.code, result.out) == (0, "")
    assert result.err == (
        "gpuq: passed over 4 jobs you may not update:"
        " only the job's owner or a team admin can update it\n"
    )
    first.array.refresh_from_db()
    assert first.array.max_running == 1
    # Its tasks share their owner: the first refusal stands for the others.
    refused = [r for r in caplog.records if r.getMessage().startswith("Forbidden: ")]
    assert len(refused) == 1


@pytest.mark.parametrize("verb", ["cancel", "suspend", "update"])
def test_named_by_id_a_teammates_job_is_refused_in_the_apis_words(
    gpuq: Gpuq, people: dict[str, Any], client_for: Any, verb: str
) -> None:
    job = submit_job(people["alice"], spec(name="a")).job
    argv = ("--priority", "high") if verb == "update" else ()
    api = client_for("bob")
    if verb == "update":
        answer = api.patch(f"/api/v1/jobs/{job.pk}/", {"priority": "high"}, format="json")
    else:
        answer = api.post(f"/api/v1/jobs/{job.pk}/{verb}/")

    result = gpuq("bob", verb, str(job.pk), *argv)

    assert answer.status_code == 403
    said = answer.json()["detail"]
    assert said == f"only the job's owner or a team admin can {verb} it"
    assert (result.code, result.out) == (1, "")
    assert result.err == f"gpuq: {job.pk}: the server answered 403:\n  {said}\n"
    job.refresh_from_db()
    assert job.state == S.PENDING
