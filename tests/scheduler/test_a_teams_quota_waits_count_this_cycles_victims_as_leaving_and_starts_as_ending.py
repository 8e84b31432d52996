"""When a team's nominal frees, as the cycle's decisions about its quota read it, counts what
this cycle did to the team's jobs on it: one it preempts gives its GPUs back when it leaves
(within the grace), not at its limit (nor never, without a limit), and one it starts or that
preempts ends by its limit. The nominal a waiting tier-0 job holds (held_back: a later job
of the team passes when the nominal has room for both by the holder's start) and the wait a
priority preemption is weighed against (Policy.preemption_loss_ratio, for a job displacing
its team's lower classes to fit its quota, whole GPUs or a slice) read it so. Before, the
hold counted the victim as running to its limit, so a later job was held back though the
room was there in time; and the weighing counted a job started this cycle as holding its
GPUs for good, so a wait of minutes read as hours (or unknown) and the team's own work was
thrown away for it."""

from __future__ import annotations

import pytest

from scheduler.types import JobRequest, MigInstance, MigSlot, NodeAlloc, Placement, RunningJob

from .builders import (
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

DAY = 86400.0


@pytest.mark.parametrize(
    ("v_limit", "b2_limit", "l_starts"),
    [
        # V leaves by NOW + 30, before G's start (NOW + 2000): a's nominal holds P, G and L.
        (36_000.0, 2100.0, True),
        # The same for a victim without a limit (before, its end was not known at all).
        (None, 2100.0, True),
        # G starts at NOW + 20, before V has left: L would keep G waiting.
        (36_000.0, 120.0, False),
    ],
)
def test_a_later_job_passes_the_hold_when_its_teams_victim_leaves_by_the_holders_start(
    v_limit: float | None, b2_limit: float, l_starts: bool
) -> None:
    # Team a (nominal 20, borrows nothing) runs its low job V on all of n1. P (a, high, 8
    # A100) finds no node with 8 free and preempts V for priority: V leaves by NOW + 30, P
    # holds 8 until its limit. G (a, 4 H100) fits a's nominal with P and V but waits for h1
    # (b2 there) and holds 4. L (a, 4 A100, ends at NOW + 3600) fits n2's 4 free GPUs and
    # a's nominal now, but not with G while V is counted: it passes only if V has left by
    # G's start.
    cluster = (*nodes(2), *nodes(1, model=H100, prefix="h"))
    teams = [team("a", 20), team("b", 16)]
    busy = [
        running("V", {"n1": range(8)}, team="a", priority="low", started=NOW - 60, limit=v_limit),
        running("b1", {"n2": range(4)}, team="b", priority="high", limit=9000.0),
        running(
            "b2", {"h1": range(5)}, team="b", priority="high", started=NOW - 100, limit=b2_limit
        ),
    ]
    pending = [
        job("P", gpus=8, model=A100, priority="high", submit=NOW - 500, limit=36_000.0),
        job("G", gpus=4, model=H100, submit=NOW - 400),
        job("L", gpus=4, model=A100, submit=NOW - 300, limit=3600.0),
    ]
    d = decide(snap(cluster, teams, pending, busy))
    assert [(p.job_id, p.by_job_id) for p in d.preemptions] == [("V", "P")]
    assert waits(d)["G"].estimated_start == NOW + b2_limit - 100
    if l_starts:
        assert "L" in started(d), waits(d)["L"].reason
    else:
        assert dict(waits(d)["L"].reason.details).get("held_for") == "G", waits(d)["L"].reason


@pytest.mark.parametrize(
    ("s_limit", "v_limit", "preempts"),
    [
        # S ends at NOW + 600: R waits 600 s for 4 GPUs (2,400 GPU-seconds); V would lose
        # 4,000. Before, S's GPUs counted as held for good: R waited for V's limit.
        (600.0, 36_000.0, False),
        # The same with V without a limit (before, R's wait was not known: always worth it).
        (600.0, None, False),
        # S ends after V: R's wait is V's, some 35,000 s; V's work is worth losing.
        (40_000.0, 36_000.0, True),
    ],
)
def test_displacing_its_teams_lower_classes_is_weighed_against_the_wait_its_teams_starts_make(
    s_limit: float, v_limit: float | None, preempts: bool
) -> None:
    # Team a (nominal 8, borrows nothing) runs its low job V (4 GPUs, for 1,000 s). S (a,
    # high, 4) starts this cycle on the rest of a's nominal. R (a, high, 4) then has nodes
    # but no quota: displacing V would fit it, if that is worth V's work.
    teams = [team("a", 8), team("b", 8)]
    busy = [
        running("V", {"n1": range(4)}, team="a", priority="low", started=NOW - 1000, limit=v_limit)
    ]
    pending = [
        job("S", gpus=4, model=A100, priority="high", submit=NOW - 500, limit=s_limit),
        job("R", gpus=4, model=A100, priority="high", submit=NOW - 400, limit=3600.0),
    ]
    d = decide(snap(nodes(2), teams, pending, busy))
    assert "S" in started(d)
    reason = waits(d)["R"].reason
    if preempts:
        assert [(p.job_id, p.by_job_id) for p in d.preemptions] == [("V", "R")], reason
    else:
        assert d.preemptions == ()
        assert reason.code == "quota_exhausted", reason
        assert dict(reason.details)["preemption_not_worth"] == {
            "lost_gpu_seconds": 4000.0,
            "wait_gpu_seconds": 2400.0,
        }


def b_slice(i: int) -> RunningJob:
    r = JobRequest(f"b-{i}", "b", "high", NOW - 100, 1, 1, None, "1g.10gb", DAY)
    slot = MigSlot(0, "1g.10gb", i, 1)
    return RunningJob(r, NOW - 90, Placement((NodeAlloc("m1", (), slot),)), A100)


@pytest.mark.parametrize(
    ("s_limit", "preempts"),
    [
        # S ends at NOW + 600: the slice waits 600 s for 1/7 of a GPU (86 GPU-seconds);
        # the training job would lose 480. Before, S held its GPU for good: the slice
        # waited for the training job's limit, a day.
        (600.0, False),
        # S ends after the training job: the slice's wait is a day; 480 is worth losing.
        (2 * DAY, True),
    ],
)
def test_a_slice_displacing_its_teams_lower_classes_is_weighed_against_its_teams_starts(
    s_limit: float, preempts: bool
) -> None:
    # Team a (nominal 9, borrows nothing) runs its training job on n1 (8 GPUs, for 60 s).
    # S (a, high, 1 GPU) starts this cycle on n2, the rest of a's nominal. The slice job
    # (a, high, 1g.10gb) has m1's free instance (b's high jobs hold the six others) but no
    # quota: displacing the training job would fit it, if that is worth the work.
    layout = [MigInstance("1g.10gb", i, 1, f"b-{i}" if i < 6 else None) for i in range(7)]
    teams = [team("a", 9), team("b", 8)]
    busy = [
        running("train", {"n1": range(8)}, team="a", started=NOW - 60, limit=DAY),
        *(b_slice(i) for i in range(6)),
    ]
    pending = [
        job("S", gpus=1, model=A100, priority="high", submit=NOW - 500, limit=s_limit),
        job("s", mig="1g.10gb", model=A100, priority="high", submit=NOW - 400, limit=DAY),
    ]
    d = decide(snap([*nodes(2), mig_node("m1", [layout])], teams, pending, busy))
    assert "S" in started(d)
    reason = waits(d)["s"].reason
    if preempts:
        assert [(p.job_id, p.by_job_id) for p in d.preemptions] == [("train", "s")], reason
    else:
        assert d.preemptions == ()
        assert reason.code == "quota_exhausted", reason
        not_worth = dict(reason.details)["preemption_not_worth"]
        assert not_worth["lost_gpu_seconds"] == 480.0, reason
