"""The numbers in a waiting job's reason must be those at its own turn in the cycle.

A kind of jobs (team, class, shape) that failed shares the first member's verdict; the
verdict stays right (capacity and quota only shrink), but the numbers in its message and
details are worked out again at a later member's turn once jobs have started in between (they
were the first member's)."""

from __future__ import annotations

from .builders import NOW, decide, job, nodes, running, snap, started, team, waits


def test_a_later_job_of_a_refused_kind_reports_its_teams_usage_at_its_turn() -> None:
    # Team a: nominal 4, borrowing limit 3 (at most 7 GPUs), 2 of them in use. In FIFO order:
    # big1 (6 GPUs, over the limit now), mid (3 GPUs, starts on borrowed quota), big2 (6
    # GPUs, like big1). At big2's turn team a uses 5 GPUs (mid started), so its reason must
    # say "uses 5 of 4" (a 5-GPU job in big2's place does say so). It said "uses 2 of 4":
    # big1's reason.
    teams = [team("a", 4, borrow=3), team("b", 4)]
    pending = [
        job("big1", gpus=6, submit=NOW - 300),
        job("mid", gpus=3, submit=NOW - 200),
        job("big2", gpus=6, submit=NOW - 100),
    ]
    d = decide(snap(nodes(2, 8), teams, pending, [running("r0", {"n2": [0, 1]}, team="a")]))
    assert "mid" in started(d)
    reason = waits(d)["big2"].reason
    assert reason.code == "quota_exhausted"
    assert dict(reason.details)["used"] == 5, reason.message
    assert "uses 5 of 4" in reason.message, reason.message


def test_a_later_gang_of_a_failed_kind_reports_the_nodes_free_at_its_turn() -> None:
    # n1 full and n2 half full (team z, until NOW + 3000); n3 idle. Order by fair share:
    # g1 (a, 2 x 8), s (b, 1 x 8, starts on n3), g2 (a, 2 x 8, g1's kind). At g2's turn no
    # node has 8 free GPUs, so "the best now" is 0 nodes; the same job of team b in g2's
    # place says 0. g2 said 1 node: g1's count, from before s took n3.
    teams = [team("a", 100, borrow=None), team("b", 100, borrow=None), team("z", 100, borrow=None)]
    busy = [running("r1", {"n1": range(8)}, team="z"), running("r2", {"n2": range(4)}, team="z")]
    pending = [
        job("g1", team="a", gpus=8, nodes=2, submit=NOW - 300),
        job("s", team="b", gpus=8, submit=NOW - 200),
        job("g2", team="a", gpus=8, nodes=2, submit=NOW - 100),
    ]
    d = decide(snap(nodes(3, 8), teams, pending, busy))
    assert "s" in started(d) and started(d)["s"].placement.node_names == ("n3",)
    reason = waits(d)["g2"].reason
    assert dict(reason.details)["best_nodes_now"] == 0, reason.message
