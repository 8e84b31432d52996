"""`gpuq update` of several jobs with a value the server refuses whatever the job (an unknown
priority class, a time limit that is no duration): each PATCH is refused at that field in
the same words. The command says so once, with how many more jobs it refused, updates none
of them and exits 1, by filters as by ids. Before, it printed the same 400 once per job.
A refusal that is the job's own (its state's 409, "not a task of an array") is still said
per job, since it tells which jobs. Driven as tests/service/test_cli.py drives it."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.models import Job, JobEvent
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import spec
from tests.service.test_cli import Gpuq, gpuq  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)

STATE_409 = (
    "  a job's priority and time limit can change only while it waits (pending or suspended);"
    " this one is admitted"
)

BAD_VALUES = {
    "priority": (["--priority", "nosuch"], "  priority: unknown priority class 'nosuch' (known: "),
    "time limit": (["--time-limit", "forever"], "  time_limit: 'forever' is not a duration ("),
}


@pytest.mark.parametrize("by", ["filters", "ids"])
@pytest.mark.parametrize("bad", list(BAD_VALUES))
def test_a_refused_value_is_said_once_with_the_count_of_the_other_jobs(
    gpuq: Gpuq, people: dict[str, Any], by: str, bad: str
) -> None:
    jobs = [submit_job(people["alice"], spec(name=f"a{n}")).job for n in range(3)]
    select = ["--mine"] if by == "filters" else [str(j.pk) for j in jobs]
    option, message = BAD_VALUES[bad]

    result = gpuq("alice", "update", *select, *option)

    assert (result.code, result.out) == (1, "")
    first, said, *rest = result.err.splitlines()
    assert first.split(": ")[1] in {str(j.pk) for j in jobs}
    assert first == f"gpuq: {first.split(': ')[1]}: the server answered 400:"
    assert said.startswith(message)
    assert rest == ["gpuq: 2 more jobs not updated, for the same reason"]
    assert not JobEvent.objects.filter(code="updated").exists()


def test_a_refused_value_is_said_once_and_a_refusal_by_a_jobs_state_per_job(
    gpuq: Gpuq, people: dict[str, Any], local_cluster: Any
) -> None:
    started = [submit_job(people["alice"], spec(name=f"s{n}")).job for n in range(2)]
    run_cycle()
    assert {j.state for j in Job.objects.all()} == {Job.State.ADMITTED}
    waiting = [submit_job(people["alice"], spec(name=f"w{n}")).job for n in range(3)]
    named = [str(j.pk) for j in (started[0], *waiting, started[1])]

    result = gpuq("alice", "update", *named, "--priority", "nosuch")

    assert (result.code, result.out) == (1, "")
    lines = result.err.splitlines()
    assert lines[:2] == [f"gpuq: {started[0].pk}: the server answered 409:", STATE_409]
    assert lines[2] == f"gpuq: {waiting[0].pk}: the server answered 400:"
    assert lines[3].startswith("  priority: unknown priority class 'nosuch' (known: ")
    assert lines[4:] == [
        f"gpuq: {started[1].pk}: the server answered 409:",
        STATE_409,
        "gpuq: 2 more jobs not updated, for the same reason",
    ]


def test_a_jobs_own_refusal_at_a_field_the_request_sets_is_said_per_job(
    gpuq: Gpuq, people: dict[str, Any]
) -> None:
    # The same words for both, but about each job: the user is told which ones.
    jobs = [submit_job(people["alice"], spec(name=f"a{n}")).job for n in range(2)]

    result = gpuq("alice", "update", *(str(j.pk) for j in jobs), "--max-running", "2")

    assert (result.code, result.out) == (1, "")
    assert result.err.splitlines() == [
        line
        for job in jobs
        for line in (
            f"gpuq: {job.pk}: the server answered 400:",
            "  array: this job is not a task of an array",
        )
    ]


def test_several_reasons_said_once_each_name_the_job_they_were_said_for(
    gpuq: Gpuq, people: dict[str, Any]
) -> None:
    # Dana, vision's admin, asks email of her team's jobs: neither owner has an address.
    alices = [submit_job(people["alice"], spec(name=f"a{n}")).job for n in range(3)]
    bobs = [submit_job(people["bob"], spec(name=f"b{n}")).job for n in range(2)]

    result = gpuq("dana", "update", "--team", "vision", "--notify", "end")

    assert (result.code, result.out) == (1, "")
    lines = result.err.splitlines()
    # Each reason once, after the job it was said for, in the order the jobs were listed.
    said_for = {lines[1]: lines[0].split(": ")[1], lines[3]: lines[2].split(": ")[1]}
    alice = said_for["  notify: alice has no email address to write to"]
    bob = said_for["  notify: bob has no email address to write to"]
    assert [lines[0], lines[2]] == [
        f"gpuq: {said_for[lines[1]]}: the server answered 400:",
        f"gpuq: {said_for[lines[3]]}: the server answered 400:",
    ]
    assert (alice in {str(j.pk) for j in alices}, bob in {str(j.pk) for j in bobs}) == (True, True)
    assert sorted(lines[4:]) == [
        f"gpuq: 1 more job not updated, for the same reason as {bob}",
        f"gpuq: 2 more jobs not updated, for the same reason as {alice}",
    ]
    assert [j.spec.get("notify") for j in Job.objects.all()] == [None] * 5
