"""`gpuq`: a token file's byte order mark, filter lists with spaces, and `update
--max-running` reaching each array once and only arrays. Driven as tests/service/test_cli.py
drives it: main() in process against the live test server, with real tokens."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

import codecs
import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from queue_service.cli import main, parser
from queue_service.jobs.models import Job, JobArray
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from queue_service.tenancy.services import create_token
from tests.conftest import spec
from tests.service.test_cli import (  # noqa: F401
    Gpuq,
    array_tasks,
    gpuq,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_token_file_saved_with_a_byte_order_mark_is_read_as_the_service_reads_its_secrets(
    live_server: Any, people: dict[str, Any], tmp_path: Path
) -> None:
    # As the service reads its own VAR_FILE secrets: a Windows editor's byte order mark is no
    # part of the token, and was refused as pasted junk.
    _, token = create_token(people["alice"], "file")
    path = tmp_path / "token"
    path.write_bytes(codecs.BOM_UTF8 + token.encode() + b"\r\n")
    out, err = io.StringIO(), io.StringIO()
    env = {"GPUQ_URL": live_server.url, "GPUQ_TOKEN_FILE": str(path)}
    with contextlib.redirect_stderr(err):
        try:
            code = main(["me"], environ=env, out=out)
        except SystemExit as exc:
            code = int(exc.code or 0)
    assert code == 0, err.getvalue()
    assert out.getvalue().startswith("user:   alice\n")


def test_a_filter_list_with_spaces_after_the_commas_lists_every_value_not_the_first_only(
    gpuq: Gpuq, people: dict[str, Any]
) -> None:
    # As --state: sent as typed, " low" matched nothing, and the listing silently left out
    # every value after the first.
    high = submit_job(people["alice"], spec(name="h", priority="high")).job
    low = submit_job(people["alice"], spec(name="l", priority="low")).job

    listed = gpuq("alice", "ls", "--priority", "high, low", "--json")

    assert listed.code == 0, listed.err
    assert sorted(j["id"] for j in json.loads(listed.out)) == sorted([str(high.pk), str(low.pk)])
    for argv in (["queue"], ["cancel"], ["suspend"], ["resume"], ["update"]):
        args = parser().parse_args([*argv, "--team", "vision, nlp", "--cluster", "a, b"])
        assert (args.team, args.cluster) == ("vision,nlp", "a,b")
    assert parser().parse_args(["cancel", "--priority", "high, low"]).priority == "high,low"


def test_update_max_running_by_filters_changes_the_arrays_and_leaves_other_jobs_alone(
    gpuq: Gpuq, people: dict[str, Any]
) -> None:
    # With only --max-running the filters select "all but ended ones": a job in no array
    # among them was sent the array change too, a 400 each and exit 1.
    first = submit_job(people["alice"], spec(name="sweep", array="0-3%1")).job
    submit_job(people["alice"], spec(name="plain"))

    result = gpuq("alice", "update", "--mine", "--max-running", "2")

    assert JobArray.objects.get(pk=first.array_id).max_running == 2
    assert (result.code, result.err) == (0, "")
    (line,) = result.out.splitlines()
    assert line.endswith("array 0-3%2 (at most 2 at once)")


def test_update_max_running_reaches_the_array_when_its_first_named_task_has_started(
    gpuq: Gpuq, people: dict[str, Any], local_cluster: Any
) -> None:
    # The array was marked as sent before its PATCH succeeded: when that PATCH was refused
    # (for the priority of a started task), the next task was sent the priority alone and the
    # new limit was lost without a word.
    first = submit_job(people["alice"], spec(name="sweep", array="0-3%1")).job
    run_cycle()  # task 0 admitted; the limit holds back the rest
    tasks = array_tasks(str(first.pk))
    assert (tasks[0].state, tasks[1].state) == (Job.State.ADMITTED, Job.State.PENDING)

    result = gpuq(
        "alice",
        "update",
        str(tasks[0].pk),
        str(tasks[1].pk),
        "--priority",
        "high",
        "--max-running",
        "3",
    )

    assert result.code == 1  # task 0's priority cannot change: it has started
    assert JobArray.objects.get(pk=first.array_id).max_running == 3
    assert (
        result.out == f"{tasks[1].pk}  sweep[1]  priority high, array 0-3%3 (at most 3 at once)\n"
    )


def test_update_by_array_with_no_task_waiting_still_sends_its_max_running(
    gpuq: Gpuq, people: dict[str, Any], local_cluster: Any
) -> None:
    # "an array's %N, at any time": with a priority too, --array selected the waiting tasks
    # only, so with none waiting the %N was never sent ("no job to update matches", exit 0).
    first = submit_job(people["alice"], spec(name="sweep", array="0-1")).job
    run_cycle()  # both tasks admitted: none waits
    tasks = array_tasks(str(first.pk))
    assert {task.state for task in tasks} == {Job.State.ADMITTED}
    array = str(first.array_id)

    result = gpuq("alice", "update", "--array", array, "--priority", "high", "--max-running", "1")

    assert (result.code, result.err) == (0, "")
    (line,) = result.out.splitlines()  # the started task carries the %N alone
    assert line.endswith("array 0-1%1 (at most 1 at once)")
    assert JobArray.objects.get(pk=array).max_running == 1
    assert set(Job.objects.values_list("priority_class__name", flat=True)) == {"normal"}
