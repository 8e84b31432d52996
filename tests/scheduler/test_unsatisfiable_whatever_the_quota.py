"""A job no node of the cluster can ever hold waits `unsatisfiable`, whatever its team's quota:
more quota would not start it, so the reason must not send its user to ask for quota."""

from __future__ import annotations

import pytest

from scheduler.types import Snapshot

from .builders import decide, job, nodes, snap, team, waits


@pytest.mark.parametrize(
    "snapshot",
    [
        # 16 GPUs on one node of 8-GPU nodes, for a team with 4 (within quota: 16).
        snap(nodes(2), [team("a", 4)], [job("x", gpus=16)]),
        snap(nodes(2), [team("a", 16)], [job("x", gpus=16)]),
        # A 2-node gang on a 1-node cluster, beyond the team's 8 (within quota: 16).
        snap(nodes(1), [team("a", 8)], [job("x", gpus=8, nodes=2)]),
        snap(nodes(1), [team("a", 16)], [job("x", gpus=8, nodes=2)]),
    ],
    ids=["too-wide-beyond-quota", "too-wide-within", "gang-beyond-quota", "gang-within"],
)
def test_a_job_no_node_can_ever_hold_is_unsatisfiable_within_or_beyond_its_quota(
    snapshot: Snapshot,
) -> None:
    reason = waits(decide(snapshot))["x"].reason
    assert reason.code == "unsatisfiable", reason.message
