"""`gpuq update --notify end` for several jobs of an account without an email address: the
server refuses each PATCH at `notify` in the same words, for the account, not for the job.
The command says so once, updates none of them, and exits 1 (the server said no), by filters
as by ids. Before, it printed the same 400 once per job. A team admin's selection of several
owners' jobs still updates those of owners who have an address."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.conftest import spec
from tests.service.test_cli import Gpuq, gpuq  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)

NO_ADDRESS = "notify: your account has no email address to write to: set one on your account page"


@pytest.mark.parametrize("by", ["filters", "ids"])
def test_an_accounts_notify_refusal_is_said_once_and_no_job_is_updated(
    gpuq: Gpuq, people: dict[str, Any], by: str
) -> None:
    jobs = [submit_job(people["alice"], spec(name=f"a{n}")).job for n in range(3)]
    select = ["--mine"] if by == "filters" else [str(j.pk) for j in jobs]

    result = gpuq("alice", "update", *select, "--notify", "end")

    assert (result.code, result.out) == (1, "")
    first, *rest = result.err.splitlines()
    assert first.split(": ")[1] in {str(j.pk) for j in jobs}
    assert first == f"gpuq: {first.split(': ')[1]}: the server answered 400:"
    assert rest == [f"  {NO_ADDRESS}", "gpuq: 2 more jobs not updated, for the same reason"]
    assert [j.spec.get("notify") for j in Job.objects.all()] == [None] * 3


def test_a_team_admin_updates_the_jobs_of_owners_with_an_address_and_says_the_rest_once(
    gpuq: Gpuq, people: dict[str, Any]
) -> None:
    people["bob"].email = "bob@example.org"
    people["bob"].save()
    alices = [submit_job(people["alice"], spec(name=f"a{n}")).job for n in range(3)]
    bobs = submit_job(people["bob"], spec(name="b")).job

    result = gpuq("dana", "update", "--team", "vision", "--notify", "end")

    assert (result.code, result.out) == (1, f"{bobs.pk}  b  email on end\n")
    first, *rest = result.err.splitlines()
    assert rest == [
        "  notify: alice has no email address to write to",
        "gpuq: 2 more jobs not updated, for the same reason",
    ]
    stored = {j.name: j.spec.get("notify") for j in Job.objects.all()}
    assert stored == {"a0": None, "a1": None, "a2": None, "b": ["end"]}
    assert first == f"gpuq: {first.split(': ')[1]}: the server answered 400:"
    assert first.split(": ")[1] in {str(j.pk) for j in alices}
