"""`--user NAME` (as squeue's and scancel's `-u`) on `gpuq ls`, `cancel`, `suspend`, `resume`
and `update`: only jobs that user submitted, as the API's `user` filter (comma-separated or
given again; `me` is you, as `--mine`). There was no such option: a team admin could not
cancel one member's jobs without naming each."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

import json
from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.conftest import spec
from tests.service.test_cli import Gpuq, gpuq  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


def _names(run: Any) -> list[str]:
    assert run.code == 0, run.err
    return sorted(j["name"] for j in json.loads(run.out))


def test_ls_user_lists_the_jobs_of_those_users(gpuq: Gpuq, people: dict[str, Any]) -> None:
    for who in ("alice", "bob", "dana"):
        submit_job(people[who], spec(name=f"{who}-job"))

    assert _names(gpuq("alice", "ls", "--user", "bob", "--json")) == ["bob-job"]
    assert _names(gpuq("alice", "ls", "--user", "bob,dana", "--json")) == ["bob-job", "dana-job"]
    assert _names(gpuq("alice", "ls", "--user", "bob", "--user", "me", "--json")) == [
        "alice-job",
        "bob-job",
    ]
    assert _names(gpuq("alice", "ls", "--user", "bob", "--mine", "--json")) == [
        "alice-job",
        "bob-job",
    ]
    assert _names(gpuq("alice", "ls", "--user", "nobody", "--json")) == []
    table = gpuq("alice", "ls", "--user", "bob").out.splitlines()
    assert [row.split()[3] for row in table[1:]] == ["bob"]


def test_a_team_admin_cancels_one_members_jobs_by_user(gpuq: Gpuq, people: dict[str, Any]) -> None:
    alices = [submit_job(people["alice"], spec(name=f"a{n}")).job for n in range(2)]
    bobs = submit_job(people["bob"], spec(name="b")).job

    result = gpuq("dana", "cancel", "--user", "alice")

    assert (result.code, result.err) == (0, "")
    assert sorted(result.out.splitlines()) == sorted(f"{j.pk}  cancelled" for j in alices)
    bobs.refresh_from_db()
    assert bobs.state == S.PENDING


@pytest.mark.parametrize(
    ("verb", "argv", "held"),
    [
        ("suspend", (), False),
        ("resume", (), True),
        ("update", ("--priority", "low"), False),
    ],
)
def test_suspend_resume_and_update_select_by_user(
    gpuq: Gpuq, people: dict[str, Any], verb: str, argv: tuple[str, ...], held: bool
) -> None:
    alices = submit_job(people["alice"], spec(name="a", hold=held)).job
    bobs = submit_job(people["bob"], spec(name="b", hold=held)).job

    result = gpuq("dana", verb, "--user", "bob", *argv)

    assert (result.code, result.err) == (0, "")
    assert [line.split()[0] for line in result.out.splitlines()] == [str(bobs.pk)]
    before = (alices.state, alices.priority_class_id)
    alices.refresh_from_db()
    assert (alices.state, alices.priority_class_id) == before
