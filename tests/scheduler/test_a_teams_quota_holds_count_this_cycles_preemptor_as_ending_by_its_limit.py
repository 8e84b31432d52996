"""A job that preempts this cycle holds its team's quota from now (the cycle commits it)
until it ends: by its time limit from when its victims have left, or never without a limit.
The team's holds that decide starts count it so: the nominal a waiting tier-0 job holds
(held_back: a later job of the team passes when the nominal has room for both by the
holder's start) and the quota a reserved job will borrow (hold_borrowed). Before, its GPUs
counted as held for good, so a later job was held back and quota sat idle."""

from __future__ import annotations

import pytest

from .builders import A100, H100, NOW, decide, job, nodes, running, snap, started, team, waits


@pytest.mark.parametrize(
    ("p_limit", "l_starts"),
    [
        # P ends at NOW + 30 + 600: by G's start (NOW + 2000) a's nominal holds G and L.
        (600.0, True),
        # P ends at NOW + 30 + 3600, after G's start: L would keep G waiting.
        (3600.0, False),
        # P without a limit holds its 4 for good.
        (None, False),
    ],
)
def test_a_later_job_passes_the_hold_when_its_teams_preemptor_ends_by_the_holders_start(
    p_limit: float | None, l_starts: bool
) -> None:
    # Team a (nominal 8, borrows nothing) runs nothing. P (a, high, 4 A100) finds no node
    # with 4 free and reclaims one of u's borrowed jobs on n1: its victim leaves by NOW + 30.
    # G (a, 4 H100) fits a's nominal with P but waits for h1 until NOW + 2000 (b's job
    # there), and holds 4. L (a, 2 A100, ends at NOW + 3600) fits n2's 2 free GPUs and a's
    # nominal now, but not with G: it passes only if P gives its 4 back by NOW + 2000.
    cluster = (*nodes(2), *nodes(1, model=H100, prefix="h"))
    teams = [team("a", 8), team("b", 16), team("u", 0, borrow=None)]
    busy = [
        running("u1", {"n1": range(4)}, team="u", priority="low", started=NOW - 60),
        running("u2", {"n1": range(4, 8)}, team="u", priority="low", started=NOW - 60),
        running("b1", {"n2": range(6)}, team="b", priority="high", limit=9000.0),
        running("b2", {"h1": range(5)}, team="b", priority="high", started=NOW - 100, limit=2100.0),
    ]
    pending = [
        job("P", gpus=4, model=A100, priority="high", submit=NOW - 500, limit=p_limit),
        job("G", gpus=4, model=H100, submit=NOW - 400),
        job("L", gpus=2, model=A100, submit=NOW - 300, limit=3600.0),
    ]
    d = decide(snap(cluster, teams, pending, busy))
    assert [p.by_job_id for p in d.preemptions] == ["P"]
    assert waits(d)["G"].estimated_start == NOW + 2000
    if l_starts:
        assert "L" in started(d), waits(d)["L"].reason
    else:
        assert dict(waits(d)["L"].reason.details).get("held_for") == "G", waits(d)["L"].reason


@pytest.mark.parametrize(
    ("p_limit", "reserved_at", "s_starts"),
    [
        # P ends at NOW + 30 + 1000, J's start on n1: then J fits a's nominal, holds nothing.
        (1000.0, NOW + 1030, True),
        # P ends after J's start on n2 (NOW + 3000): J borrows 8 then, held from S.
        (6000.0, NOW + 3000, False),
        # P without a limit holds its 8 for good.
        (None, NOW + 3000, False),
    ],
)
def test_a_reservation_counts_its_teams_preemptor_as_giving_back_its_quota_at_its_end(
    p_limit: float | None, reserved_at: float, s_starts: bool
) -> None:
    # Team a (nominal 8, borrows without limit) runs nothing. P (a, high, 8 A100) reclaims
    # n1 from u's borrowed job: u1 leaves by NOW + 30. J (a, 8 A100) would borrow all 8 now
    # and waits for nodes: e's job holds n2 until NOW + 3000, P n1 until it ends. S (team
    # b, a low job of 8 H100 for ten hours, after J) could borrow c's 8 idle GPUs on h1 now.
    cluster = (*nodes(2), *nodes(1, model=H100, prefix="h"))
    teams = [
        team("a", 8, borrow=None),
        team("b", 0, borrow=None),
        team("c", 16),
        team("e", 8, model=A100, lending=0),
        team("u", 0, borrow=None),
    ]
    busy = [
        running("u1", {"n1": range(8)}, team="u", priority="low", started=NOW - 60),
        running("e1", {"n2": range(8)}, team="e", started=NOW - 600, limit=3600.0),
    ]
    pending = [
        job("P", gpus=8, model=A100, priority="high", submit=NOW - 300, limit=p_limit),
        job("J", gpus=8, model=A100, submit=NOW - 200, limit=3600.0),
        job("S", team="b", gpus=8, model=H100, priority="low", submit=NOW - 100, limit=36_000.0),
    ]
    d = decide(snap(cluster, teams, pending, busy))
    assert [p.by_job_id for p in d.preemptions] == ["P"]
    j = waits(d)["J"]
    assert j.reserved and j.estimated_start == reserved_at, j.reason
    if s_starts:
        assert "S" in started(d), waits(d)["S"].reason
    else:
        reason = waits(d)["S"].reason
        assert dict(reason.details)["lendable_to_shorter_jobs"] == 8.0, reason
