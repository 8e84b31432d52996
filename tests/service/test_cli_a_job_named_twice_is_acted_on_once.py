"""`gpuq cancel ID ID` (or the same id written another way: upper case, no dashes) acts on the
job once and reports it once, as `scancel 5 5` does. Before, the second cancel of a pending
job was the server's 409 ("already ended") and the command exited 1; `update ID ID` sent the
change twice and printed the job twice."""

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


def _spellings(job: Job) -> tuple[str, str, str]:
    ident = str(job.pk)
    return ident, ident.upper(), job.pk.hex


@pytest.mark.parametrize(("verb", "done"), [("cancel", "cancelled"), ("suspend", "suspended")])
def test_a_job_named_twice_is_cancelled_or_suspended_once(
    gpuq: Gpuq, people: dict[str, Any], verb: str, done: str
) -> None:
    job = submit_job(people["alice"], spec(name="one")).job
    other = submit_job(people["alice"], spec(name="two")).job

    result = gpuq("alice", verb, *_spellings(job), str(other.pk), str(job.pk))

    assert (result.code, result.err) == (0, "")
    assert result.out.splitlines() == [f"{job.pk}  {done}", f"{other.pk}  {done}"]
    assert JobEvent.objects.filter(job=job, to_state=done).count() == 1


def test_a_job_named_twice_is_updated_once(gpuq: Gpuq, people: dict[str, Any]) -> None:
    job = submit_job(people["alice"], spec(name="one")).job

    result = gpuq("alice", "update", *_spellings(job), "--priority", "high", "--json")

    assert (result.code, result.err) == (0, "")
    assert [j["id"] for j in json.loads(result.out)] == [str(job.pk)]
    assert JobEvent.objects.filter(job=job, code="updated").count() == 1


def test_an_arrays_task_named_twice_carries_its_limit_once(
    gpuq: Gpuq, people: dict[str, Any]
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-3%1")).job

    result = gpuq("alice", "update", str(first.pk), str(first.pk), "--max-running", "2")

    assert (result.code, result.err) == (0, "")
    assert result.out == f"{first.pk}  sweep[0]  array 0-3%2 (at most 2 at once)\n"
