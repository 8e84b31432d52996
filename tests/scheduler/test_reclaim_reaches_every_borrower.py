"""A team below its nominal quota with pending work takes GPUs back from teams running beyond
theirs within one cycle (plus the victims' grace), however deep the queue ahead of it and
whatever quota rows the borrowers have (issue 3, reclaim)."""

from __future__ import annotations

import pytest

from scheduler.types import Team

from .builders import A100, H100, NOW, decide, job, nodes, running, snap, team, waits


def test_a_team_below_nominal_reclaims_behind_many_jobs_whose_searches_fail() -> None:
    """Searches for victims that fail for others do not keep a team from its guarantee: each
    team within its nominal may still search to reclaim once a cycle after the cycle's
    bound on searches (Policy.max_preemption_searches, 16) is used up. Here sixteen teams
    ahead (high class, nominal 3 H100 each) each look for a 3-GPU slot no preemption can
    make (each H100 node holds 6 GPUs of team d's non-preemptible work and 2 of b's
    borrowed); team a, whose whole A100 guarantee b borrows, still reclaims it."""
    n_h = 24
    cluster = nodes(1) + nodes(n_h, model=H100, prefix="h")
    teams = [team("a", 8, model=A100), team("b", 0, borrow=None), team("d", 6 * n_h, model=H100)]
    teams += [team(f"c{i}", 3, model=H100) for i in range(16)]
    busy = [running("b-a100", {"n1": range(8)}, team="b")]
    for i in range(n_h):
        busy.append(
            running(f"d{i}", {f"h{i + 1}": range(6)}, team="d", priority="high", model=H100)
        )
        busy.append(running(f"b{i}", {f"h{i + 1}": range(6, 8)}, team="b", model=H100))
    pending = [
        job(f"c{i}j", team=f"c{i}", gpus=3, model=H100, priority="high", submit=NOW - 1000 + i)
        for i in range(16)
    ]
    pending.append(job("a1", team="a", gpus=8, model=A100, submit=NOW - 10))
    d = decide(snap(cluster, teams, pending, busy))
    assert [(p.job_id, p.kind) for p in d.preemptions] == [("b-a100", "reclaim")], waits(d)[
        "a1"
    ].reason.message


@pytest.mark.parametrize(
    "teams",
    [
        [team("a", 8)],  # z has no quota row at all
        [team("a", 8, model=A100), team("z", 8, model=H100)],  # z's row is for another model
    ],
    ids=["no-row", "row-for-another-model"],
)
def test_a_team_below_nominal_reclaims_from_a_team_with_no_quota_for_the_model(
    teams: list[Team],
) -> None:
    """A team with no quota for the model its jobs run on (its row deleted or changed while
    they run) holds nothing guaranteed there: all it runs is borrowed (nominal 0), and a
    team below its nominal reclaims it."""
    busy = [running("z1", {"n1": range(8)}, team="z")]
    d = decide(snap(nodes(1), teams, [job("a1", team="a", gpus=8)], busy))
    assert [(p.job_id, p.kind) for p in d.preemptions] == [("z1", "reclaim")], waits(d)[
        "a1"
    ].reason.message
