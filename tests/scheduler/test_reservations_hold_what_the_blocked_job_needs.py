"""EASY backfill: the first blocked job gets a reservation at its earliest start from
running jobs' time limits, and a later job starts now only if it does not delay it.

The earliest start counts a preempted job's GPUs as coming back only when its preemptor,
which takes them, ends; and reservations are kept per capacity group (GPU model, pool,
cluster), so a job blocked in one cluster does not take the reservation a job blocked in
another needs.
"""

from __future__ import annotations

from scheduler.types import Node

from .builders import A100, NOW, decide, job, nodes, running, snap, started, team, waits


def test_a_reservation_does_not_count_on_gpus_a_preemptor_takes_in_the_same_cycle() -> None:
    """`hi` (high class) preempts `v`, which holds all of n1, and runs there for an hour once
    v has left (NOW+30 to NOW+3630). The next blocked job, j1 (8 GPUs), can then start no
    sooner than n2 empties at NOW+2000 (its 4 free GPUs plus w's 4): its reservation is
    there, so j2 (4 GPUs, a 10-hour limit) may not take n2's free GPUs and delay it."""
    pending = [
        job("hi", gpus=8, priority="high", limit=3600, submit=NOW - 90),
        job("j1", gpus=8, limit=3600, submit=NOW - 80),
        job("j2", gpus=4, limit=36000, submit=NOW - 70),
    ]
    busy = [
        running("v", {"n1": range(8)}, priority="low", started=NOW - 60, limit=660),
        running("w", {"n2": range(4)}, priority="high", started=NOW - 600, limit=2600),
    ]
    d = decide(snap(nodes(2), [team("a", 100, None)], pending, busy))
    assert [p.job_id for p in d.preemptions] == ["v"]
    assert "j2" not in started(d)
    assert waits(d)["j1"].reserved
    assert waits(d)["j1"].estimated_start == NOW + 2000


def test_a_job_blocked_in_one_cluster_is_not_delayed_by_a_reservation_in_another() -> None:
    """j1 (pinned to cluster y, needs its whole node, free at NOW+400) is reserved that node
    and j2 (1 GPU for 10 h there) may not start: it would delay j1. The same holds with j0
    ahead of them, blocked in cluster x on the same GPU model: j0's reservation is in x,
    so it does not stand in for one in y."""
    ns = (Node("x1", A100, 8, cluster="x"), Node("y1", A100, 8, cluster="y"))
    y_jobs = [
        job("j1", gpus=8, limit=3600, submit=NOW - 60, cluster="y"),
        job("j2", gpus=1, limit=36000, submit=NOW - 50, cluster="y"),
    ]
    busy = [
        running("rx", {"x1": range(8)}, started=NOW - 600, limit=1200),
        running("ry", {"y1": range(4)}, started=NOW - 600, limit=1000),
    ]
    teams = [team("a", 100, None)]
    j0 = job("j0", gpus=8, limit=3600, submit=NOW - 70, cluster="x")
    for pending in (y_jobs, [j0, *y_jobs]):
        d = decide(snap(ns, teams, pending, busy))
        w = waits(d)
        assert "j2" not in started(d)
        assert w["j1"].reserved and w["j1"].estimated_start == NOW + 400
        if "j0" in w:
            assert w["j0"].reserved and w["j0"].estimated_start == NOW + 600
