"""A reserved job's hold on quota (EASY backfill, Ledger.hold_for) is what its team will
still have to borrow at the reserved start: the team's own jobs that end by then by their
limits (those started this cycle too) give back their quota first, and a job of unknown end
counts as still running. Quota the reserved job will not borrow is not held from other
teams' jobs that could borrow it now.
"""

from __future__ import annotations

import pytest

from scheduler.types import RunningJob

from .builders import A100, H100, NOW, decide, job, nodes, running, snap, started, team, waits

# Team a (nominal 8, borrows without limit) runs on n1. J (team a, 8 A100 GPUs) borrows
# now, since a uses its nominal, but waits for nodes: e's job (e lends none of its nominal)
# holds n2 until NOW+3000, so J is reserved from then at the latest. S (team b, nominal 0,
# a low-class job of 8 H100 GPUs for ten hours, so after J) could borrow team c's 8 idle
# GPUs, the only quota lent, on the idle H100 node now; it never touches the A100 nodes J
# waits for.
CLUSTER = nodes(2) + nodes(1, model=H100, prefix="h")
TEAMS = [
    team("a", 8, borrow=None),
    team("b", 0, borrow=None),
    team("c", 8),
    team("e", 8, model=A100, lending=0),
]
E_JOB = running("e1", {"n2": range(8)}, team="e", started=NOW - 600, limit=3600.0)
J = job("J", team="a", gpus=8, model=A100, submit=NOW - 200, limit=3600.0)
S = job("S", team="b", gpus=8, model=H100, priority="low", submit=NOW - 100, limit=36_000.0)

HELD_8 = (
    "team b uses 0 of 0 * GPUs; borrowing limit unlimited, but only 0 idle GPUs of other"
    " teams can be lent (needs 8); 8 more are lent only to jobs that end sooner"
)
HELD_4 = (
    "team b uses 0 of 0 * GPUs; borrowing limit unlimited, but only 4 idle GPUs of other"
    " teams can be lent (needs 8); 4 more are lent only to jobs that end sooner"
)


@pytest.mark.parametrize(
    ("a_jobs", "reserved_at", "s_refused"),
    [
        # a's job ends when J's reservation starts: J then fits a's nominal, borrows nothing.
        pytest.param(
            [running("a1", {"n1": range(8)}, team="a", limit=3600.0)],
            NOW + 3000,
            None,
            id="own-job-ends-at-the-start",
        ),
        # a's job ends before J could start (J waits for n2 either way).
        pytest.param(
            [running("a1", {"n1": range(8)}, team="a", limit=1000.0)],
            NOW + 400,
            None,
            id="own-job-ends-before-the-start",
        ),
        # Half of a's usage ends by then: J borrows 4 then, and only those 4 are held.
        pytest.param(
            [
                running("a1", {"n1": range(4)}, team="a", limit=1000.0),
                running("a2", {"n1": range(4, 8)}, team="a", limit=36_000.0),
            ],
            NOW + 3000,
            HELD_4,
            id="part-of-its-usage-ends-by-the-start",
        ),
        # a's job outlasts J's start (on n2): J borrows all 8 then, all held.
        pytest.param(
            [running("a1", {"n1": range(8)}, team="a", limit=6000.0)],
            NOW + 3000,
            HELD_8,
            id="own-job-outlasts-the-start",
        ),
        # A job of unknown end counts as running then.
        pytest.param(
            [running("a1", {"n1": range(8)}, team="a", limit=None)],
            NOW + 3000,
            HELD_8,
            id="own-job-without-a-limit",
        ),
    ],
)
def test_a_reservation_holds_only_what_its_team_still_borrows_at_its_start(
    a_jobs: list[RunningJob], reserved_at: float, s_refused: str | None
) -> None:
    d = decide(snap(CLUSTER, TEAMS, [J, S], [E_JOB, *a_jobs]))

    wait = waits(d)["J"]
    assert wait.reserved and wait.estimated_start == reserved_at, wait.reason
    if s_refused is None:
        assert "S" in started(d), waits(d)["S"].reason
        assert started(d)["S"].borrowed
    else:
        assert "S" not in started(d)
        reason = waits(d)["S"].reason
        assert (reason.code, reason.message) == ("quota_exhausted", s_refused)


def test_a_reservation_counts_its_teams_jobs_started_this_cycle_that_end_by_then() -> None:
    """P (team a, 8 GPUs, 1000 s) starts now on a's idle nominal on n1; J, behind it, would
    borrow all 8 now and is reserved n1 from P's end, when a uses nothing: J holds no quota,
    and S borrows c's idle GPUs."""
    p = job("P", team="a", gpus=8, model=A100, submit=NOW - 300, limit=1000.0)
    d = decide(snap(CLUSTER, TEAMS, [p, J, S], [E_JOB]))

    assert "P" in started(d)
    wait = waits(d)["J"]
    assert wait.reserved and wait.estimated_start == NOW + 1000, wait.reason
    assert "S" in started(d), waits(d)["S"].reason


@pytest.mark.parametrize("a1_limit", [6000.0, None], ids=["ends-after-the-start", "no-limit"])
def test_a_reservation_counts_its_teams_job_preempted_this_cycle_as_gone_within_the_grace(
    a1_limit: float | None,
) -> None:
    """a (nominal 4 here) borrows 4 with a1 (8 GPUs on n1, by its limit until NOW+5400, or
    of unknown end). D (team d, within its nominal 4) reclaims a1 this cycle: a1 leaves
    within the grace, long before J's reserved start at NOW+3000 (n2), when J then borrows
    no more than a borrows now: J holds no quota, and S borrows 8 of c's 12 idle GPUs left
    (by a1's limit J would hold 8 of them until then)."""
    teams = [
        team("a", 4, borrow=None),
        team("b", 0, borrow=None),
        team("c", 16),
        team("d", 4, borrow=None),
        team("e", 8, model=A100, lending=0),
    ]
    cluster = nodes(2) + nodes(2, model=H100, prefix="h")
    a1 = running("a1", {"n1": range(8)}, team="a", started=NOW - 600, limit=a1_limit)
    d_job = job("D", team="d", gpus=4, model=A100, submit=NOW - 300, limit=3600.0)

    d = decide(snap(cluster, teams, [d_job, J, S], [E_JOB, a1]))

    assert [(p.job_id, p.by_job_id, p.kind) for p in d.preemptions] == [("a1", "D", "reclaim")]
    wait = waits(d)["J"]
    assert wait.reserved and wait.estimated_start == NOW + 3000, wait.reason
    assert "S" in started(d), waits(d)["S"].reason
    assert started(d)["S"].borrowed
