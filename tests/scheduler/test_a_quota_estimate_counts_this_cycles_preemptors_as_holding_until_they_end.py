"""A job that preempts this cycle holds its team's quota from now (the cycle commits it, so
that the team's lower jobs do not restart on it while its victims leave) until it ends: by
its time limit from when its victims have left, or never without a limit. A job of the team
refused quota is estimated so, whether its quota's estimate was built after the preemption
(the quota's usage counts the preemptor: without its release it was held for good) or
before it (then the preemptor was not counted at all)."""

from __future__ import annotations

import pytest

from scheduler.types import MigInstance, Node, Policy, RunningJob

from .builders import A100, NOW, decide, job, mig_node, nodes, running, snap, team, waits
from .test_a_slice_job_displaces_its_teams_lower_classes_to_fit_its_quota import (
    SEVEN_1G,
    slice_holder,
)


@pytest.mark.parametrize(
    ("h_limit", "c_ends", "expected"),
    [
        # h holds 2 until NOW + 30 + 3600. Before: its GPUs held for good, so w waited for
        # c (NOW + 20000), the last of the team's jobs to end.
        (3600.0, 20000.0, NOW + 3630),
        # The same without c: before, no estimate at all.
        (3600.0, None, NOW + 3630),
        # h without a limit holds its 2 for good: w needs c's too.
        (None, 20000.0, NOW + 20000),
        (None, None, None),
    ],
)
def test_a_job_behind_its_teams_preemptor_is_estimated_to_start_when_the_preemptor_ends(
    h_limit: float | None, c_ends: float | None, expected: float | None
) -> None:
    # t (nominal 6 or 4) holds all of it: a (2, to NOW + 1000), b (low, 2) and maybe c (2).
    # h (t, high) is over the quota and displaces b, its team's lower class: b leaves by
    # NOW + 30, h takes its quota from now. w (t, normal, 4) is then refused quota, its
    # estimate built after the preemption.
    cluster = (Node("n1", A100, 8), Node("n2", A100, 8))
    busy = [
        running("a", {"n1": [0, 1]}, team="t", started=NOW - 600, limit=1600.0),
        running("b", {"n1": [2, 3]}, team="t", priority="low", started=NOW - 60, limit=9060.0),
    ]
    if c_ends is not None:
        busy.append(running("c", {"n1": [4, 5]}, team="t", started=NOW - 600, limit=600 + c_ends))
    nominal = 6.0 if c_ends is not None else 4.0
    pending = [
        job("h", team="t", gpus=2, priority="high", limit=h_limit),
        job("w", team="t", gpus=4, limit=3600.0),
    ]
    d = decide(snap(cluster, [team("t", nominal)], pending, busy))
    assert [(p.job_id, p.by_job_id) for p in d.preemptions] == [("b", "h")]
    w = waits(d)["w"]
    assert w.reason.code == "quota_exhausted", w.reason.message
    assert w.estimated_start == expected, w.estimated_start - NOW if w.estimated_start else None


@pytest.mark.parametrize(
    ("h_limit", "expected"),
    [
        # y's estimate took a's release (NOW + 1000) and holds 4 till NOW + 1100; h holds 2
        # until NOW + 30 + 3600. Before: NOW + 1100, as if h held nothing.
        (3600.0, NOW + 3630),
        (1800.0, NOW + 1830),
        # h without a limit holds 2 of the 4 for good: w (4) cannot know when.
        (None, None),
    ],
)
def test_a_quota_estimate_made_before_its_teams_preemption_counts_the_preemptor(
    h_limit: float | None, expected: float | None
) -> None:
    # t (nominal 4) holds a (high, 2, to NOW + 1000). In FIFO order within t's high class:
    # y (4) is refused quota and estimated, building t's quota estimate; h (2) fits the
    # quota but no node, and preempts v, u's low job on borrowed quota, for priority; w (t,
    # 4) is refused quota after it, its estimate from that same one. n2's 4 (x's, free by
    # NOW + 500) keep nodes from being what w waits for.
    cluster = (Node("n1", A100, 4), Node("n2", A100, 4))
    busy = [
        running("a", {"n1": [0, 1]}, team="t", priority="high", started=NOW - 600, limit=1600.0),
        running("v", {"n1": [2, 3]}, team="u", priority="low", started=NOW - 60),
        running("x1", {"n2": range(4)}, team="x", priority="high", started=NOW - 100, limit=600.0),
    ]
    pending = [
        job("y", team="t", gpus=4, priority="high", submit=NOW - 300, limit=100.0),
        job("h", team="t", gpus=2, priority="high", submit=NOW - 200, limit=h_limit),
        job("w", team="t", gpus=4, submit=NOW - 100),
    ]
    teams = [team("t", 4), team("u", 0, borrow=None), team("x", 4)]
    d = decide(snap(cluster, teams, pending, busy), Policy(fair_share=False))
    assert [(p.job_id, p.by_job_id, p.kind) for p in d.preemptions] == [("v", "h", "priority")]
    assert waits(d)["y"].reason.code == "quota_exhausted", waits(d)["y"].reason.message
    w = waits(d)["w"]
    assert w.reason.code == "quota_exhausted", w.reason.message
    assert w.estimated_start == expected, w.estimated_start - NOW if w.estimated_start else None


def u_holds_m1() -> list[RunningJob]:
    """Team u's low slice jobs on all seven instances of m1, on borrowed quota."""
    return [slice_holder(f"u-{i}", SEVEN_1G[i], "u", "low", started=NOW - 10) for i in range(7)]


@pytest.mark.parametrize(
    ("m1_layout", "busy", "nominal", "w_gpus", "kind"),
    [
        # m1 is idle: s, over t's quota, displaces t's low job b (to leave by NOW + 30).
        (
            (),
            [
                running("a", {"n1": [0, 1]}, team="t", started=NOW - 600, limit=1600.0),
                running(
                    "b", {"n1": [2, 3]}, team="t", priority="low", started=NOW - 10, limit=9010.0
                ),
            ],
            4.0,
            4,
            "priority",
        ),
        # Every instance of m1 is u's, on borrowed quota: s, within t's nominal, reclaims one.
        (
            [MigInstance(i.profile, i.start, i.size, f"u-{i.start}") for i in SEVEN_1G],
            [
                running("a", {"n1": [0, 1]}, team="t", priority="high", limit=1600.0),
                running("c", {"n1": [2, 3]}, team="t", priority="high", limit=2600.0),
                *u_holds_m1(),
            ],
            5.0,
            5,
            "reclaim",
        ),
    ],
    ids=["displacing-its-teams-low-job", "reclaiming-an-instance"],
)
def test_a_job_behind_its_teams_slice_preemptor_counts_its_slice_until_it_ends(
    m1_layout: tuple[MigInstance, ...] | list[MigInstance],
    busy: list[RunningJob],
    nominal: float,
    w_gpus: int,
    kind: str,
) -> None:
    # s (t, high, a 1g.10gb slice: 1/7 of a GPU, 3600 s) preempts; its victim leaves by
    # NOW + 30. w (t, normal) then needs all of t's nominal: the last 1/7 comes back when
    # s ends, at NOW + 3630. Before: s's slice was held for good, and w had no estimate.
    pending = [
        job("s", team="t", mig="1g.10gb", priority="high", limit=3600.0),
        job("w", team="t", gpus=w_gpus),
    ]
    teams = [team("t", nominal), team("u", 0, borrow=None)]
    d = decide(snap([*nodes(1), mig_node("m1", [m1_layout])], teams, pending, busy))
    assert [(p.by_job_id, p.kind) for p in d.preemptions] == [("s", kind)]
    w = waits(d)["w"]
    assert w.reason.code == "quota_exhausted", w.reason.message
    assert w.estimated_start == NOW + 3630, w.estimated_start
