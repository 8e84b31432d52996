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


@pytest.mark.parametrize(
    ("snapshot", "says"),
    [
        # Wider than every node: the widest is what the user can ask for instead.
        (
            snap(nodes(2), [team("a", 16)], [job("x", gpus=9)]),
            "needs 1 node x 9 free GPUs, but no node up in the cluster has 9 GPUs"
            " (the most on one is 8)",
        ),
        # A gang on too few nodes: how many there are.
        (
            snap(nodes(1), [team("a", 16)], [job("x", gpus=8, nodes=2)]),
            "needs 2 nodes x 8 free GPUs, but only 1 node of that kind is up in the cluster",
        ),
    ],
    ids=["wider-than-every-node", "more-nodes-than-there-are"],
)
def test_an_unsatisfiable_reason_says_what_the_cluster_has_instead(
    snapshot: Snapshot, says: str
) -> None:
    # A 9-GPU job on 8-GPU nodes was told "only 0 nodes of that kind are up".
    reason = waits(decide(snapshot))["x"].reason
    assert reason.code == "unsatisfiable"
    assert reason.message == says
