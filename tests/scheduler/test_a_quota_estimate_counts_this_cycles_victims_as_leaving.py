"""A job refused quota is estimated to start when its team's running jobs on that quota end
by their limits; a job of the team that this cycle preempts ends sooner, when it leaves
(within Policy.preemption_grace_s), and the estimate counts it so this cycle already, not
only from the next one (when the snapshot carries its preempting_since)."""

from __future__ import annotations

import pytest

from scheduler.types import Node, Policy

from .builders import A100, NOW, decide, job, running, snap, team, waits


@pytest.mark.parametrize(
    ("grace", "victim_limit"),
    [(30.0, 3600.0), (120.0, 3600.0), (30.0, None)],
)
def test_a_job_refused_quota_is_estimated_to_start_when_its_teams_reclaimed_job_leaves(
    grace: float, victim_limit: float | None
) -> None:
    # t (nominal 4) holds 6: t1 (2 GPUs, n2) and t2 (4 GPUs, n1, the most recent). u (nominal
    # 6, 2 held on n2) asks for 4 on one node, within its nominal: it reclaims t2, the only
    # way (n2 keeps u's high job), which takes t to 2. y (t, 2 GPUs) is then refused quota
    # (nothing is left to lend) though it fits t's nominal once t2 has left, by the grace;
    # n3 could hold it now. Expected: y is estimated at NOW + grace. Before: at t2's limit
    # (NOW + 3300), or None for a t2 without a limit.
    cluster = (Node("n1", A100, 4), Node("n2", A100, 4), Node("n3", A100, 2))
    teams = [team("t", 4, borrow=None), team("u", 6, borrow=None)]
    busy = [
        running("t1", {"n2": [0, 1]}, team="t", started=NOW - 600),
        running("u1", {"n2": [2, 3]}, team="u", priority="high"),
        running("t2", {"n1": range(4)}, team="t", started=NOW - 300, limit=victim_limit),
    ]
    pending = [job("x", team="u", gpus=4), job("y", team="t", gpus=2)]
    d = decide(snap(cluster, teams, pending, busy), Policy(preemption_grace_s=grace))
    assert [(p.job_id, p.by_job_id, p.kind) for p in d.preemptions] == [("t2", "x", "reclaim")]
    y = waits(d)["y"]
    assert y.reason.code == "quota_exhausted", y.reason.message
    assert y.estimated_start == NOW + grace, y.estimated_start


@pytest.mark.parametrize(
    ("t1_ends", "t2_ends", "w_gpus", "expected"),
    [
        # y's estimate took t1's release (NOW + 1000) and holds 1 GPU till NOW + 1100. t2 (to
        # NOW + 9940 by its limit) leaves by NOW + 30: w (2) fits at NOW + 1000 beside y.
        # Before: NOW + 1100 (the fluid, built at y's turn, kept t2 until its limit).
        (1000.0, 9940.0, 2, NOW + 1000),
        # y's estimate already counted t2's release (NOW + 1000) and t1's (NOW + 5000): that
        # t2 leaves sooner frees nothing more. w (4) waits for y's GPU too: NOW + 5100 (a
        # correction that added t2's GPUs again would give NOW + 5000).
        (5000.0, 1000.0, 4, NOW + 5100),
    ],
)
def test_a_quota_estimate_made_before_a_preemption_counts_its_victims_for_the_jobs_behind(
    t1_ends: float, t2_ends: float, w_gpus: int, expected: float
) -> None:
    # t (nominal 4, may borrow 2) holds 6: t1 (normal, 4 GPUs) and t2 (low, 2, borrowed).
    # In FIFO order (no fair share): y (t, 1 GPU) is refused quota and estimated, building
    # t's quota fluid; z (u, borrowing v's idle quota) then preempts t2 for priority; w (t)
    # is refused quota after it, its estimate from that same fluid.
    cluster = (Node("n1", A100, 8, pool="x"), Node("n2", A100, 4, pool="y"))
    teams = [team("t", 4, borrow=2), team("u", 0, borrow=None), team("v", 4)]
    busy = [
        running("t1", {"n1": range(4)}, team="t", started=NOW - 600, limit=600 + t1_ends),
        running(
            "t2", {"n1": [4, 5]}, team="t", priority="low", started=NOW - 60, limit=60 + t2_ends
        ),
    ]
    pending = [
        job("y", team="t", gpus=1, submit=NOW - 300, limit=100.0),
        job("z", team="u", gpus=4, pool="x", submit=NOW - 200),
        job("w", team="t", gpus=w_gpus, submit=NOW - 100),
    ]
    policy = Policy(preemptible_classes_preempt=True, fair_share=False)
    d = decide(snap(cluster, teams, pending, busy), policy)
    assert [(p.job_id, p.by_job_id, p.kind) for p in d.preemptions] == [("t2", "z", "priority")]
    assert waits(d)["y"].reason.code == "quota_exhausted", waits(d)["y"].reason.message
    w = waits(d)["w"]
    assert w.reason.code == "quota_exhausted", w.reason.message
    assert w.estimated_start == expected, w.estimated_start - NOW if w.estimated_start else None
