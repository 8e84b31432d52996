"""`gpuq update --max-running` with a priority or time limit too: the %N reaches every array
whose tasks the selection names, whatever the tasks' states and however they were named,
once per array; the priority and time limit still go only where they went. Driven as
tests/service/test_cli.py drives it: main() in process against the live test server."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

import re
from typing import Any

import pytest

from queue_service.jobs.models import Job, JobArray, JobEvent
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import spec
from tests.service.test_cli import (  # noqa: F401
    Gpuq,
    gpuq,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _started_array_and_a_waiting_job(people: dict[str, Any]) -> tuple[JobArray, Job]:
    """alice's array of three tasks, all admitted (none waits), and her job that waits."""
    first = submit_job(people["alice"], spec(name="sweep", array="0-2")).job
    run_cycle()
    tasks = Job.objects.filter(array_id=first.array_id)
    assert {task.state for task in tasks} == {Job.State.ADMITTED}
    waiting = submit_job(people["alice"], spec(name="sweep-eval")).job
    return JobArray.objects.get(pk=first.array_id), waiting


@pytest.mark.parametrize(
    "filters",
    [["--name", "sweep"], ["--mine"], ["--team", "vision"], ["--kind", "training"]],
    ids=["name", "mine", "team", "kind"],
)
def test_update_by_filters_sends_max_running_to_an_array_whose_tasks_have_all_started(
    gpuq: Gpuq, people: dict[str, Any], local_cluster: Any, filters: list[str]
) -> None:
    # Only --array selected started tasks to carry the %N: by any other filter, with a
    # priority too, only waiting jobs were selected and this array got nothing, exit 0.
    array, waiting = _started_array_and_a_waiting_job(people)

    result = gpuq("alice", "update", *filters, "--priority", "high", "--max-running", "1")

    assert (result.code, result.err) == (0, "")
    # One line per PATCH, its id left out and the carrier's index as [i]: any task may carry it.
    said = [re.sub(r"\[\d\]", "[i]", line.split("  ", 1)[1]) for line in result.out.splitlines()]
    assert sorted(said) == [
        "sweep-eval  priority high",
        "sweep[i]  array 0-2%1 (at most 1 at once)",
    ]
    assert JobArray.objects.get(pk=array.pk).max_running == 1
    # Once for the array, though three of its tasks were selected; their priority stays.
    assert JobEvent.objects.filter(job__array=array, code="updated").count() == 1
    assert set(Job.objects.filter(array=array).values_list("priority_class__name", flat=True)) == {
        "normal"
    }
    assert Job.objects.get(pk=waiting.pk).priority_class.name == "high"


def test_update_by_ids_of_started_tasks_sends_max_running_and_still_refuses_the_priority(
    gpuq: Gpuq, people: dict[str, Any], local_cluster: Any
) -> None:
    # The %N went with each named task's priority, which the server refuses for a started
    # task: the array the user named got nothing.
    array, _ = _started_array_and_a_waiting_job(people)
    tasks = list(Job.objects.filter(array=array).order_by("array_index"))

    result = gpuq(
        "alice", "update", str(tasks[0].pk), str(tasks[1].pk), "--time-limit", "1h",
        "--max-running", "2",
    )  # fmt: skip

    assert result.code == 1  # the time limit of a started task cannot change
    assert result.out == f"{tasks[0].pk}  sweep[0]  array 0-2%2 (at most 2 at once)\n"
    refused = "the server answered 409:\n  a job's priority and time limit can change only"
    assert result.err.count(refused) == 2
    assert JobArray.objects.get(pk=array.pk).max_running == 2
    assert JobEvent.objects.filter(job__array=array, code="updated").count() == 1


def test_update_by_a_state_of_started_tasks_sends_max_running_once_per_array(
    gpuq: Gpuq, people: dict[str, Any], local_cluster: Any
) -> None:
    # --state admitted names the array's three tasks: each was sent the priority and the %N
    # together, each refused, and the array got nothing.
    array, waiting = _started_array_and_a_waiting_job(people)

    result = gpuq(
        "alice", "update", "--state", "admitted", "--priority", "low", "--max-running", "1"
    )

    assert result.code == 1  # as before, the priority of each started task is refused
    (line,) = result.out.splitlines()
    assert line.endswith("array 0-2%1 (at most 1 at once)")
    assert JobArray.objects.get(pk=array.pk).max_running == 1
    assert JobEvent.objects.filter(job__array=array, code="updated").count() == 1
    assert Job.objects.get(pk=waiting.pk).priority_class.name == "normal"  # not selected


def test_update_by_filters_leaves_the_max_running_to_a_waiting_task_and_not_past_its_refusal(
    gpuq: Gpuq, people: dict[str, Any], local_cluster: Any
) -> None:
    # An array with a waiting task selected sends its %N with that task's change, once; when
    # the server refuses that change, a started task of the array does not send it alone.
    first = submit_job(people["alice"], spec(name="sweep", array="0-2%1")).job
    run_cycle()  # task 0 admitted; the limit holds back 1 and 2
    states = dict(Job.objects.filter(array_id=first.array_id).values_list("array_index", "state"))
    assert states == {0: Job.State.ADMITTED, 1: Job.State.PENDING, 2: Job.State.PENDING}

    changed = gpuq("alice", "update", "--mine", "--priority", "high", "--max-running", "2")
    refused = gpuq("alice", "update", "--mine", "--priority", "urgent", "--max-running", "3")

    assert (changed.code, changed.err) == (0, "")
    limit = ", array 0-2%2 (at most 2 at once)"  # with whichever waiting task comes first
    assert sorted(line.split("  ", 1)[1] for line in changed.out.splitlines()) in (
        [f"sweep[{i}]  priority high{tail}" for i, tail in ((1, limit), (2, ""))],
        [f"sweep[{i}]  priority high{tail}" for i, tail in ((1, ""), (2, limit))],
    )
    assert (refused.code, refused.out) == (1, "")
    # both waiting tasks refused in the same words: said once
    assert refused.err.count("priority: unknown priority class 'urgent'") == 1
    assert refused.err.endswith("gpuq: 1 more job not updated, for the same reason\n")
    assert JobArray.objects.get(pk=first.array_id).max_running == 2
    assert (
        JobEvent.objects.filter(code="updated", details__has_key="array_max_running").count() == 1
    )


def test_update_by_filters_says_no_job_matches_when_the_started_jobs_selected_are_in_no_array(
    gpuq: Gpuq, people: dict[str, Any], local_cluster: Any
) -> None:
    # With --max-running the started jobs are selected too, to carry their arrays' %N: ones in
    # no array have nothing to be sent, and the user is told so as when none matched.
    started = submit_job(people["alice"], spec(name="plain")).job
    run_cycle()
    assert Job.objects.get(pk=started.pk).state == Job.State.ADMITTED

    result = gpuq("alice", "update", "--mine", "--priority", "high", "--max-running", "2")

    assert (result.code, result.out, result.err) == (0, "", "gpuq: no job to update matches\n")
    assert not JobEvent.objects.filter(code="updated").exists()
