"""A job for any GPU model, of a team with a quota on several models, refused by each: its
reason names what each quota says, not only the first model's (which would send its owner
to ask for more of one model while the other is as full)."""

from __future__ import annotations

import pytest

from scheduler.types import Quota, Team

from .builders import A100, H100, decide, job, nodes, running, snap, started, waits


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
            f" team a uses 8 of 8 {H100} GPUs; borrowing limit 0 (needs 4 more)",
        ),
        (
            8,
            6,
            f"team a uses 8 of 8 {A100} GPUs; borrowing limit 0 (needs 4 more); and"
            f" team a uses 6 of 8 {H100} GPUs; borrowing limit 0 (needs 4 more)",
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
