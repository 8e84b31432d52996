"""The nominal a team's waiting job holds (FIFO within a team, test_team_fifo.py), at its
edges: jobs started earlier in the cycle, classes, any-model jobs, MIG slices, estimates,
and the holder's earliest start worked out when it is held rather than cached earlier."""

from __future__ import annotations

from scheduler.types import MigInstance
from tests.scheduler.builders import (
    A100,
    H100,
    NOW,
    decide,
    job,
    mig_node,
    nodes,
    running,
    snap,
    started,
    team,
    waits,
)
from tests.scheduler.test_team_fifo import cluster


def test_a_job_started_this_cycle_that_ends_before_the_holder_does_not_hold_back_the_next() -> None:
    # held_back's docstring and schedule() step 3: a later job may pass "if the nominal has
    # room for both by [the holder's] earliest start". Team a (nominal 8) runs ra (2 GPUs,
    # ends +1000); its H100 job G (4 GPUs) waits for the H100 node until +2000 and holds 4.
    # L1 (2 GPUs, ends +1500) passes, as it ends first. L2 (4 GPUs): by +2000 ra and L1
    # have ended, so the nominal holds L2 + G (8 of 8), and L2 starts without L1 (checked
    # below). But nominal_free_at counts only the snapshot's running jobs' ends while
    # `used` includes L1, so L1 counts as never ending and L2 is held back -- with an
    # estimated start of +1500, before the +2000 it is held until.
    nodes_ = [*nodes(2), *nodes(1, model=H100, prefix="h")]
    teams = [team("a", 8), team("b", 16)]
    busy = [
        running("ra", {"n1": range(2)}, team="a", started=NOW - 100, limit=1100.0),
        running("rb", {"h1": range(6)}, team="b", started=NOW - 100, limit=2100.0, model=H100),
    ]
    g = job("G", gpus=4, model=H100, submit=NOW - 500)
    l1 = job("L1", gpus=2, model=A100, submit=NOW - 400, limit=1500.0)
    l2 = job("L2", gpus=4, model=A100, submit=NOW - 300, limit=3600.0)
    assert "L2" in started(decide(snap(nodes_, teams, [g, l2], busy)))  # without L1
    d = decide(snap(nodes_, teams, [g, l1, l2], busy))
    assert "L1" in started(d)
    assert "L2" in started(d), waits(d)["L2"]


def test_a_higher_class_job_of_the_team_is_not_held_back_by_a_lower_class_holder() -> None:
    # Issue, Order: "priority class value first; ... within a team, FIFO by submit time".
    # The hold gives FIFO within a team; a job of a higher class is not behind it. Team a
    # (nominal 4, unlimited borrowing) has a low-class H100 job G
    # waiting for nodes until +2000; its normal-class job H (6 GPUs, larger than the
    # nominal, so tier 1) may borrow team b's idle quota and 8 A100 GPUs are idle: it
    # starts, rather than waiting behind a job of a lower class.
    nodes_ = [*nodes(2), *nodes(1, model=H100, prefix="h")]
    teams = [team("a", 4, borrow=None), team("b", 16)]
    busy = [running("rb", {"h1": range(6)}, team="b", started=NOW - 100, limit=2100.0, model=H100)]
    pending = [
        job("G", gpus=4, model=H100, priority="low", submit=NOW - 500),
        job("H", gpus=6, model=A100, priority="normal", submit=NOW - 300),
    ]
    d = decide(snap(nodes_, teams, pending, busy))
    assert "H" in started(d), waits(d)["H"]


def test_an_any_model_gang_of_a_team_with_one_star_quota_holds_that_nominal() -> None:
    # A job for any model on a cluster of several models draws on a known quota when its
    # team has only one (here "*", the builders' default). test_team_fifo's first scenario
    # with one extra, busy H100 node: `later` is held back whether `gang` names A100 or
    # asks for any model.
    nodes_, teams, busy, ahead = cluster()
    nodes_ = (*nodes_, *nodes(1, model=H100, prefix="h"))
    teams = [*teams, team("d", 8)]
    busy = [
        *busy,
        running("rh", {"h1": range(8)}, team="d", started=NOW - 100, limit=9100.0, model=H100),
    ]
    named = [
        *ahead,
        job("gang", gpus=8, model=A100, submit=NOW - 400),
        job("later", gpus=2, model=A100, submit=NOW - 300, limit=3600.0),
    ]
    assert "later" not in started(decide(snap(nodes_, teams, named, busy)))
    pending = [
        *ahead,
        job("gang", gpus=8, submit=NOW - 400),
        job("later", gpus=2, submit=NOW - 300, limit=3600.0),
    ]
    d = decide(snap(nodes_, teams, pending, busy))
    assert "later" not in started(d)
    assert dict(waits(d)["later"].reason.details).get("held_for") == "gang"


def test_a_short_slice_job_passes_the_hold_even_after_a_long_one_of_its_kind_was_held() -> None:
    # Rule (held_back, reasons.quota_held): a later job "waits too unless its time limit
    # ends before that start". Team a (nominal 8, lends nothing) has G (8 A100) waiting for
    # nodes until +2000. S1 (1g.10gb, 3600 s) is rightly held back. S2, same kind, ends at
    # +600 and starts when alone (checked below): after S1 is held back, S2 of the same
    # kind is still tried, as whole-GPU jobs of a held-back kind are.
    seven = [MigInstance("1g.10gb", s, 1) for s in range(7)]
    nodes_ = [*nodes(1), mig_node("m1", [seven])]
    teams = [team("a", 8, lending=0.0), team("b", 8)]
    busy = [running("rb", {"n1": range(2)}, team="b", started=NOW - 100, limit=2100.0)]
    g = job("G", gpus=8, model=A100, submit=NOW - 500)
    s1 = job("S1", mig="1g.10gb", model=A100, submit=NOW - 400, limit=3600.0)
    s2 = job("S2", mig="1g.10gb", model=A100, submit=NOW - 300, limit=600.0)
    assert "S2" in started(decide(snap(nodes_, teams, [g, s2], busy)))
    d = decide(snap(nodes_, teams, [g, s1, s2], busy))
    assert "S1" not in started(d)
    assert "S2" in started(d), waits(d)["S2"]


def test_a_held_back_job_is_not_estimated_to_start_before_the_holder_can() -> None:
    # schedule() step 6 / issue: waiting jobs get an estimated start "where known". A job
    # held back waits at least until the holder's earliest start (the hold's `until`,
    # here +2000: n1 frees then and `gang` is reserved for +2000); only then can it use
    # the nominal. With the gang's limit at 500 s, counting the gang as holding its GPUs
    # from now to +500 would say `later` starts at +500, when it would still be held back
    # (a's running jobs end at +3000 at the earliest).
    nodes_, teams, busy, ahead = cluster()
    pending = [
        *ahead,
        job("gang", gpus=8, submit=NOW - 400, limit=500.0),
        job("later", gpus=2, submit=NOW - 300, limit=3600.0),
    ]
    d = decide(snap(nodes_, teams, pending, busy))
    w = waits(d)
    assert dict(w["later"].reason.details)["held_for"] == "gang"
    assert w["gang"].estimated_start == NOW + 2000
    at = w["later"].estimated_start
    assert at is None or at >= NOW + 2000, at - NOW


def test_a_short_job_passes_the_hold_whatever_another_teams_refused_job_asked() -> None:
    # Rule: a later job whose time limit ends before the holder's earliest start may pass.
    # Team a's G (1x8) waits: n1 is reserved for team d's gang R from +1000, G is estimated
    # at +2000 and its shape fits nodes no sooner than +1000. Team a's L (2 GPUs, ends at
    # +500) passes, with or without Q: team q's 1x8 job refused for max_running_jobs before
    # n1 was reserved, whose estimate works out (and caches) where a 1x8 fits while n1 is
    # still free. G's earliest start is worked out when G is held, not taken from there.
    teams = [team("a", 8), team("d", 16), team("x", 24), team("q", 8, max_jobs=0)]
    busy = [
        running("x2", {"n2": range(8)}, team="x", priority="high", started=NOW - 100, limit=1100.0),
        running("x3", {"n3": range(8)}, team="x", priority="high", started=NOW - 100, limit=2100.0),
        running("x4", {"n4": range(6)}, team="x", priority="high", started=NOW - 100, limit=3100.0),
    ]
    q = job("Q", team="q", gpus=8, priority="high", submit=NOW - 900)
    pending = [
        job("R", team="d", gpus=8, nodes=2, priority="high", submit=NOW - 800),
        job("G", gpus=8, submit=NOW - 500),
        job("L", gpus=2, submit=NOW - 400, limit=500.0),
    ]
    assert "L" in started(decide(snap(nodes(4), teams, pending, busy)))
    d = decide(snap(nodes(4), teams, [q, *pending], busy))
    assert "L" in started(d), waits(d)["L"]
