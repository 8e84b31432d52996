"""Job arrays (Slurm's --array): one submit makes one job per index, each a job of its own
that sees its index as GPUQ_ARRAY_TASK_ID; `%N` lets at most N run at once. On the local
backend with real processes, without Celery (the embedded loop)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from queue_service.jobs.dispatch import read_logs
from queue_service.jobs.models import Job, JobArray, JobRun
from queue_service.jobs.services import resubmit_job, resume_job, submit_job, suspend_job
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import on_sqlite, spec
from tests.service.test_job_flow import run_until

S = Job.State
pytestmark = pytest.mark.django_db(transaction=True)
SAYS_INDEX = ["/bin/sh", "-c", 'echo "task $GPUQ_ARRAY_TASK_ID of $GPUQ_ARRAY_TASK_COUNT"']


def tasks(first: Job) -> list[Job]:
    return list(Job.objects.filter(array=first.array_id).order_by("array_index"))


def stdout(job: Job) -> str:
    return read_logs(job, offset=0, limit=4096, stream="stdout").data.decode()


def test_an_array_runs_one_job_per_index_and_each_sees_its_own(
    people: Any, local_cluster: Any
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="1,3-5:2", command=SAYS_INDEX)).job

    for task in tasks(first):
        run_until(task, lambda j: j.is_terminal)

    done = tasks(first)
    assert [(t.array_index, t.state, t.display_name) for t in done] == [
        (1, S.SUCCEEDED, "sweep[1]"),
        (3, S.SUCCEEDED, "sweep[3]"),
        (5, S.SUCCEEDED, "sweep[5]"),
    ]
    assert [stdout(t) for t in done] == ["task 1 of 3\n", "task 3 of 3\n", "task 5 of 3\n"]
    assert [t.spec["array"] for t in done] == ["1", "3", "5"]  # a copy of one is that one
    array = JobArray.objects.get()
    assert (array.name, array.indices, array.size, array.max_running) == (
        "sweep",
        "1,3-5:2",
        3,
        None,
    )
    assert first.events.first().message == "submitted by alice: index 1 of an array of 3 tasks"


def test_an_array_runs_no_more_than_its_limit_at_once(people: Any, local_cluster: Any) -> None:
    # The cluster has 8 GPUs: without the limit all four would start at once.
    first = submit_job(people["alice"], spec(name="sweep", array="0-3%2", command="sleep 0.5")).job

    run_cycle()

    states = [(t.array_index, t.state, t.reason.get("code")) for t in tasks(first)]
    assert states == [
        (0, S.ADMITTED, "admitted"),
        (1, S.ADMITTED, "admitted"),
        (2, S.PENDING, "array_limit"),
        (3, S.PENDING, "array_limit"),
    ]
    held = tasks(first)[2]
    assert held.reason["message"] == (
        "array 'sweep' runs at most 2 tasks at once: 2 are running or ahead of this one"
    )
    assert held.queue_position is None
    for task in tasks(first):
        run_until(task, lambda j: j.is_terminal)
    assert {t.state for t in tasks(first)} == {S.SUCCEEDED}
    # Never more than two at once: at each run's start, count the runs under way.
    runs = list(JobRun.objects.order_by("started_at"))
    assert len(runs) == 4
    for run in runs:
        under_way = [
            r for r in runs if r.started_at <= run.started_at and r.ended_at > run.started_at
        ]
        assert len(under_way) <= 2, [(r.job_id, r.started_at, r.ended_at) for r in runs]
    # The held ones were let through only once one of the first two had ended.
    first_end = min(r.ended_at for r in runs if r.job_id in {t.pk for t in tasks(first)[:2]})
    assert all(t.admitted_at >= first_end for t in tasks(first)[2:])


def test_tasks_wait_for_their_after_jobs_before_their_limit_applies(
    people: Any, local_cluster: Any
) -> None:
    prep = submit_job(
        people["alice"], spec(name="prep", nodes=3, gpus_per_node=4)
    ).job  # never fits
    first = submit_job(people["alice"], spec(name="sweep", array="0-2%1", after=[str(prep.pk)])).job

    run_cycle()

    assert [t.reason["code"] for t in tasks(first)] == ["after", "after", "after"]


def test_hold_keeps_every_task_suspended(people: Any, local_cluster: Any) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-2", hold=True)).job
    run_cycle()
    assert {t.state for t in tasks(first)} == {S.SUSPENDED}


def test_a_repeat_with_the_same_key_returns_the_first_task_and_makes_no_more(
    people: Any, local_cluster: Any
) -> None:
    one = submit_job(people["alice"], spec(array="0-9"), idempotency_key="k1")
    two = submit_job(people["alice"], spec(array="0-9"), idempotency_key="k1")
    assert (one.created, two.created, two.job.pk) == (True, False, one.job.pk)
    assert (Job.objects.count(), JobArray.objects.count()) == (10, 1)


def test_a_resubmitted_task_runs_again_with_its_index(people: Any, local_cluster: Any) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="4-6", command=SAYS_INDEX)).job
    one = tasks(first)[1]

    copy = resubmit_job(people["bob"], one).job
    copy = run_until(copy, lambda j: j.is_terminal)

    assert (copy.array_index, copy.array.size, copy.array_id != first.array_id) == (5, 1, True)
    assert stdout(copy) == "task 5 of 1\n"


@pytest.mark.parametrize(
    ("array", "message"),
    [
        ("0-1000", "at most 1000 tasks in an array on this site"),
        ("x", "'x' is not an array (use 0-15, 1,3,5 or 0-15:2, with %N for at most N at once)"),
        ("5-1", "the range '5-1' ends before it starts"),
        ("0-3%0", "%0 would never run a task: give at least %1"),
    ],
)
def test_a_bad_array_is_a_400_and_stores_nothing(client_for: Any, array: str, message: str) -> None:
    answer = client_for("alice").post("/api/v1/jobs/", spec(array=array), format="json")
    assert answer.status_code == 400
    assert answer.json() == {"array": [message]}
    assert (Job.objects.count(), JobArray.objects.count()) == (0, 0)


def test_an_arrays_tasks_are_listed_by_its_id_for_the_team_only(
    client_for: Any, people: Any
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-2%2")).job
    submit_job(people["alice"], spec(name="other"))

    def listed(who: str) -> Any:
        return client_for(who).get("/api/v1/jobs/", {"array": str(first.array_id)})

    answer = listed("alice")
    assert answer.status_code == 200
    rows = answer.json()["results"]
    assert sorted(r["array"]["index"] for r in rows) == [0, 1, 2]
    assert rows[0]["array"] == {
        "id": str(first.array_id),
        "index": rows[0]["array"]["index"],
        "indices": "0-2%2",
        "size": 3,
        "max_running": 2,
    }
    assert len(listed("bob").json()["results"]) == 3  # a teammate
    assert listed("charlie").json()["results"] == []  # an outsider
    bad = client_for("alice").get("/api/v1/jobs/", {"array": "sweep"})
    assert (bad.status_code, bad.json()) == (400, {"array": ["must be an array's id (a UUID)"]})
    single = client_for("alice").get(f"/api/v1/jobs/{first.pk}/").json()
    assert single["array"]["index"] == 0
    other = client_for("alice").get("/api/v1/jobs/", {"name": "other"}).json()["results"]
    assert other[0]["array"] is None


def test_preview_of_an_array_answers_for_its_first_task(
    client_for: Any, local_cluster: Any
) -> None:
    answer = client_for("alice").post("/api/v1/jobs/preview/", spec(array="0-99%5"), format="json")
    assert answer.status_code == 200
    assert answer.json()["starts_now"] is True
    assert (Job.objects.count(), JobArray.objects.count()) == (0, 0)


def test_a_job_after_an_array_starts_once_every_task_has_succeeded(
    people: Any, local_cluster: Any
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-2", command="sleep 0.3")).job
    merge = submit_job(people["bob"], spec(name="merge", after=[str(first.array_id)])).job

    run_cycle()

    merge.refresh_from_db()
    assert merge.reason["message"] == (
        "waiting for array 'sweep[0-2]' (0 of 3 tasks succeeded) to succeed"
    )
    merge = run_until(merge, lambda j: j.is_terminal)
    assert merge.state == S.SUCCEEDED
    assert merge.started_at >= max(t.finished_at for t in tasks(first))


def test_a_job_after_an_array_whose_task_failed_is_cancelled_with_which_task(
    people: Any, local_cluster: Any, client_for: Any
) -> None:
    first = submit_job(
        people["alice"], spec(name="sweep", array="0-1", command="exit $GPUQ_ARRAY_TASK_ID")
    ).job
    merge = submit_job(people["alice"], spec(name="merge", after=[str(first.array_id)])).job

    merge = run_until(merge, lambda j: j.is_terminal)

    assert merge.state == S.CANCELLED
    assert merge.reason["message"] == (
        f"task 'sweep[1]' of array {first.array_id} ended failed, so this one can never start"
    )
    late = client_for("alice").post(
        "/api/v1/jobs/", spec(after=[str(first.array_id)]), format="json"
    )
    assert late.json() == {
        "after": [f"array {first.array_id}: its task sweep[1] ended failed: it can never succeed"]
    }


def test_after_takes_only_arrays_of_your_teams(client_for: Any, people: Any) -> None:
    charlies = submit_job(people["charlie"], spec(name="theirs", array="0-1")).job

    answer = client_for("alice").post(
        "/api/v1/jobs/", spec(after=[str(charlies.array_id)]), format="json"
    )

    assert answer.status_code == 400
    assert answer.json() == {"after": [f"no job {charlies.array_id} among those you can see"]}


def _commit_meanwhile(monkeypatch: pytest.MonkeyPatch, change: Any) -> None:
    """Run `change` from another connection, committed, just after the cycle has read the
    pending jobs and before it decides which to hold back (READ COMMITTED lets the cycle's
    later queries see it)."""
    import threading

    from django.db import connection

    from queue_service.jobs import snapshot

    real = snapshot.held_back

    def racing(rows: Any) -> Any:
        def other() -> None:
            try:
                change()
            finally:
                connection.close()  # this thread's own connection

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        return real(rows)

    monkeypatch.setattr(snapshot, "held_back", racing)


def test_an_array_submitted_while_a_cycle_reads_starts_no_more_than_its_limit(
    people: Any, local_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Job] = []
    _commit_meanwhile(
        monkeypatch,
        lambda: made.append(submit_job(people["alice"], spec(name="sweep", array="0-3%1")).job),
    )

    run_cycle()
    monkeypatch.undo()
    run_cycle()

    assert [t.state for t in tasks(made[0])] == [S.ADMITTED, S.PENDING, S.PENDING, S.PENDING]


def test_a_task_resumed_while_a_cycle_reads_waits_for_its_turn(
    people: Any, local_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-1%1", command="sleep 5")).job
    second = tasks(first)[1]
    suspend_job(people["alice"], second)
    run_cycle()  # task 0 takes the array's one place
    _commit_meanwhile(
        monkeypatch, lambda: resume_job(people["alice"], Job.objects.get(pk=second.pk))
    )

    run_cycle()
    monkeypatch.undo()
    run_cycle()

    states = [t.state for t in tasks(first)]
    assert states[1] == S.PENDING and sum(state in Job.ACTIVE for state in states) == 1
    assert tasks(first)[1].reason["code"] == "array_limit"


def test_the_embedded_default_runs_arrays_and_lists_held_tasks_last_on_sqlite(
    tmp_path: Path,
) -> None:
    printed = on_sqlite(
        tmp_path,
        textwrap.dedent(
            """
            from rest_framework.test import APIClient
            submit_job(alice, {"name": "wide", "command": ["true"], "nodes": 2, "gpus_per_node": 4})
            submit_job(alice, {"name": "sweep", "command": ["true"], "array": "0-3%1"})
            run_cycle()
            client = APIClient()
            client.force_authenticate(alice)
            queue = client.get("/api/v1/queue/").json()
            print("queue", [(j["name"], (j["array"] or {}).get("index"), j["reason"]["code"])
                            for j in queue])
            """
        ),
    )
    # SQLite sorts NULL positions first: the held tasks must still come after the queue.
    assert printed[-1] == (
        "queue [('wide', None, 'unsatisfiable'), ('sweep', 1, 'array_limit'),"
        " ('sweep', 2, 'array_limit'), ('sweep', 3, 'array_limit')]"
    )


def test_a_task_resubmitted_with_other_indices_makes_an_array_of_those(
    people: Any, client_for: Any
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-4%2", command=SAYS_INDEX)).job
    bob = client_for("bob")  # a teammate reruns alice's failed tasks

    answer = bob.post(f"/api/v1/jobs/{first.pk}/resubmit/", {"array": "1,3"}, format="json")

    assert answer.status_code == 201, answer.content
    copy = Job.objects.get(pk=answer.json()["id"])
    # The original's %2 holds for the rerun.
    assert (copy.user.username, copy.array.indices, copy.array.max_running) == ("bob", "1,3%2", 2)
    assert [(t.array_index, t.spec["array"]) for t in tasks(copy)] == [(1, "1"), (3, "3")]
    assert {k: v for k, v in copy.spec.items() if k != "array"} == {
        k: v for k, v in first.spec.items() if k != "array"
    }
    assert bob.post(f"/api/v1/jobs/{first.pk}/resubmit/", {"array": "x-"}, format="json").json()[
        "array"
    ] == ["'x-' is not an array (use 0-15, 1,3,5 or 0-15:2, with %N for at most N at once)"]
    changed = bob.post(f"/api/v1/jobs/{first.pk}/resubmit/", {"name": "other"}, format="json")
    assert changed.status_code == 400
    assert changed.json() == {"name": ["a copy keeps the original's spec; only array may be given"]}
    listed = bob.post(f"/api/v1/jobs/{first.pk}/resubmit/", [1], format="json")
    assert listed.status_code == 400
    plain = bob.post(f"/api/v1/jobs/{first.pk}/resubmit/")  # no body: the task itself again
    assert plain.status_code == 201 and plain.json()["array"]["indices"] == "0"
    outsider = client_for("charlie").post(
        f"/api/v1/jobs/{first.pk}/resubmit/", {"array": "1"}, format="json"
    )
    assert outsider.status_code == 404


def test_a_rerun_too_long_for_the_originals_limit_says_so(people: Any, client_for: Any) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-4%2")).job
    # 780 parts of one index each, 16,384 characters: valid alone, too long with "%2".
    indices = ",".join(["999999-999999:999999"] * 780) + ",9999"
    assert len(indices) == 16384

    answer = client_for("alice").post(
        f"/api/v1/jobs/{first.pk}/resubmit/", {"array": indices}, format="json"
    )

    assert answer.status_code == 400
    assert answer.json() == {"array": ["at most 16382 characters, with the original's %2 added"]}
