"""What a cycle stores for each waiting job (reason, position, estimate), on PostgreSQL (one
UPDATE from JSON documents, which compares as it writes) and on the embedded default's SQLite
(read, compared in Python, Django's bulk_update)."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.db import connection

from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, submit_job
from queue_service.jobs.snapshot import _write_waits, run_cycle
from scheduler import types as st
from tests.conftest import on_sqlite, spec

REPO = Path(__file__).resolve().parents[2]


def positions() -> list[tuple[str, int | None]]:
    return list(
        Job.objects.filter(state=Job.State.PENDING)
        .order_by("queue_position")
        .values_list("name", "queue_position")
    )


def test_every_waiting_job_moves_up_when_the_head_leaves(
    people: dict[str, Any], local_cluster: Any
) -> None:
    # 2 nodes x 4 GPUs: a 3-node job can never fit, nor can anything behind a full cluster.
    jobs = [
        submit_job(people["alice"], spec(name=f"j{i}", nodes=3, gpus_per_node=4)).job
        for i in range(4)
    ]
    run_cycle()
    assert positions() == [("j0", 1), ("j1", 2), ("j2", 3), ("j3", 4)]
    waiting = Job.objects.get(pk=jobs[3].pk)
    assert waiting.reason["code"] == "unsatisfiable" and "3 nodes x 4" in waiting.reason["message"]

    cancel_job(people["alice"], jobs[0])
    run_cycle()

    assert positions() == [("j1", 1), ("j2", 2), ("j3", 3)]
    assert Job.objects.get(pk=jobs[0].pk).queue_position is None


def test_a_job_that_left_the_queue_while_the_cycle_ran_gets_no_position(
    people: dict[str, Any], local_cluster: Any
) -> None:
    job = submit_job(people["alice"], spec(name="gone", nodes=3, gpus_per_node=4)).job
    cancel_job(people["alice"], job)  # after the cycle read it as pending
    before = Job.objects.get(pk=job.pk).reason
    _write_waits([(str(job.pk), st.Reason("unsatisfiable", "x"), 1, None)])

    job.refresh_from_db()
    assert (job.state, job.queue_position, job.reason) == (Job.State.CANCELLED, None, before)


def row_versions() -> dict[str, int]:
    """PostgreSQL's xmin of each pending job's row: it changes when the row is written."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, xmin::text::bigint FROM jobs_job WHERE state = %s", [Job.State.PENDING]
        )
        return dict(cursor.fetchall())


def test_a_cycle_writes_only_the_waits_that_changed(
    people: dict[str, Any], local_cluster: Any
) -> None:
    # Four 4-GPU jobs on 2 nodes x 4 GPUs: two run, two wait behind them.
    jobs = [
        submit_job(people["alice"], spec(name=f"j{i}", gpus_per_node=4, time_limit=3600)).job
        for i in range(4)
    ]
    run_cycle()
    first = row_versions()
    assert sorted(first) == ["j2", "j3"]
    run_cycle()  # nothing changed
    assert row_versions() == first

    cancel_job(people["alice"], jobs[2])
    run_cycle()  # j3 moves up to position 1: its row is written

    assert positions() == [("j3", 1)]
    assert row_versions()["j3"] != first["j3"]


def test_waits_are_stored_as_the_scheduler_gave_them(
    people: dict[str, Any], local_cluster: Any
) -> None:
    job = submit_job(people["alice"], spec(name="w", nodes=3, gpus_per_node=4)).job
    estimate = 1_800_000_000.123456
    reason = st.Reason("x", "why", (("sizes", (1, 2)), ("free", float("nan")), ("n", 2.5)))

    _write_waits([(str(job.pk), reason, 7, estimate)])

    job.refresh_from_db()
    assert job.reason == {
        "code": "x",
        "message": "why",
        "details": {"sizes": [1, 2], "free": None, "n": 2.5},
    }
    assert job.queue_position == 7
    assert job.estimated_start == datetime.fromtimestamp(estimate, tz=UTC)


def test_the_embedded_default_stores_waits_on_sqlite(tmp_path: Path) -> None:
    scenario = textwrap.dedent(
        """
        spec = {"command": ["true"], "nodes": 2, "gpus_per_node": 4}
        jobs = [submit_job(alice, {**spec, "name": f"j{i}"}).job for i in range(3)]

        def positions():
            return list(Job.objects.filter(state="pending").order_by("queue_position")
                        .values_list("queue_position", flat=True))

        run_cycle()
        first = positions()
        cancel_job(alice, jobs[0])
        run_cycle()
        print("reason", Job.objects.get(pk=jobs[2].pk).reason["code"])
        print("positions", first, "then", positions())
        held = submit_job(alice, {**spec, "name": "held", "after": [str(jobs[1].pk)]}).job
        run_cycle()
        held = Job.objects.get(pk=held.pk)
        print("held", held.reason["code"], held.queue_position, positions())
        """
    )
    assert on_sqlite(tmp_path, scenario)[-3:] == [
        "reason unsatisfiable",
        "positions [1, 2, 3] then [1, 2]",
        "held after None [None, 1, 2]",  # SQLite sorts NULL first
    ]
