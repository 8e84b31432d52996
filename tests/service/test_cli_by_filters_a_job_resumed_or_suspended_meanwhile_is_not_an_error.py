"""`gpuq resume` (and `suspend`) by filters lists the jobs, then acts on each: one that another
user or another terminal resumed (suspended) between the two is what was asked for, so it is
reported as such and is no failure of the command, as one that ended meanwhile is. The server
refuses to resume a job that is no longer suspended (409, "only a suspended job can be
resumed; this one is pending"): before, `gpuq resume` printed that 409 and exited 1. A suspend
of a job already suspended is the server's 200, the job as it is. Named by its id, a job not
suspended is still the server's to refuse: the user asked for that one."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import resume_job, submit_job, suspend_job
from tests.conftest import spec
from tests.service.test_cli import Gpuq, gpuq  # noqa: F401 (a fixture)
from tests.service.test_cli_by_filters_a_job_that_ended_meanwhile_is_not_an_error import (
    ending_after_the_list,
)

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


@pytest.mark.parametrize(
    ("verb", "held", "done", "meanwhile", "by"),
    [
        # Another terminal of the owner's, or the team's admin: the same race.
        ("resume", True, "pending", "pending (it was resumed already)", "alice"),
        ("resume", True, "pending", "pending (it was resumed already)", "dana"),
        ("suspend", False, "suspended", "suspended", "alice"),
        ("suspend", False, "suspended", "suspended", "dana"),
    ],
)
def test_a_job_resumed_or_suspended_between_the_list_and_the_act_is_what_was_asked(
    gpuq: Gpuq,
    people: Any,
    live_server: Any,
    verb: str,
    held: bool,
    done: str,
    meanwhile: str,
    by: str,
) -> None:
    jobs = [submit_job(people["alice"], spec(name=f"run-{n}", hold=held)).job for n in range(3)]
    raced = jobs[1]
    act = resume_job if verb == "resume" else suspend_job

    def race() -> None:
        act(people[by], Job.objects.get(pk=raced.pk))

    with ending_after_the_list(live_server.url, race) as url:
        result = gpuq("alice", verb, "--name", "run-", url=url)

    assert (result.code, result.err) == (0, "")
    assert sorted(result.out.splitlines()) == sorted(
        [f"{j.pk}  {done}" for j in jobs if j.pk != raced.pk] + [f"{raced.pk}  {meanwhile}"]
    )
    for job in jobs:
        job.refresh_from_db()
        assert job.state == (S.PENDING if verb == "resume" else S.SUSPENDED)


def test_what_the_server_answers_to_resume_a_job_resumed_already(
    people: Any, client_for: Any
) -> None:
    job = submit_job(people["alice"], spec(name="one", hold=True)).job
    resume_job(people["alice"], job)

    answer = client_for("alice").post(f"/api/v1/jobs/{job.pk}/resume/")

    assert answer.status_code == 409
    assert answer.json() == {"detail": "only a suspended job can be resumed; this one is pending"}


def test_resume_json_by_filters_holds_the_job_resumed_meanwhile(
    gpuq: Gpuq, people: Any, live_server: Any
) -> None:
    job = submit_job(people["alice"], spec(name="one", hold=True)).job

    with ending_after_the_list(live_server.url, lambda: resume_job(people["dana"], job)) as url:
        result = gpuq("alice", "resume", "--name", "one", "--json", url=url)

    assert (result.code, result.err) == (0, "")
    assert '"state": "pending"' in result.out and str(job.pk) in result.out


def test_a_job_named_by_its_id_that_is_not_suspended_is_still_refused(
    gpuq: Gpuq, people: Any
) -> None:
    job = submit_job(people["alice"], spec(name="one", hold=True)).job
    resume_job(people["alice"], job)

    result = gpuq("alice", "resume", str(job.pk))

    assert (result.code, result.out) == (1, "")
    assert "409" in result.err and "only a suspended job can be resumed" in result.err


def test_resume_by_filters_of_a_job_listed_as_pending_is_still_refused(
    gpuq: Gpuq, people: Any
) -> None:
    # Asked by --state to resume waiting jobs that were never suspended: the server's 409
    # stands (nothing was resumed meanwhile).
    job = submit_job(people["alice"], spec(name="one")).job

    result = gpuq("alice", "resume", "--name", "one", "--state", "pending")

    assert (result.code, result.out) == (1, "")
    assert f"gpuq: {job.pk}: the server answered 409" in result.err
