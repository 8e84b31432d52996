"""`gpuq`'s filters given more than once select the jobs matching any of their values, as the
API's repeated list parameters do (tests/service/test_api_filters_and_key_reuse.py), not the
last value only. Driven as tests/service/test_cli.py drives it: main() in process against
the live test server."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

import json
from typing import Any

import pytest

from queue_service.cli import parser
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job, transition
from tests.conftest import spec
from tests.service.test_cli import (  # noqa: F401
    Gpuq,
    gpuq,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_ls_with_a_filter_given_twice_lists_the_jobs_of_either_value(
    gpuq: Gpuq, people: dict[str, Any]
) -> None:
    # argparse kept the last --name and the last --state: the alpha job and the cancelled
    # one silently vanished from the list.
    submit_job(people["alice"], spec(name="alpha"))
    beta = submit_job(people["alice"], spec(name="beta")).job
    submit_job(people["alice"], spec(name="gamma"))
    transition(beta, Job.State.CANCELLED)

    by_name = gpuq("alice", "ls", "--name", "alpha", "--name", "beta", "--json")
    by_state = gpuq("alice", "ls", "--state", "cancelled", "--state", "pending", "--json")
    # Either name, and that state.
    by_both = gpuq(
        "alice", "ls", "--name", "beta", "--name", "alp", "--state", "cancelled", "--json"
    )

    assert by_name.code == 0, by_name.err
    assert sorted(j["name"] for j in json.loads(by_name.out)) == ["alpha", "beta"]
    assert sorted(j["name"] for j in json.loads(by_state.out)) == ["alpha", "beta", "gamma"]
    assert [j["id"] for j in json.loads(by_both.out)] == [str(beta.pk)]


def test_cancel_by_a_name_given_twice_cancels_the_jobs_of_either_name_and_no_other(
    gpuq: Gpuq, people: dict[str, Any]
) -> None:
    # Only the jobs of the last --name were cancelled, exit 0: the user saw nothing wrong.
    jobs = {n: submit_job(people["alice"], spec(name=n)).job for n in ("alpha", "beta", "gamma")}

    result = gpuq("alice", "cancel", "--mine", "--name", "alpha", "--name", "beta")

    assert (result.code, result.err) == (0, "")
    assert sorted(result.out.splitlines()) == sorted(
        f"{jobs[n].pk}  cancelled" for n in ("alpha", "beta")
    )
    states = dict(Job.objects.values_list("name", "state"))
    assert states == {"alpha": "cancelled", "beta": "cancelled", "gamma": "pending"}


def test_an_empty_filter_is_still_no_filter_when_given_twice(
    gpuq: Gpuq, people: dict[str, Any]
) -> None:
    # As one empty --name: cancel refuses it rather than act on everything it sees
    # (tests/service/test_cli_an_empty_filter_value_selects_nothing_to_act_on.py).
    submit_job(people["alice"], spec(name="alpha"))

    result = gpuq("alice", "cancel", "--name", "", "--name", "", "--state", " ")

    assert result.code == 2
    assert "cancel: --name: an empty value selects no job" in result.err
    assert Job.objects.get().state == Job.State.PENDING


@pytest.mark.parametrize("command", ["ls", "queue", "cancel", "suspend", "resume", "update"])
def test_every_command_s_list_filters_given_twice_keep_both_values(command: str) -> None:
    args = parser().parse_args(
        [command, "--team", "vision", "--team", "language, nlp", "--cluster", "a", "--cluster", "b"]
    )
    assert (args.team, args.cluster) == ("vision,language,nlp", "a,b")
    if command != "queue":
        twice = ["--state", "pending", "--state", "suspended", "--kind", "training"]
        twice += ["--kind", "agent", "--name", "a", "--name", "b"]
        more = parser().parse_args([command, *twice])
        assert (more.state, more.kind, more.name) == (
            "pending,suspended",
            "training,agent",
            ["a", "b"],
        )
