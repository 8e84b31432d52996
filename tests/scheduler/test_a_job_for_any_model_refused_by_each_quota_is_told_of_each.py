"""A job for any GPU model (whole GPUs or a slice), of a team with a quota on several models,
refused by each: its reason names what each quota says, not only the first model's (which
would send its owner to ask for more of one model while the other is as full)."""

from __future__ import annotations

import pytest

from scheduler.types import (
    JobRequest,
    MigInstance,
    MigSlot,
    NodeAlloc,
    Placement,
    Quota,
    RunningJob,
    Snapshot,
    Team,
)

from .builders import A100, H100, NOW, decide, job, mig_node, nodes, running, snap, started, waits

# Each needs half its team's nominal, so the team's smaller jobs may pass it meanwhile.
PASSED = (
    "; a job refused quota holds none of its team's nominal quota, so the team's smaller jobs"
    " may start before it, later ones too"
)


def _two_models(a100_used: int, h100_used: int) -> tuple[list[Team], list, tuple]:
    a = Team("a", 1.0, (Quota(A100, 8, 0.0), Quota(H100, 8, 0.0)), ())
    busy = []
    if a100_used:
        busy.append(running("ra", {"n1": range(a100_used)}))
    if h100_used:
        busy.append(running("rh", {"h1": range(h100_used)}, model=H100))
    return [a], busy, nodes(2) + nodes(2, model=H100, prefix="h")


@pytest.mark.parametrize(
    ("a100_used", "h100_used", "said"),
    [
        (
            8,
            8,
            f"team a uses 8 of 8 {A100} GPUs; borrowing limit 0 (needs 4 more); and"
            f" team a uses 8 of 8 {H100} GPUs; borrowing limit 0 (needs 4 more){PASSED}",
        ),
        (
            8,
            6,
            f"team a uses 8 of 8 {A100} GPUs; borrowing limit 0 (needs 4 more); and"
            f" team a uses 6 of 8 {H100} GPUs; borrowing limit 0 (needs 4 more){PASSED}",
        ),
    ],
    ids=["both-full", "h100-nearly-full"],
)
def test_a_job_for_any_model_refused_by_each_quota_is_told_what_each_says(
    a100_used: int, h100_used: int, said: str
) -> None:
    teams, busy, cluster = _two_models(a100_used, h100_used)
    d = decide(snap(cluster, teams, [job("p", gpus=4), job("q", gpus=4)], busy))
    for waiting in ("p", "q"):  # q gets its kind's verdict, worked out again at its turn
        reason = waits(d)[waiting].reason
        assert reason.code == "quota_exhausted"
        assert reason.message == said
        assert dict(reason.details)["gpu_models"] == (A100, H100)


def test_a_job_for_any_model_one_quota_admits_starts_there() -> None:
    teams, busy, cluster = _two_models(8, 0)
    d = decide(snap(cluster, teams, [job("p", gpus=4)], busy))
    assert started(d)["p"].placement.allocs[0].node.startswith("h")


def _slice_on(node: str, model: str) -> RunningJob:
    r = JobRequest(f"r-{node}", "a", "normal", NOW - 700, 1, 0, model, "1g.10gb", 3600.0)
    slot = MigSlot(0, "1g.10gb", 0, 1)
    return RunningJob(r, NOW - 600, Placement((NodeAlloc(node, (), slot),)), model)


def test_a_slice_job_for_any_model_refused_by_each_quota_is_told_what_each_says() -> None:
    # Team a's quota of one 1g.10gb slice (1/7 of a GPU) on each model is used; both GPUs
    # have free 1g.10gb instances.
    layouts = {
        n: [[MigInstance("1g.10gb", i, 1, f"r-{n}" if i == 0 else None) for i in range(7)]]
        for n in ("m1", "h1")
    }
    cluster = (mig_node("m1", layouts["m1"]), mig_node("h1", layouts["h1"], model=H100))
    a = Team("a", 1.0, (Quota(A100, 1 / 7, 0.0), Quota(H100, 1 / 7, 0.0)), ())
    running_ = (_slice_on("m1", A100), _slice_on("h1", H100))
    d = decide(Snapshot(cluster, (a,), (job("x", mig="1g.10gb"),), running_))
    reason = waits(d)["x"].reason
    assert reason.code == "quota_exhausted", reason
    assert A100 in reason.message and H100 in reason.message, reason
    assert dict(reason.details)["gpu_models"] == (A100, H100)
