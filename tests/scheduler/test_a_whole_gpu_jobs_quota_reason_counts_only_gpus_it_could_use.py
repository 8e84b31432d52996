"""A whole-GPU job refused quota is told what may be lent to it: no more than the idle whole
GPUs it could use. Its model's quota counts the model's MIG GPUs too (a slice is a fraction
of a GPU of that model) and the GPUs of every pool; the decisions keep those semantics, only
the number the job reads is its own. Before, with 4 whole GPUs idle and 2 idle MIG GPUs no
team holds, it read "only 6 idle GPUs of other teams can be lent"."""

from __future__ import annotations

import pytest

from scheduler.types import Node, Policy, Team

from .builders import A100, decide, job, mig_node, nodes, running, snap, team, waits

# Team a (nominal 4, unlimited borrowing) runs 4 GPUs of n1; team b's nominal is idle.
A_RUNS_FOUR = [running(f"a{i}", {"n1": [i]}, team="a", limit=None) for i in range(4)]


@pytest.mark.parametrize(
    ("cluster", "b", "pool", "lendable"),
    [
        # 4 whole GPUs idle; 2 idle MIG GPUs are nobody's quota: 6 are lent, 4 usable.
        ((*nodes(1), mig_node("m1", gpus=2)), team("b", 4), None, 4),
        # b lends 6, but only n1's 4 idle GPUs are in the job's pool.
        (
            (Node("n1", A100, 8, pool="x"), Node("n2", A100, 8, pool="y")),
            team("b", 12, lending=6),
            "x",
            4,
        ),
        # Fewer lent than idle: what is lent (as before).
        ((*nodes(1), mig_node("m1", gpus=2)), team("b", 6, lending=2), None, 2),
    ],
    ids=["idle-mig-gpus", "another-pool", "less-lent-than-idle"],
)
def test_a_whole_gpu_jobs_quota_reason_counts_only_gpus_it_could_use(
    cluster: tuple[Node, ...], b: Team, pool: str | None, lendable: float
) -> None:
    teams = [team("a", 4, borrow=None), b]
    d = decide(snap(cluster, teams, [job("big", team="a", gpus=8, pool=pool)], A_RUNS_FOUR))
    reason = waits(d)["big"].reason
    assert reason.code == "quota_exhausted", reason
    assert dict(reason.details)["lendable"] == lendable, reason
    assert f"but only {lendable:g} idle GPUs of other teams can be lent (needs 8)" in (
        reason.message
    ), reason.message


def test_what_is_lent_for_good_and_to_shorter_jobs_is_counted_within_the_idle_gpus() -> None:
    # b (nominal 4) runs 2 GPUs (ending NOW + 3000) and lends its idle 2 only to jobs that
    # end by then, when its next job fits its nominal; the 2 idle MIG GPUs are nobody's
    # quota. Lent: 2 for good and 2 to shorter jobs; n1 has 2 idle GPUs.
    teams = [team("a", 4, borrow=None), team("b", 4)]
    run = [running(f"a{i}", {"n1": [i]}, team="a", limit=None) for i in range(4)]
    run += [running(f"b{i}", {"n1": [4 + i]}, team="b", limit=3600.0) for i in range(2)]
    pending = [job("big", team="a", gpus=4, limit=None), job("b-next", team="b", gpus=4)]
    d = decide(snap((*nodes(1), mig_node("m1", gpus=2)), teams, pending, run))
    reason = waits(d)["big"].reason
    assert reason.code == "quota_exhausted", reason
    assert dict(reason.details)["lendable"] == 2, reason
    # It said "; 2 more are lent only to jobs that end sooner": none could use them.
    assert "lendable_to_shorter_jobs" not in dict(reason.details), reason
    assert "lent only to jobs that end sooner" not in reason.message, reason.message


def test_what_may_be_lent_still_decides_and_a_job_within_it_waits_for_nodes() -> None:
    # The quota's semantics are unchanged: 6 may be lent, so a job needing 6 more passes its
    # quota and waits for nodes (4 whole GPUs are idle), reserved, as before.
    teams = [team("a", 4, borrow=None), team("b", 4)]
    cluster = (*nodes(1), mig_node("m1", gpus=2))
    d = decide(snap(cluster, teams, [job("six", team="a", gpus=6)], A_RUNS_FOUR), Policy())
    assert waits(d)["six"].reason.code == "no_capacity", waits(d)["six"].reason
