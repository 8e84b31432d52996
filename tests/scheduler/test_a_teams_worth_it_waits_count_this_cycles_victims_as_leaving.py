"""The wait a priority preemption is weighed against (Policy.preemption_loss_ratio), for a job
displacing its team's lower classes to fit its quota, whole GPUs or a slice, counts a job of
the team preempted earlier in the same cycle as giving its GPUs back when it leaves (within
the grace), not at its limit (nor never, without a limit). Counting it so makes the wait
shorter: the team's nominal has room sooner, so the later job's displacement is refused as
not worth the work it throws away. Counted at its limit, a wait of minutes would read as
hours (or unknown) and the team's own work would be thrown away for it."""

from __future__ import annotations

import pytest

from scheduler.types import JobRequest, MigInstance, MigSlot, NodeAlloc, Placement, RunningJob

from .builders import A100, NOW, decide, job, mig_node, nodes, running, snap, team, waits

DAY = 86400.0


@pytest.mark.parametrize(
    ("v1_limit", "v2_ends_in", "v3_limit", "p_limit", "preempts"),
    [
        # V1 leaves by NOW + 30, V2 ends at NOW + 3,000: a's nominal has room for R then
        # (12,000 GPU-seconds of wait against 40,000 lost). Counted at its limit (NOW +
        # 40,000), V1 kept a at 12 until P's end: a wait of some 36,000 s, worth it.
        (41_000.0, 3000.0, 45_000.0, 36_000.0, False),
        # The same without limits for V1, V3 and P: counted as never ending, V1 made R's wait
        # unknown (always worth it).
        (None, 3000.0, None, None, False),
        # V2 ends after P: R's wait is P's end, some 36,000 s; V2's and V3's work is worth it.
        (41_000.0, 40_000.0, 45_000.0, 36_000.0, True),
    ],
)
def test_displacing_its_teams_lower_classes_is_weighed_against_a_wait_its_teams_victims_shorten(
    v1_limit: float | None,
    v2_ends_in: float,
    v3_limit: float | None,
    p_limit: float | None,
    preempts: bool,
) -> None:
    # Team a (nominal 12, borrows nothing) runs three low jobs of 4 GPUs: V1 (for 1,000 s),
    # V2 and V3 (for 5,000 s). P (a, high, 4) has n2's free GPUs but no quota: it displaces
    # V1, the one that loses least. R (a, high, 4) then has no nodes and no quota (a counts
    # 16: V1 until it leaves, and P): displacing V2 and V3 would fit it, if that is worth
    # their work.
    teams = [team("a", 12), team("b", 8)]
    busy = [
        running(
            "V1", {"n1": range(4)}, team="a", priority="low", started=NOW - 1000, limit=v1_limit
        ),
        running(
            "V2",
            {"n1": range(4, 8)},
            team="a",
            priority="low",
            started=NOW - 5000,
            limit=v2_ends_in + 5000,
        ),
        running(
            "V3", {"n2": range(4)}, team="a", priority="low", started=NOW - 5000, limit=v3_limit
        ),
    ]
    pending = [
        job("P", gpus=4, model=A100, priority="high", submit=NOW - 500, limit=p_limit),
        job("R", gpus=4, model=A100, priority="high", submit=NOW - 400, limit=3600.0),
    ]
    d = decide(snap(nodes(2), teams, pending, busy))
    reason = waits(d)["R"].reason
    by_r = [p.job_id for p in d.preemptions if p.by_job_id == "R"]
    assert [p.job_id for p in d.preemptions if p.by_job_id == "P"] == ["V1"]
    if preempts:
        assert by_r == ["V2", "V3"], reason
    else:
        assert by_r == [], reason
        assert reason.code == "quota_exhausted", reason
        assert dict(reason.details)["preemption_not_worth"] == {
            "lost_gpu_seconds": 40_000.0,
            "wait_gpu_seconds": 12_000.0,
        }


def b_slice(i: int) -> RunningJob:
    r = JobRequest(f"b-{i}", "b", "high", NOW - 100, 1, 1, None, "1g.10gb", DAY)
    slot = MigSlot(0, "1g.10gb", i, 1)
    return RunningJob(r, NOW - 90, Placement((NodeAlloc("m1", (), slot),)), A100)


@pytest.mark.parametrize(
    ("v1_limit", "w_limit", "t_limit", "p_limit", "preempts"),
    [
        # V1 leaves by NOW + 30, W ends at NOW + 600: a's nominal has room for the slice then
        # (86 GPU-seconds of wait against 480 lost). Counted at its limit (NOW + 40,000),
        # V1 kept a above its nominal until P's end: a wait of some 36,000 s, worth it.
        (40_100.0, 1200.0, DAY, 36_000.0, False),
        # The same without limits for V1, T and P: counted as never ending, V1 made the
        # slice's wait unknown (always worth it).
        (None, 1200.0, None, None, False),
        # W ends after P: the slice's wait is P's end, some 36,000 s; T's work is worth it.
        (40_100.0, 2 * DAY, DAY, 36_000.0, True),
    ],
)
def test_a_slice_displacing_its_teams_lower_classes_is_weighed_against_a_wait_its_victims_shorten(
    v1_limit: float | None,
    w_limit: float,
    t_limit: float | None,
    p_limit: float | None,
    preempts: bool,
) -> None:
    # Team a (nominal 16, borrows nothing) runs V1 (low, 4 GPUs, for 100 s), W (high, 4,
    # for 600 s) and T (normal, 8, for 60 s). P (a, high, 4) has n3 but no quota: it
    # displaces V1, the lowest class. The slice job (a, high, 1g.10gb) has m1's free
    # instance (b's high jobs hold the six others) but no quota (a counts 20: V1 until it
    # leaves, and P): displacing T would fit it, if that is worth T's work.
    layout = [MigInstance("1g.10gb", i, 1, f"b-{i}" if i < 6 else None) for i in range(7)]
    teams = [team("a", 16), team("b", 8)]
    busy = [
        running(
            "V1", {"n1": range(4)}, team="a", priority="low", started=NOW - 100, limit=v1_limit
        ),
        running(
            "W", {"n1": range(4, 8)}, team="a", priority="high", started=NOW - 600, limit=w_limit
        ),
        running(
            "T", {"n2": range(8)}, team="a", priority="normal", started=NOW - 60, limit=t_limit
        ),
        *(b_slice(i) for i in range(6)),
    ]
    pending = [
        job("P", gpus=4, model=A100, priority="high", submit=NOW - 500, limit=p_limit),
        job("s", mig="1g.10gb", model=A100, priority="high", submit=NOW - 400, limit=DAY),
    ]
    d = decide(snap([*nodes(3), mig_node("m1", [layout])], teams, pending, busy))
    reason = waits(d)["s"].reason
    by_s = [p.job_id for p in d.preemptions if p.by_job_id == "s"]
    assert [p.job_id for p in d.preemptions if p.by_job_id == "P"] == ["V1"]
    if preempts:
        assert by_s == ["T"], reason
    else:
        assert by_s == [], reason
        assert reason.code == "quota_exhausted", reason
        not_worth = dict(reason.details)["preemption_not_worth"]
        assert not_worth["lost_gpu_seconds"] == 480.0, reason
        assert not_worth["wait_gpu_seconds"] == pytest.approx(600 / 7, abs=0.1), reason
