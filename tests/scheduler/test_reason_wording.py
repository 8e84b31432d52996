"""Reason sentences read right for counts of one, and a GPU count has a plural."""

from __future__ import annotations

from .builders import NOW, decide, job, nodes, running, snap, team, waits


def _two_waiting() -> dict:
    # One 8-GPU node, busy; two 1-GPU jobs of one team wait: the second has one job ahead
    # needing 1 GPU.
    busy = [running("r", {"n1": range(8)})]
    pending = [job("j1", gpus=1, submit=NOW - 200), job("j2", gpus=1, submit=NOW - 100)]
    return waits(decide(snap(nodes(1, 8), [team("a", 100, borrow=None)], pending, busy)))


def test_one_gpu_ahead_is_not_written_as_1_gpus() -> None:
    # Before: "1 job(s) ahead need 1 GPUs; ..." (the example of what reads wrong:
    # "1 jobs").
    reason = _two_waiting()["j2"].reason
    assert reason.code == "behind_higher_priority"
    assert " 1 GPUs" not in reason.message, reason.message


def test_a_shape_of_several_gpus_of_any_model_says_gpus() -> None:
    # A 2 x 8 gang for any model: "needs 2 nodes x 8 free GPU" (the issue: "needs 2 nodes
    # x 8 free A100"; with no model the unit is GPUs).
    busy = [running("r", {"n1": range(8)})]
    d = decide(snap(nodes(2, 8), [team("a", 100, borrow=None)], [job("g", gpus=8, nodes=2)], busy))
    reason = waits(d)["g"].reason
    assert "8 free GPU;" not in reason.message and "8 free GPUs" in reason.message, reason.message
