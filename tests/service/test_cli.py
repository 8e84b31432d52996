"""The `gpuq` command against the real service: pytest-django's live server over HTTP (on
the test PostgreSQL), real tokens, and the embedded job loop running the local backend.
Alice and Bob are teammates in vision, Charlie is in language."""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import re
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from queue_service.cli import ENDED, clean, index_ranges, main
from queue_service.jobs.dispatch import run_once
from queue_service.jobs.models import Job, JobArray, JobEvent
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from queue_service.tenancy.models import PendingEmail
from queue_service.tenancy.services import create_token
from tests.conftest import spec
from tests.service.test_a_preview_says_what_a_submit_would_do_first import (  # noqa: F401
    RELAYOUT,
    idle_mig_gpu,
)

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class Run:
    code: int
    out: str
    err: str


Gpuq = Callable[..., Run]


@pytest.fixture
def gpuq(live_server: Any, people: dict[str, Any]) -> Gpuq:
    """`gpuq ARGS...` as one of the people, against the live server; stdout is written as
    bytes (the `logs` path) and read back as UTF-8."""
    tokens: dict[str, str] = {}

    def run(who: str, *argv: str, url: str | None = None) -> Run:
        if who not in tokens:
            tokens[who] = create_token(people[who], "cli")[1]
        raw = io.BytesIO()
        out = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
        err = io.StringIO()
        env = {"GPUQ_URL": url or live_server.url, "GPUQ_TOKEN": tokens[who]}
        with contextlib.redirect_stderr(err):
            try:
                code = main(list(argv), environ=env, out=out)
            except SystemExit as exc:  # argparse's usage errors
                code = int(exc.code or 0)
        out.flush()
        return Run(code, raw.getvalue().decode(), err.getvalue())

    return run


@pytest.fixture
def job_file(tmp_path: Path) -> Callable[[str], str]:
    def write(text: str) -> str:
        path = tmp_path / f"job-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(text)
        return str(path)

    return write


def wait_ended(job_id: str) -> Job:
    deadline = time.monotonic() + 30
    job = Job.objects.get(pk=job_id)
    while not job.is_terminal:
        assert time.monotonic() < deadline, f"job stuck in {job.state}"
        time.sleep(0.1)
        job.refresh_from_db()
    return job


def fields(run: Run) -> dict[str, str]:
    """`gpuq show`'s "label:  value" lines, before its events."""
    head = run.out.split("\nevents:\n")[0]
    return {k: v.strip() for k, v in (line.split(":", 1) for line in head.splitlines())}


def submitted_id(run: Run) -> str:
    assert run.code == 0, run.err
    return run.out.split()[0]


def test_a_job_file_submitted_runs_and_its_output_follows_to_the_end(
    gpuq: Gpuq, job_file: Any, job_loop: Any
) -> None:
    path = job_file(
        "name: hello\n"
        "gpus_per_node: 2\n"
        'command: ["/bin/sh", "-c", "echo hello from GPUs $CUDA_VISIBLE_DEVICES; sleep 1;'
        ' echo done"]\n'
    )
    submit = gpuq("alice", "submit", path)
    job_id = submitted_id(submit)
    assert submit.out.split()[1:] == ["hello", "pending"]

    logs = gpuq("alice", "logs", "-f", job_id)

    assert logs.code == 0, logs.err
    assert logs.out == "hello from GPUs 0,1\ndone\n"
    # The log ends when the process does; gpuq's next sync records how the job ended.
    assert wait_ended(job_id).state == Job.State.SUCCEEDED
    shown = gpuq("alice", "show", job_id)
    about = fields(shown)
    assert (about["state"], about["exit code"], about["placement"]) == (
        "succeeded",
        "0",
        "n1 GPUs 0,1",
    )
    assert [line.split()[3] for line in shown.out.splitlines() if line.startswith("  ")] == [
        "pending",
        "admitted",
        "dispatching",
        "queued",
        "running",
        "succeeded",
    ]


def test_submit_follow_prints_the_output_and_exits_with_the_job_s_status(
    gpuq: Gpuq, job_file: Any, job_loop: Any
) -> None:
    failing = gpuq(
        "alice", "submit", "-f", job_file('name: seven\ncommand: "echo going; exit 7"\n')
    )
    job_id, name, state = failing.out.splitlines()[0].split()
    assert (name, state, failing.out.splitlines()[1:]) == ("seven", "pending", ["going"])
    assert failing.code == 7
    assert failing.err == f"gpuq: job {job_id} ended failed: exit code 7\n"
    both_streams = gpuq(
        "alice", "submit", "-f", job_file('name: e\ncommand: "echo out; echo err >&2; exit 3"\n')
    )
    assert (both_streams.code, both_streams.out.splitlines()[1:]) == (3, ["out"])
    assert both_streams.err.startswith("err\ngpuq: job ")
    assert both_streams.err.endswith(" ended failed: exit code 3\n")
    ok = gpuq("alice", "submit", "--follow", job_file('name: ok\ncommand: "echo fine"\n'))
    assert (ok.code, ok.out.splitlines()[1:], ok.err) == (0, ["fine"], "")
    missing = gpuq("alice", "submit", "-f", job_file('name: m\ncommand: ["/no/such/program"]\n'))
    assert (
        missing.code == 127
    )  # the local backend's exit code for a program not found, as a shell's
    assert missing.err.endswith(": could not start: No such file or directory, exit code 127\n"), (
        missing.err
    )
    both = gpuq("alice", "submit", "-f", "--json", job_file("name: x\ncommand: [/bin/true]\n"))
    assert both.code == 2 and "not with --json or --dry-run" in both.err


def test_resubmit_runs_a_copy_of_a_job_as_you(gpuq: Gpuq, job_file: Any, job_loop: Any) -> None:
    first = gpuq("alice", "submit", "-f", job_file('name: twice\ncommand: "echo hello again"\n'))
    assert first.code == 0, first.err
    original = first.out.split()[0]

    again = gpuq("bob", "resubmit", "-f", original)

    copy_id, name, state = again.out.splitlines()[0].split()
    assert (again.code, name, state) == (0, "twice", "pending")
    assert again.out.splitlines()[1:] == ["hello again"]
    copy = Job.objects.get(pk=copy_id)
    assert (copy.user.username, copy.state, copy.spec) == (
        "bob",
        Job.State.SUCCEEDED,
        Job.objects.get(pk=original).spec,
    )
    assert copy.events.first().message == f"submitted by bob as a copy of job {original}"
    outsider = gpuq("charlie", "resubmit", original)
    assert (outsider.code, outsider.out) == (1, "")
    assert "not found" in outsider.err.lower()
    assert gpuq("alice", "resubmit", "-f", "--json", original).code == 2
    assert gpuq("alice", "resubmit", "../jobs").code == 2
    assert Job.objects.count() == 2


def test_a_bad_job_file_gets_each_field_s_message_and_exit_1(
    gpuq: Gpuq, job_file: Any, tmp_path: Path
) -> None:
    bad = gpuq("alice", "submit", job_file("name: x\ngpus_per_node: -1\nretries: {max: 99}\n"))
    assert bad.code == 1 and bad.out == ""
    assert "the server answered 400:" in bad.err
    assert "  command: This field is required." in bad.err
    assert "  gpus_per_node: " in bad.err
    assert "  retries.max: " in bad.err
    syntax = gpuq("alice", "submit", job_file("name: x\ncommand: [unclosed\n"))
    assert syntax.code == 1 and "line 3" in syntax.err
    missing = gpuq("alice", "submit", "/nonexistent/job.yaml")
    assert missing.code == 1 and "cannot read /nonexistent/job.yaml" in missing.err
    binary = tmp_path / "job.bin"
    binary.write_bytes(b"name: \xff\xfe\x00\x81\n")
    not_text = gpuq("alice", "submit", str(binary))
    assert not_text.code == 1 and "the server answered 400:" in not_text.err
    huge = tmp_path / "huge.yaml"
    huge.write_text("name: x\ncommand: [/bin/true]\n# " + "x" * 2_700_000 + "\n")
    too_big = gpuq("alice", "submit", str(huge))
    assert too_big.code == 1
    assert "the server answered 413:\n  the body is larger than 2,621,440 bytes" in too_big.err
    directory = gpuq("alice", "submit", str(tmp_path))
    assert directory.code == 1 and f"cannot read {tmp_path}: Is a directory" in directory.err
    assert not Job.objects.exists()


def test_a_json_job_file_indented_with_tabs_is_sent_as_json(gpuq: Gpuq, job_file: Any) -> None:
    # YAML, which reads most JSON, refuses tabs as indentation.
    tabbed = job_file('{\n\t"name": "tabs",\n\t"command": ["/bin/true"]\n}\n')
    assert gpuq("alice", "submit", tabbed).out.split()[1:] == ["tabs", "pending"]
    flow = job_file("{name: flow, command: [/bin/true]}\n")  # YAML, not JSON
    assert gpuq("alice", "submit", flow).out.split()[1:] == ["flow", "pending"]


def test_dry_run_says_why_a_job_would_wait_and_stores_nothing(
    gpuq: Gpuq, job_file: Any, local_cluster: Any
) -> None:
    fits = gpuq("alice", "submit", "--dry-run", job_file("name: a\ncommand: [/bin/true]\n"))
    assert (fits.code, fits.out) == (0, "would start now\n")
    too_big = gpuq(
        "alice",
        "submit",
        "--dry-run",
        job_file("name: b\nnodes: 3\ngpus_per_node: 4\ncommand: [/bin/true]\n"),
    )
    assert too_big.code == 0 and too_big.out.startswith("would wait: needs 3 nodes x 4")
    assert not Job.objects.exists()


@pytest.mark.usefixtures("idle_mig_gpu")
def test_dry_run_says_a_slice_job_would_start_once_its_gpu_is_re_laid_out_for_it(
    gpuq: Gpuq, job_file: Any
) -> None:
    # Not "would wait: GPU 0 ... is being re-laid out": the preview lays nothing out.
    body = "name: serve\nkind: agent\nmig_profile: 1g.10gb\ncommand: [serve]\n"
    dry = gpuq("alice", "submit", "--dry-run", job_file(body))
    assert (dry.code, dry.out) == (0, f"{RELAYOUT}\n")
    assert not Job.objects.exists()


def test_the_same_idempotency_key_submits_once(gpuq: Gpuq, job_file: Any) -> None:
    path = job_file("name: once\ncommand: [/bin/true]\n")
    first = gpuq("alice", "submit", "--idempotency-key", "k-1", path)
    again = gpuq("alice", "submit", "--idempotency-key", "k-1", path)
    assert submitted_id(first) == submitted_id(again)
    assert Job.objects.count() == 1


def test_queue_and_show_say_why_a_job_waits(gpuq: Gpuq, job_file: Any, local_cluster: Any) -> None:
    big = submitted_id(
        gpuq(
            "alice",
            "submit",
            job_file("name: big\nnodes: 2\ngpus_per_node: 4\ncommand: [/bin/true]\n"),
        )
    )
    small = submitted_id(
        gpuq("bob", "submit", job_file("name: small\ngpus_per_node: 4\ncommand: [/bin/true]\n"))
    )
    run_cycle()  # admits big on all 8 GPUs; small waits

    queue = gpuq("charlie", "queue")  # an outsider sees no vision job
    assert queue.out.splitlines() == [
        "POS  ID  NAME  TEAM  PRIORITY  GPUS  WAITED  EST. START  REASON"
    ]
    queue = gpuq("alice", "queue")
    _, row = queue.out.splitlines()
    assert row.split()[:6] == ["1", small, "small", "vision", "normal", "4"]
    assert "needs 1 node x 4 free GPUs; the best now is 0 nodes" in row
    about = fields(gpuq("alice", "show", small))
    assert about["state"] == "pending"
    assert about["why"] == "needs 1 node x 4 free GPUs; the best now is 0 nodes"
    assert about["position"] == "1"
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", about["estimated start"])

    listed = gpuq("bob", "ls", "--state", "admitted").out.splitlines()
    assert [line.split()[:5] for line in listed[1:]] == [
        [big, "big", "vision", "alice", "admitted"]
    ]
    mine = gpuq("bob", "ls", "--mine", "--json")
    assert [j["id"] for j in json.loads(mine.out)] == [small]


def test_ls_follows_the_api_pages_and_queue_says_how_many_it_left_out(
    gpuq: Gpuq, people: dict[str, Any]
) -> None:
    # More jobs than one API page (500) and than the queue's list (1,000); none considered.
    ids = [submit_job(people["bob"], spec(name=f"j{n}")).job.pk for n in range(1002)]
    newest_first = [str(pk) for pk in reversed(ids)]

    listed = gpuq("alice", "ls", "--all", "--json")
    assert [j["id"] for j in json.loads(listed.out)] == newest_first
    some = gpuq("alice", "ls", "--limit", "700")
    rows = some.out.splitlines()
    assert [r.split()[0] for r in rows[1:-1]] == newest_first[:700]
    assert rows[-1] == "(the 700 newest shown; --limit N or --all for more)"
    assert gpuq("alice", "ls", "--limit", "1002").out.splitlines()[-1].split()[0] == str(ids[0])
    assert gpuq("alice", "ls", "--limit", "0").code == 2
    assert gpuq("alice", "ls", "--limit", "5", "--all").code == 2

    queue = gpuq("alice", "queue").out.splitlines()
    assert len(queue) == 1 + 1000 + 1
    assert queue[-1] == "(the first 1000 of 1002 shown)"
    assert gpuq("alice", "queue", "--team", "language").out.splitlines()[1:] == []
    assert len(json.loads(gpuq("alice", "queue", "--json").out)) == 1000


def test_queue_says_a_held_array_line_the_list_s_end_cut_short_has_at_least_its_tasks(
    gpuq: Gpuq, people: dict[str, Any], local_cluster: Any
) -> None:
    first = submit_job(people["alice"], spec(name="first", array="0-899%1")).job
    second = submit_job(people["bob"], spec(name="second", array="0-199%1")).job
    run_cycle()  # each array's task 0 admitted: 899 + 199 held, the list holds 1,000

    queue = gpuq("alice", "queue").out.splitlines()

    assert [row.split()[:3] for row in queue[1:-1]] == [
        ["-", str(array_tasks(str(first.pk))[1].pk), "first[1-899]"],
        ["-", str(array_tasks(str(second.pk))[1].pk), "second[1-101]"],
    ]
    assert "  899 tasks: array 'first' runs at most 1 task at once: " in queue[1]
    assert "  at least 101 tasks: array 'second' runs at most 1 task at once: " in queue[2]
    assert queue[-1] == "(the first 1000 of 1098 shown)"


def test_a_team_admin_reads_usage_and_a_member_is_told_who_may(
    gpuq: Gpuq, job_file: Any, local_cluster: Any
) -> None:
    submitted_id(
        gpuq("alice", "submit", job_file("name: u\ngpus_per_node: 2\ncommand: [/bin/true]\n"))
    )
    run_cycle()  # admitted: 2 GPUs held
    first, last = (str(date.today() - timedelta(days=n)) for n in (30, 29))
    usage = gpuq("dana", "usage", "vision", "--from", first, "--to", last)
    assert usage.code == 0, usage.err
    assert usage.out.splitlines() == [
        f"team vision, {first} to {last} (UTC days): 0 GPU-hours",
        "",
        "QUOTA     IN USE  NOMINAL  BORROWING LIMIT  BORROWED",
        "SIM-A100  2       8        8                0",
    ]
    member = gpuq("alice", "usage", "vision")
    assert member.code == 1 and "only an admin of this team can read its usage" in member.err
    bad = gpuq("dana", "usage", "vision", "--from", "2026-02-30")
    assert bad.code == 1 and "  from: Date has wrong format." in bad.err
    assert gpuq("dana", "usage", "../jobs").code == 2


def test_an_outsider_can_neither_see_nor_cancel_a_job(gpuq: Gpuq, job_file: Any) -> None:
    job_id = submitted_id(gpuq("alice", "submit", job_file("name: mine\ncommand: [/bin/true]\n")))

    assert gpuq("charlie", "ls").out.splitlines()[1:] == []
    shown = gpuq("charlie", "show", job_id)
    assert (shown.code, shown.out) == (1, "")
    assert "404" in shown.err and "Not found." in shown.err
    cancel = gpuq("charlie", "cancel", job_id)
    assert cancel.code == 1 and "Not found." in cancel.err
    teammate = gpuq("bob", "cancel", job_id)  # sees it, may not cancel it
    assert teammate.code == 1
    assert "only the job's owner or a team admin can cancel it" in teammate.err
    assert Job.objects.get(pk=job_id).state == Job.State.PENDING


def test_cancel_reports_each_job_and_fails_if_any_failed(gpuq: Gpuq, job_file: Any) -> None:
    one = submitted_id(gpuq("alice", "submit", job_file("name: one\ncommand: [/bin/true]\n")))
    two = submitted_id(gpuq("alice", "submit", job_file("name: two\ncommand: [/bin/true]\n")))
    stranger = str(uuid.uuid4())

    result = gpuq("alice", "cancel", one, stranger, two)

    assert result.code == 1
    assert result.out.splitlines() == [f"{one}  cancelled", f"{two}  cancelled"]
    assert f"gpuq: {stranger}: the server answered 404" in result.err
    again = gpuq("alice", "cancel", one)
    assert again.code == 1 and "the job already ended (cancelled)" in again.err


def test_suspend_and_resume_report_each_job(gpuq: Gpuq, job_file: Any) -> None:
    one = submitted_id(gpuq("alice", "submit", job_file("name: one\ncommand: [/bin/true]\n")))
    two = submitted_id(gpuq("alice", "submit", job_file("name: two\ncommand: [/bin/true]\n")))

    held = gpuq("alice", "suspend", one, two)
    shown = fields(gpuq("alice", "show", one))
    teammate = gpuq("bob", "resume", one)
    resumed = gpuq("alice", "resume", one)
    twice = gpuq("alice", "resume", one)

    assert (held.code, held.out.splitlines()) == (0, [f"{one}  suspended", f"{two}  suspended"])
    assert (shown["state"], shown["why"]) == (
        "suspended",
        "suspended by alice: resume it to queue it again",
    )
    assert teammate.code == 1
    assert "only the job's owner or a team admin can resume it" in teammate.err
    assert (resumed.code, resumed.out) == (0, f"{one}  pending\n")
    assert twice.code == 1
    assert "only a suspended job can be resumed; this one is pending" in twice.err
    listed = gpuq("alice", "ls").out.splitlines()[1:]
    assert [r.split()[4] for r in listed] == ["suspended", "pending"]
    assert listed[0].endswith("suspended by alice: resume it to queue it again")


def test_cancel_and_suspend_select_jobs_by_filters_as_scancel_does(
    gpuq: Gpuq, job_file: Any
) -> None:
    jobs = [("alice", "sweep-1"), ("alice", "sweep-2"), ("alice", "other"), ("bob", "sweep-bob")]
    ids = {
        name: submitted_id(gpuq(who, "submit", job_file(f"name: {name}\ncommand: [/bin/true]\n")))
        for who, name in jobs
    }

    held = gpuq("alice", "suspend", "--name", "sweep-", "--mine")
    resumed = gpuq("alice", "resume", "--mine")
    cancelled = gpuq("alice", "cancel", "--name", "sweep-", "--mine")
    nothing = gpuq("alice", "resume", "--mine")

    assert sorted(held.out.splitlines()) == sorted(
        [f"{ids['sweep-1']}  suspended", f"{ids['sweep-2']}  suspended"]
    )
    assert sorted(resumed.out.splitlines()) == sorted(
        [f"{ids['sweep-1']}  pending", f"{ids['sweep-2']}  pending"]
    )
    assert sorted(cancelled.out.splitlines()) == sorted(
        [f"{ids['sweep-1']}  cancelled", f"{ids['sweep-2']}  cancelled"]
    )
    assert (nothing.code, nothing.err) == (0, "gpuq: no job to resume matches\n")
    states = dict(Job.objects.values_list("name", "state"))
    assert (states["other"], states["sweep-bob"]) == ("pending", "pending")
    assert gpuq("alice", "cancel").code == 2  # neither IDs nor filters
    assert gpuq("alice", "cancel", ids["other"], "--mine").code == 2


def test_what_cancel_suspend_and_resume_select_by_default_matches_the_service() -> None:
    from queue_service.cli import ACTS_ON

    assert set(ACTS_ON["cancel"].split(",")) == set(Job.State.values) - Job.TERMINAL
    assert set(ACTS_ON["suspend"].split(",")) == Job.SUSPENDABLE
    assert ACTS_ON["resume"] == Job.State.SUSPENDED


def array_tasks(first_id: str) -> list[Job]:
    """The tasks of the array whose first task this is, by index."""
    first = Job.objects.get(pk=first_id)
    return list(Job.objects.filter(array=first.array_id).order_by("array_index"))


def test_an_array_submitted_is_said_so_and_its_tasks_are_shown_with_their_index(
    gpuq: Gpuq, job_file: Any, local_cluster: Any
) -> None:
    submit = gpuq("alice", "submit", job_file('name: sweep\narray: "0-3%2"\ncommand: [x]\n'))
    other = submitted_id(gpuq("alice", "submit", job_file("name: other\ncommand: [x]\n")))
    tasks = array_tasks(submitted_id(submit))
    array = str(tasks[0].array_id)
    run_cycle()  # two tasks admitted; the limit holds back the other two

    listed = gpuq("bob", "ls", "--array", array)
    queue = gpuq("bob", "queue")
    shown = fields(gpuq("bob", "show", str(tasks[2].pk)))

    assert submit.out.splitlines() == [
        f"{tasks[0].pk}  sweep[0]  pending",
        f"the first of an array of 4 tasks (0-3%2): gpuq ls --array {array}",
    ]
    assert sorted(row.split()[:2] for row in listed.out.splitlines()[1:]) == sorted(
        [str(task.pk), f"sweep[{task.array_index}]"] for task in tasks
    )
    assert other not in listed.out
    held = "array 'sweep' runs at most 2 tasks at once: 2 are running or ahead of this one"
    (row,) = queue.out.splitlines()[1:]  # the held tasks on one line, as squeue's
    assert row.split()[:3] == ["-", str(tasks[2].pk), "sweep[2-3]"]
    assert row.endswith(f"2 tasks: {held}")
    assert (shown["name"], shown["array"], shown["why"]) == (
        "sweep[2]",
        f"{array} (index 2 of 4, indices 0-3%2)",
        held,
    )
    bad = gpuq("alice", "ls", "--array", "sweep")
    assert (bad.code, bad.out) == (2, "")
    assert "argument --array: not an array id: 'sweep'" in bad.err


def test_queue_shows_the_tasks_an_array_s_limit_holds_back_on_one_line_per_array(
    gpuq: Gpuq, job_file: Any, local_cluster: Any
) -> None:
    sweep = array_tasks(
        submitted_id(gpuq("alice", "submit", job_file("name: sweep\narray: 0-9%3\ncommand: [x]\n")))
    )
    other = array_tasks(
        submitted_id(gpuq("bob", "submit", job_file("name: other\narray: 0-3%1\ncommand: [x]\n")))
    )
    wide = array_tasks(  # never fits the 2 nodes: its tasks wait for room, not for a limit
        submitted_id(
            gpuq(
                "alice",
                "submit",
                job_file("name: wide\narray: 0-1\nnodes: 3\ngpus_per_node: 1\ncommand: [x]\n"),
            )
        )
    )
    run_cycle()  # sweep[0-2] and other[0] admitted; the limits hold back the rest
    cancelled = gpuq("alice", "cancel", str(sweep[4].pk), str(sweep[6].pk))
    assert cancelled.code == 0, cancelled.err
    run_cycle()

    queue = gpuq("bob", "queue")

    rows = queue.out.splitlines()
    assert [row.split()[:4] for row in rows[1:]] == [
        ["1", str(wide[0].pk), "wide[0]", "vision"],
        ["2", str(wide[1].pk), "wide[1]", "vision"],
        ["-", str(sweep[3].pk), "sweep[3,5,7-9]", "vision"],
        ["-", str(other[1].pk), "other[1-3]", "vision"],
    ]
    assert "needs 3 nodes" in rows[1] and "needs 3 nodes" in rows[2]
    assert rows[3].endswith(
        "5 tasks: array 'sweep' runs at most 3 tasks at once: 3 are running or ahead of this one"
    )
    assert rows[4].endswith(
        "3 tasks: array 'other' runs at most 1 task at once: 1 is running or ahead of this one"
    )
    # --json stays the API's list: one entry per task.
    listed = json.loads(gpuq("bob", "queue", "--json").out)
    assert len(listed) == 2 + 5 + 3


@pytest.mark.parametrize(
    ("indices", "written"),
    [
        ([], ""),
        ([7], "7"),
        ([3, 4], "3-4"),
        (range(3, 12), "3-11"),
        ([3, 5, 7, 8, 9], "3,5,7-9"),
        ([1, 3, 5], "1,3,5"),
        ([9, 0, 8, 2, 1], "0-2,8-9"),  # in any order
        ([4, 4, 5, 4], "4-5"),  # each once
        ([0, 2, 3, 4, 10, 11, 999], "0,2-4,10-11,999"),
    ],
)
def test_index_ranges_are_written_as_slurm_writes_them(indices: Any, written: str) -> None:
    assert index_ranges(indices) == written


def test_cancel_suspend_and_resume_select_an_arrays_tasks_as_scancel_does(
    gpuq: Gpuq, job_file: Any
) -> None:
    sweep = array_tasks(
        submitted_id(gpuq("alice", "submit", job_file("name: sweep\narray: 0-2\ncommand: [x]\n")))
    )
    other = array_tasks(
        submitted_id(gpuq("alice", "submit", job_file("name: other\narray: 0-1\ncommand: [x]\n")))
    )
    array = str(sweep[0].array_id)

    def lines(state: str) -> list[str]:
        return sorted(f"{task.pk}  {state}" for task in sweep)

    held = gpuq("alice", "suspend", "--array", array)
    resumed = gpuq("alice", "resume", "--array", array)
    cancelled = gpuq("alice", "cancel", "--array", array)

    assert (held.code, sorted(held.out.splitlines())) == (0, lines("suspended"))
    assert (resumed.code, sorted(resumed.out.splitlines())) == (0, lines("pending"))
    assert (cancelled.code, sorted(cancelled.out.splitlines())) == (0, lines("cancelled"))
    bad = gpuq("alice", "cancel", "--array", "sweep")
    assert bad.code == 2 and "argument --array: not an array id: 'sweep'" in bad.err
    both = gpuq("alice", "cancel", str(other[0].pk), "--array", array)
    assert both.code == 2 and "not both" in both.err
    assert {task.state for task in array_tasks(str(other[0].pk))} == {Job.State.PENDING}


def test_submit_follow_of_an_array_follows_the_first_task_and_exits_as_the_worst_one(
    gpuq: Gpuq, job_file: Any, job_loop: Any
) -> None:
    # As `sbatch --wait` for an array: every task waited for, the highest exit status.
    path = job_file(
        "name: sweep\narray: 0-2\n"
        'command: "echo task $GPUQ_ARRAY_TASK_ID; exit $GPUQ_ARRAY_TASK_ID"\n'
    )
    result = gpuq("alice", "submit", "-f", path)

    tasks = array_tasks(result.out.split()[0])
    assert result.code == 2
    assert result.out.splitlines()[1:] == [
        f"the first of an array of 3 tasks (0-2): gpuq ls --array {tasks[0].array_id}",
        "task 0",
    ]
    assert result.err == (
        "gpuq: following the output of sweep[0] only; then waiting for all 3 tasks to end\n"
        f"gpuq: job {tasks[1].pk} (sweep[1]) ended failed: exit code 1\n"
        f"gpuq: job {tasks[2].pk} (sweep[2]) ended failed: exit code 2\n"
    )
    assert [task.state for task in tasks] == [Job.State.SUCCEEDED, *[Job.State.FAILED] * 2]
    ok = gpuq("alice", "submit", "-f", job_file("name: ok\narray: 0-1\ncommand: [/bin/true]\n"))
    assert (ok.code, ok.err) == (
        0,
        "gpuq: following the output of ok[0] only; then waiting for all 2 tasks to end\n",
    )
    assert {task.state for task in array_tasks(ok.out.split()[0])} == {Job.State.SUCCEEDED}


def test_show_names_the_jobs_a_job_runs_after(gpuq: Gpuq, job_file: Any) -> None:
    prep = submitted_id(gpuq("alice", "submit", job_file("name: prep\ncommand: [/bin/true]\n")))
    theirs = submitted_id(gpuq("charlie", "submit", job_file("name: theirs\ncommand: [x]\n")))
    train = submitted_id(
        gpuq("alice", "submit", job_file(f"name: train\ncommand: [x]\nafter: [{prep}]\n"))
    )
    job = Job.objects.get(pk=train)  # one the viewer cannot see, as if from a shared member
    Job.objects.filter(pk=train).update(spec={**job.spec, "after": [prep, theirs]})

    shown = fields(gpuq("bob", "show", train))

    assert shown["after"] == f"prep (pending, {prep}), {theirs}"


def test_show_names_an_array_a_job_runs_after(gpuq: Gpuq, job_file: Any) -> None:
    first = gpuq("alice", "submit", job_file("name: sweep\narray: 0-2%1\ncommand: [x]\n"))
    array = Job.objects.get(pk=submitted_id(first)).array_id
    merge = submitted_id(
        gpuq("alice", "submit", job_file(f"name: merge\ncommand: [x]\nafter: [{array}]\n"))
    )

    assert fields(gpuq("bob", "show", merge))["after"] == f"array sweep[0-2%1] (3 tasks, {array})"
    assert gpuq("charlie", "show", merge).code == 1  # an outsider does not see the job


def test_show_says_what_a_job_emails_about(
    gpuq: Gpuq, job_file: Any, people: dict[str, Any]
) -> None:
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    told = submitted_id(
        gpuq("alice", "submit", job_file("name: told\ncommand: [x]\nnotify: [fail, end]\n"))
    )
    quiet = submitted_id(gpuq("alice", "submit", job_file("name: quiet\ncommand: [x]\n")))

    assert fields(gpuq("bob", "show", told))["notify"] == "end, fail"
    assert "notify" not in fields(gpuq("bob", "show", quiet))
    refused = gpuq("bob", "submit", job_file("name: b\ncommand: [x]\nnotify: all\n"))
    assert refused.code == 1
    assert "notify: your account has no email address" in refused.err


def test_a_hostile_job_name_cannot_reach_the_terminal_raw(gpuq: Gpuq, job_file: Any) -> None:
    # A name stored before the server refused them: C1's CSI, which 8-bit terminals read as
    # ESC [ (here: clear the screen), a right-to-left override that reverses what follows on
    # screen, and a tab. A new name with one is refused, and the refusal does not echo it.
    job_id = submitted_id(gpuq("alice", "submit", job_file('{"name": "x", "command": ["true"]}')))
    hostile = "\x9b2J\u202eevil\tname"
    Job.objects.filter(pk=job_id).update(name=hostile)
    path = job_file(json.dumps({"name": "\u202eevil name", "command": ["true"]}))

    for argv in (["ls"], ["show", job_id], ["queue"], ["submit", path]):
        run = gpuq("bob", *argv)
        assert not {"\x9b", "\u202e", "\t"} & set(run.out + run.err), argv
    assert "name: must be" in gpuq("bob", "submit", path).err
    assert r"\x9b2J\u202eevil\tname" in gpuq("bob", "ls").out
    assert clean("plain name, ünïcode") == "plain name, ünïcode"


def test_job_ids_are_checked_before_any_request(gpuq: Gpuq) -> None:
    for bad in ("../tokens", "1; rm -rf /", "' OR 1=1"):
        result = gpuq("alice", "show", bad)
        assert result.code == 2 and f"not a job id: {bad!r}" in result.err


def test_configuration_errors_are_usage_errors(live_server: Any) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        main(["ls"], environ={"GPUQ_URL": live_server.url}, out=io.StringIO())
    assert exit_.value.code == 2 and "no API token: set GPUQ_TOKEN" in err.getvalue()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        main(["ls"], environ={"GPUQ_URL": "file:///etc/passwd", "GPUQ_TOKEN": "x"})
    assert exit_.value.code == 2 and "must start with http:// or https://" in err.getvalue()


@pytest.mark.parametrize("interval", ["-1", "0", "nan", "inf", "soon"])
def test_a_poll_interval_that_is_not_a_positive_number_is_a_usage_error(interval: str) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        main(["logs", "-f", "--interval", interval, "1"], environ={"GPUQ_TOKEN": "x"})
    assert exit_.value.code == 2 and "not a positive number of seconds" in err.getvalue()


def test_the_token_may_come_from_a_file(
    live_server: Any, people: dict[str, Any], tmp_path: Path
) -> None:
    _, token = create_token(people["alice"], "file")
    (tmp_path / "token").write_text(token + "\n")
    out = io.StringIO()
    env = {"GPUQ_URL": live_server.url, "GPUQ_TOKEN_FILE": str(tmp_path / "token")}
    assert main(["ls"], environ=env, out=out) == 0
    assert out.getvalue().split() == [
        "ID",
        "NAME",
        "TEAM",
        "USER",
        "STATE",
        "GPUS",
        "AGE",
        "REASON",
    ]
    err = io.StringIO()
    env["GPUQ_TOKEN_FILE"] = str(tmp_path / "missing")
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        main(["ls"], environ=env, out=out)
    assert exit_.value.code == 2
    assert f"GPUQ_TOKEN_FILE='{tmp_path}/missing' cannot be read" in err.getvalue()
    # Both set: which was meant is no guess to make (as the service's own settings);
    # --token is an explicit choice over both.
    env["GPUQ_TOKEN_FILE"], env["GPUQ_TOKEN"] = str(tmp_path / "token"), "another"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        main(["ls"], environ=env, out=out)
    assert exit_.value.code == 2
    assert "both GPUQ_TOKEN and GPUQ_TOKEN_FILE are set" in err.getvalue()
    assert main(["--token", token, "ls"], environ=env, out=io.StringIO()) == 0


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf", "3601"])
def test_a_timeout_out_of_range_is_a_usage_error(gpuq: Gpuq, timeout: str) -> None:
    result = gpuq("alice", "--timeout", timeout, "ls")
    assert result.code == 2
    assert "--timeout must be more than 0 and at most 3600 seconds" in result.err


def test_a_wrong_token_is_told_to_check_it(live_server: Any, db: Any) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["ls"], environ={"GPUQ_URL": live_server.url, "GPUQ_TOKEN": "gpuq_nope"})
    assert code == 1
    assert (
        err.getvalue().startswith("gpuq: not signed in: ") and "check GPUQ_TOKEN" in err.getvalue()
    )


def test_an_unreachable_service_is_a_clear_error(gpuq: Gpuq) -> None:
    result = gpuq("alice", "ls", url="http://127.0.0.1:9")
    assert result.code == 1
    assert result.err.startswith("gpuq: cannot reach http://127.0.0.1:9/api/v1/: ")


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """An HTTP server on a free loopback port, for as long as the block runs."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def other_server(status: int, body: bytes = b"") -> Iterator[tuple[str, list[str]]]:
    """A server that is not gpuq: it answers everything with `status` (a 301 to https, as a
    TLS front door would, or a 200 page) and records what it was asked."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def answer(self) -> None:
            seen.append(f"{self.command} {self.path}")
            self.send_response(status)
            if status == 301:
                self.send_header("Location", "https://gpuq.example" + self.path)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = answer

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        yield url, seen


def test_a_redirect_is_reported_not_followed(gpuq: Gpuq, job_file: Any) -> None:
    # urllib would follow a 301 for a POST as a GET: the submit would become a listing.
    with other_server(301) as (url, seen):
        result = gpuq("alice", "submit", job_file("name: x\ncommand: [/bin/true]\n"), url=url)
    assert result.code == 1
    assert "redirecting to https://gpuq.example/api/v1/jobs/" in result.err
    assert seen == ["POST /api/v1/jobs/"]


@contextlib.contextmanager
def losing_proxy(upstream: str, *, cut_short: bool = False) -> Iterator[str]:
    """A proxy in front of the live server that loses the answer to the first POST: the
    request reaches the server, the connection then drops without a reply (cut_short: after
    the status, the headers and half the body, as a proxy timing out mid-answer does)."""
    lost: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            target = http.client.HTTPConnection(urllib.parse.urlsplit(upstream).netloc, timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            target.request(self.command, self.path, body=body or None, headers=headers)
            answer = target.getresponse()
            data = answer.read()
            losing = self.command == "POST" and not lost
            if losing:
                lost.append(self.path)
                self.close_connection = True  # the answer is lost on the way back
                if not cut_short:
                    return
            self.send_response(answer.status)
            for k, v in answer.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2] if losing else data)

        do_GET = do_POST = forward

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        yield url
    assert lost == ["/api/v1/jobs/"]


def test_a_submit_whose_answer_is_lost_is_sent_again_and_makes_one_job(
    gpuq: Gpuq, job_file: Any, live_server: Any
) -> None:
    with losing_proxy(live_server.url) as url:
        result = gpuq("alice", "submit", job_file("name: once\ncommand: [/bin/true]\n"), url=url)
    assert result.code == 0, result.err
    assert Job.objects.count() == 1
    assert result.out.split() == [str(Job.objects.get().pk), "once", "pending"]


def test_a_url_that_is_not_gpuq_is_said_so(gpuq: Gpuq) -> None:
    with other_server(200, b"<html>a wiki</html>") as (url, seen):
        result = gpuq("alice", "queue", url=url)
    assert seen == ["GET /api/v1/queue/"]
    assert result.code == 1
    assert result.err == (
        f"gpuq: {url}/api/v1/queue/ answered with something other than JSON:"
        " is GPUQ_URL a gpuq service?\n"
    )


def test_logs_of_a_job_not_started_say_so_instead_of_printing_nothing(
    gpuq: Gpuq, job_file: Any
) -> None:
    job_id = submitted_id(gpuq("alice", "submit", job_file("name: x\ncommand: [/bin/true]\n")))
    result = gpuq("bob", "logs", job_id)
    assert (result.code, result.out) == (0, "")
    assert result.err == "gpuq: no output yet (the job is pending); -f waits for it\n"
    other = gpuq("bob", "logs", "--stderr", job_id)
    assert other.err == "gpuq: no output yet on stderr (the job is pending); -f waits for it\n"


def test_a_reader_that_leaves_early_stops_the_output_quietly(
    live_server: Any, people: dict[str, Any], local_cluster: Any
) -> None:
    # More output than a pipe holds (64 KiB), so writing runs into the closed pipe.
    job = submit_job(people["alice"], spec(command="seq 1 200000")).job
    job = run_until_ended(job)
    _, token = create_token(people["alice"], "pipe")
    env = {"GPUQ_URL": live_server.url, "GPUQ_TOKEN": token, "PATH": "/usr/bin:/bin"}
    gpuq = Path(sys.executable).parent / "gpuq"
    with subprocess.Popen(
        [gpuq, "logs", str(job.pk)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    ) as reader:
        assert reader.stdout is not None and reader.stderr is not None
        assert reader.stdout.read(8) == b"1\n2\n3\n4\n"
        reader.stdout.close()  # as `head` does
        assert reader.wait(timeout=60) == 141
        assert reader.stderr.read() == b""  # no traceback


def run_until_ended(job: Job) -> Job:
    deadline = time.monotonic() + 30
    while not job.is_terminal:
        assert time.monotonic() < deadline, f"job stuck in {job.state}"
        run_once()
        time.sleep(0.1)
        job.refresh_from_db()
    return job


def test_the_server_hands_out_the_command_as_one_file_that_runs_on_bare_python(
    live_server: Any, people: dict[str, Any], tmp_path: Path
) -> None:
    response = httpx.get(live_server.url + "/cli/gpuq", timeout=30)
    assert response.headers["Content-Disposition"] == 'attachment; filename="gpuq"'
    script = tmp_path / "gpuq"
    script.write_bytes(response.content)
    _, token = create_token(people["alice"], "laptop")
    # -I -S: no site-packages, no PYTHONPATH, no current directory: the standard library only.
    listed = subprocess.run(
        [sys.executable, "-I", "-S", str(script), "--url", live_server.url, "ls"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"GPUQ_TOKEN": token, "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["ID", "NAME", "TEAM", "USER", "STATE", "GPUS", "AGE", "REASON"]


def test_the_command_knows_which_states_are_ends() -> None:
    assert {str(state) for state in Job.TERMINAL} == ENDED


def test_the_gpuq_command_is_installed_and_imports_nothing_of_the_service() -> None:
    gpuq = Path(sys.executable).parent / "gpuq"
    assert gpuq.exists(), "pip install -e . puts the gpuq console script beside python"
    usage = subprocess.run([gpuq, "--help"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 0 and "submit" in usage.stdout and "logs" in usage.stdout
    probe = (
        "import sys; before = set(sys.modules); import queue_service.cli; "
        "print(sorted({m.split('.')[0] for m in set(sys.modules) - before}"
        " - set(sys.stdlib_module_names)))"
    )
    imported = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert imported.stdout.strip() == "['queue_service']"


def test_resubmit_failed_reruns_the_tasks_of_an_array_that_did_not_succeed(
    gpuq: Gpuq, job_file: Any
) -> None:
    sweep = gpuq("alice", "submit", job_file("name: sweep\narray: 0-5\ncommand: [x]\n"))
    tasks = array_tasks(submitted_id(sweep))
    ended = {1: "failed", 2: "succeeded", 4: "timeout", 5: "cancelled"}
    for task in tasks:
        if task.array_index in ended:
            Job.objects.filter(pk=task.pk).update(state=ended[task.array_index])

    again = gpuq("bob", "resubmit", "--failed", str(tasks[2].pk))

    assert again.code == 0, again.err
    copy = array_tasks(submitted_id(again))
    assert [t.array_index for t in copy] == [1, 4, 5]  # 0 and 3 still pending, 2 succeeded
    assert {t.user.username for t in copy} == {"bob"}
    given = gpuq("alice", "resubmit", "--array", "7,9-10", str(tasks[0].pk))
    assert [t.array_index for t in array_tasks(submitted_id(given))] == [7, 9, 10]
    bad = gpuq("alice", "resubmit", "--array", "9-7", str(tasks[0].pk))
    assert (bad.code, bad.out) == (1, "")
    assert "array: the range '9-7' ends before it starts" in bad.err


def test_resubmit_failed_says_when_there_is_nothing_to_rerun(gpuq: Gpuq, job_file: Any) -> None:
    plain = submitted_id(gpuq("alice", "submit", job_file("name: one\ncommand: [x]\n")))
    sweep = submitted_id(gpuq("alice", "submit", job_file("name: s\narray: 0-1\ncommand: [x]\n")))
    array = Job.objects.get(pk=sweep).array_id

    not_a_task = gpuq("alice", "resubmit", "--failed", plain)
    none_failed = gpuq("alice", "resubmit", "--failed", sweep)

    assert (not_a_task.code, none_failed.code) == (1, 1)
    assert f"job {plain} is not a task of an array: --failed needs one" in not_a_task.err
    assert (
        f"no task of array {array} ended otherwise than succeeded (0 of 2 have ended)"
        in none_failed.err
    )
    assert gpuq("alice", "resubmit", "--failed", "--array", "1", sweep).code == 2
    assert Job.objects.count() == 3


def test_update_changes_a_waiting_job_s_priority_and_time_limit(
    gpuq: Gpuq, job_file: Any, settings: Any
) -> None:
    settings.GPUQ_DEFAULT_TIME_LIMIT_S = 7200
    job_id = submitted_id(gpuq("alice", "submit", job_file("name: train\ncommand: [x]\n")))

    result = gpuq("alice", "update", job_id, "--priority", "high", "--time-limit", "30m")

    assert (result.code, result.out, result.err) == (
        0,
        f"{job_id}  train  priority high, time limit 30m\n",
        "",
    )
    job = Job.objects.get(pk=job_id)
    assert (job.priority_class.name, job.spec["priority"], job.spec["time_limit"]) == (
        "high",
        "high",
        1800,
    )
    assert [e.message for e in job.events.filter(code="updated")] == [
        "updated by alice: priority high (was normal); time limit 30m (was 2h)"
    ]
    # A team admin may too; `default` is the site's time limit; --json: the API's jobs.
    admin = gpuq("dana", "update", job_id, "--time-limit", "default", "--json")
    assert admin.code == 0, admin.err
    (answer,) = json.loads(admin.out)
    assert (answer["id"], answer["priority"], answer["spec"]["time_limit"]) == (
        job_id,
        "high",
        7200,
    )
    assert Job.objects.get(pk=job_id).spec["time_limit"] == 7200


def test_update_by_a_teammate_is_refused_and_an_outsider_finds_no_job(
    gpuq: Gpuq, job_file: Any
) -> None:
    job_id = submitted_id(gpuq("alice", "submit", job_file("name: mine\ncommand: [x]\n")))

    teammate = gpuq("bob", "update", job_id, "--priority", "high")
    outsider = gpuq("charlie", "update", job_id, "--priority", "high")

    assert (teammate.code, teammate.out) == (1, "")
    assert teammate.err == (
        f"gpuq: {job_id}: the server answered 403:\n"
        "  only the job's owner or a team admin can update it\n"
    )
    assert (outsider.code, outsider.out) == (1, "")
    assert outsider.err.startswith(f"gpuq: {job_id}: the server answered 404:\n")
    assert "Not found." in outsider.err
    assert Job.objects.get(pk=job_id).priority_class.name == "normal"
    assert not JobEvent.objects.filter(code="updated").exists()


def test_update_of_a_started_job_is_refused_and_the_other_jobs_still_change(
    gpuq: Gpuq, job_file: Any, local_cluster: Any
) -> None:
    started = submitted_id(gpuq("alice", "submit", job_file("name: started\ncommand: [x]\n")))
    run_cycle()  # admitted
    waiting = submitted_id(gpuq("alice", "submit", job_file("name: waiting\ncommand: [x]\n")))

    named = gpuq("alice", "update", started, waiting, "--priority", "high")
    by_filters = gpuq("alice", "update", "--mine", "--priority", "low")

    assert named.code == 1
    assert named.out == f"{waiting}  waiting  priority high\n"
    assert named.err == (
        f"gpuq: {started}: the server answered 409:\n"
        "  a job's priority and time limit can change only while it waits (pending or"
        " suspended); this one is admitted\n"
    )
    # Filters select the waiting jobs only: a started one would be a 409 each time.
    assert (by_filters.code, by_filters.out, by_filters.err) == (
        0,
        f"{waiting}  waiting  priority low\n",
        "",
    )
    assert dict(Job.objects.values_list("name", "priority_class__name")) == {
        "started": "normal",
        "waiting": "low",
    }
    assert Job.objects.get(pk=started).state == Job.State.ADMITTED


def test_update_max_running_is_sent_once_per_array(gpuq: Gpuq, job_file: Any) -> None:
    tasks = array_tasks(
        submitted_id(gpuq("alice", "submit", job_file("name: sweep\narray: 0-3%1\ncommand: [x]\n")))
    )
    array = str(tasks[0].array_id)
    plain = submitted_id(gpuq("alice", "submit", job_file("name: plain\ncommand: [x]\n")))

    limited = gpuq("alice", "update", "--array", array, "--max-running", "2")

    assert (limited.code, limited.err) == (0, "")
    (line,) = limited.out.splitlines()  # one PATCH for the array's four tasks
    first, name, said = line.split("  ")
    assert first in {str(task.pk) for task in tasks} and name.startswith("sweep[")
    assert said == "array 0-3%2 (at most 2 at once)"
    stored = JobArray.objects.get(pk=array)
    assert (stored.max_running, stored.indices) == (2, "0-3%2")
    assert JobEvent.objects.filter(code="updated").count() == 1

    unlimited = gpuq("alice", "update", str(tasks[1].pk), str(tasks[2].pk), "--max-running", "none")

    assert (unlimited.code, unlimited.out) == (
        0,
        f"{tasks[1].pk}  sweep[1]  array 0-3 (no limit)\n",
    )
    stored = JobArray.objects.get(pk=array)
    assert (stored.max_running, stored.indices) == (None, "0-3")
    assert JobEvent.objects.filter(code="updated").count() == 2

    not_a_task = gpuq("alice", "update", plain, "--max-running", "4")

    assert (not_a_task.code, not_a_task.out) == (1, "")
    assert not_a_task.err == (
        f"gpuq: {plain}: the server answered 400:\n  array: this job is not a task of an array\n"
    )
    # With a priority too, a job outside any array gets the priority alone.
    both = gpuq(
        "alice", "update", plain, str(tasks[3].pk), "--priority", "low", "--max-running", "3"
    )
    assert (both.code, both.out.splitlines()) == (
        0,
        [
            f"{plain}  plain  priority low",
            f"{tasks[3].pk}  sweep[3]  priority low, array 0-3%3 (at most 3 at once)",
        ],
    )
    assert JobArray.objects.get(pk=array).max_running == 3
    priorities = dict(Job.objects.values_list("pk", "priority_class__name"))
    assert [priorities[task.pk] for task in tasks] == ["normal", "normal", "normal", "low"]
    assert priorities[uuid.UUID(plain)] == "low"
    assert JobEvent.objects.filter(code="updated").count() == 4


def test_update_notify_changes_what_a_started_job_emails_about(
    gpuq: Gpuq, job_file: Any, people: dict[str, Any], local_cluster: Any
) -> None:
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    started = submitted_id(gpuq("alice", "submit", job_file("name: long\ncommand: [x]\n")))
    run_cycle()
    waiting = submitted_id(
        gpuq("alice", "submit", job_file("name: w\ncommand: [x]\ngpus_per_node: 16\n"))
    )

    added = gpuq("alice", "update", "--mine", "--notify", "end,fail")
    cleared = gpuq("alice", "update", started, "--notify", "none")
    typo = gpuq("alice", "update", started, "--notify", "ends")

    assert added.code == 0, added.err
    assert sorted(added.out.splitlines()) == sorted(
        [f"{started}  long  email on end,fail", f"{waiting}  w  email on end,fail"]
    )
    assert cleared.out == f"{started}  long  email on nothing\n"
    assert "notify" not in Job.objects.get(pk=started).spec
    assert Job.objects.get(pk=waiting).spec["notify"] == ["end", "fail"]
    assert typo.code == 1 and "notify: unknown event 'ends'" in typo.err


def test_me_says_who_the_token_is_and_sets_where_notify_writes(
    gpuq: Gpuq, people: dict[str, Any], mailoutbox: list[Any]
) -> None:
    before = gpuq("charlie", "me")
    asked = gpuq("charlie", "me", "--email", "charlie@example.org")
    waiting = gpuq("charlie", "me")
    expires = PendingEmail.objects.get(user=people["charlie"]).expires_at
    bad = gpuq("charlie", "me", "--email", "charlie at example")
    people["charlie"].email = "charlie@example.org"  # as following the mailed link does
    people["charlie"].save()
    same = gpuq("charlie", "me", "--email", "charlie@example.org")
    other = gpuq("charlie", "me", "--email", "charlie@lab.example.org")
    cleared = gpuq("charlie", "me", "--email", "")

    assert before.out == (
        "user:   charlie\nemail:  none (a job cannot notify you)\nteams:  language (admin)\n"
    )
    assert asked.code == 0, asked.err
    assert asked.out == before.out + (
        "a confirmation link was sent to charlie@example.org; notify writes to no address"
        " until you follow it (it works for 3 days)\n"
    )
    assert waiting.out == before.out + (
        "a confirmation link was sent to charlie@example.org; notify writes to no address"
        f" until you follow it (it works until {expires:%Y-%m-%d %H:%M} UTC)\n"
    )
    assert bad.code == 1 and "email: Enter a valid email address." in bad.err
    assert same.out.endswith("email:  charlie@example.org\nteams:  language (admin)\n")
    assert other.out.endswith(
        "email:  charlie@example.org\nteams:  language (admin)\n"
        "a confirmation link was sent to charlie@lab.example.org; notify writes to"
        " charlie@example.org until you follow it (it works for 3 days)\n"
    )
    assert "email:  none" in cleared.out
    assert [m.to for m in mailoutbox] == [["charlie@example.org"], ["charlie@lab.example.org"]]
    people["charlie"].refresh_from_db()
    assert people["charlie"].email == ""
    assert gpuq("staff", "me").out.startswith("user:   root (site staff)\n")


def test_update_usage_errors_exit_2_and_change_nothing(gpuq: Gpuq, job_file: Any) -> None:
    job_id = submitted_id(gpuq("alice", "submit", job_file("name: one\ncommand: [x]\n")))

    nothing = gpuq("alice", "update", job_id)
    both = gpuq("alice", "update", job_id, "--mine", "--priority", "high")
    neither = gpuq("alice", "update", "--priority", "high")
    zero = gpuq("alice", "update", job_id, "--max-running", "0")

    assert nothing.code == 2
    assert (
        "update: say what to change: --priority, --time-limit, --max-running or --notify"
        in nothing.err
    )
    assert both.code == 2 and "update: name jobs, or select them with filters" in both.err
    assert "not both" in both.err
    assert neither.code == 2 and "update: name jobs, or select them with filters" in neither.err
    assert zero.code == 2 and "argument --max-running: a whole number from 1, not '0'" in zero.err
    assert Job.objects.get(pk=job_id).priority_class.name == "normal"
    assert not JobEvent.objects.filter(code="updated").exists()
    listed = io.StringIO()
    with contextlib.redirect_stdout(listed), pytest.raises(SystemExit):
        main(["--help"])
    assert "update" in listed.getvalue()


def test_update_with_a_bad_value_prints_the_server_s_field_message(
    gpuq: Gpuq, job_file: Any
) -> None:
    job_id = submitted_id(gpuq("alice", "submit", job_file("name: one\ncommand: [x]\n")))
    before = Job.objects.get(pk=job_id).spec

    forever = gpuq("alice", "update", job_id, "--time-limit", "forever")
    urgent = gpuq("alice", "update", job_id, "--priority", "urgent")

    assert (forever.code, forever.out) == (1, "")
    assert forever.err == (
        f"gpuq: {job_id}: the server answered 400:\n"
        "  time_limit: 'forever' is not a duration (use seconds as a number, 90m, 2h, 30d, or as"
        " Slurm's --time MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)\n"
    )
    assert (urgent.code, urgent.out) == (1, "")
    assert urgent.err.startswith(
        f"gpuq: {job_id}: the server answered 400:\n"
        "  priority: unknown priority class 'urgent' (known: "
    )
    assert Job.objects.get(pk=job_id).spec == before
    assert not JobEvent.objects.filter(code="updated").exists()
