"""Scheduling order: class first, fair share between teams, FIFO within a team."""

from __future__ import annotations

import pytest

from scheduler.order import Standing, decayed_usage, order_keys
from scheduler.types import Policy, Team, UsageBucket

from .builders import NOW, decide, job, nodes, snap, team


def order_of(d) -> list[str]:  # type: ignore[no-untyped-def]
    return [s.job_id for s in d.starts] + [
        w.job_id for w in sorted(d.waits, key=lambda w: w.position)
    ]


def test_higher_priority_class_is_scheduled_first() -> None:
    s = snap(
        nodes(1, gpus=1),
        [team("a", 8)],
        [
            job("old-low", priority="low", submit=NOW - 900),
            job("new-high", priority="high", submit=NOW - 1),
        ],
    )
    d = decide(s)
    assert [x.job_id for x in d.starts] == ["new-high"]


@pytest.mark.parametrize(
    "submit_order",
    [
        ["a"] * 6 + ["b"] * 6,  # team a floods first
        ["b"] * 6 + ["a"] * 6,  # team b floods first
        ["a", "b"] * 6,
    ],
)
def test_two_equal_teams_flooding_get_equal_service_whatever_the_submit_order(
    submit_order: list[str],
) -> None:
    pending = [job(f"{t}{i}", team=t, submit=NOW - 100) for i, t in enumerate(submit_order)]
    # Nominal quotas cover all six jobs of either team: only fair share decides.
    s = snap(nodes(1, gpus=6), [team("a", 6), team("b", 6)], pending)
    d = decide(s)
    teams = [x.job_id[0] for x in d.starts]
    assert sorted(teams) == ["a", "a", "a", "b", "b", "b"]


def test_team_with_heavy_recent_usage_goes_after_a_fresh_team() -> None:
    heavy = team("heavy", 4, borrow=4, usage=[(NOW - 3600, 1e6)])
    fresh = team("fresh", 4, borrow=4)
    s = snap(
        nodes(1, gpus=1),
        [heavy, fresh],
        [job("h", team="heavy", submit=NOW - 500), job("f", team="fresh", submit=NOW - 1)],
    )
    assert [x.job_id for x in decide(s).starts] == ["f"]


@pytest.mark.parametrize(
    ("age_s", "half_life_s", "expected"),
    [(0.0, 100.0, 1000.0), (100.0, 100.0, 500.0), (300.0, 100.0, 125.0), (-50.0, 100.0, 1000.0)],
)
def test_usage_decays_with_the_half_life(age_s: float, half_life_s: float, expected: float) -> None:
    t = Team("x", usage=(UsageBucket(NOW - age_s, 1000.0),))
    assert decayed_usage(t, NOW, half_life_s) == pytest.approx(expected)


def test_fifo_within_a_team_and_ties_broken_by_id() -> None:
    pending = [job("c", submit=NOW - 5), job("b", submit=NOW - 9), job("a", submit=NOW - 9)]
    d = decide(snap(nodes(1, gpus=1), [team("a", 1)], pending))
    assert order_of(d) == ["a", "b", "c"]


def test_jobs_within_nominal_go_before_higher_class_jobs_that_would_borrow() -> None:
    # Team b is far above its nominal: its high job would borrow; team a's low job is within
    # nominal, so it comes first (otherwise GPUs a reclaims would go back to b).
    s = snap(
        nodes(1, gpus=1),
        [team("a", 4, borrow=4), team("b", 0, borrow=8)],
        [job("b-high", team="b", priority="high"), job("a-low", team="a", priority="low")],
    )
    assert [x.job_id for x in decide(s).starts] == ["a-low"]


def test_baseline_order_is_submit_order_whatever_the_class() -> None:
    idx, _ = order_keys(
        ["a", "b", "c"], [0, 0, 0], [3.0, 1.0, 2.0], ["x", "y", "z"], [1.0, 1.0, 1.0], None
    )
    assert idx == [1, 2, 0]


def test_progressive_filling_serves_the_team_furthest_below_its_share() -> None:
    # Team a already runs half the cluster; b and c run nothing: b and c go first.
    standing = {"a": Standing(1.0, 0.5), "b": Standing(0.0, 0.25), "c": Standing(0.0, 0.25)}
    idx, _ = order_keys(
        ["a", "a", "b", "c"],
        [0] * 4,
        [0.0, 1.0, 2.0, 3.0],
        ["a1", "a2", "b1", "c1"],
        [0.1] * 4,
        standing,
    )
    assert idx[:2] == [2, 3]


def test_fair_share_can_be_switched_off() -> None:
    pending = [
        job("a1", team="a", submit=NOW - 9),
        job("a2", team="a", submit=NOW - 8),
        job("b1", team="b", submit=NOW - 1),
    ]
    s = snap(nodes(1, gpus=2), [team("a", 2, borrow=2), team("b", 2, borrow=2)], pending)
    assert {x.job_id for x in decide(s, Policy(fair_share=False)).starts} == {"a1", "a2"}
    assert {x.job_id for x in decide(s).starts} == {"a1", "b1"}
