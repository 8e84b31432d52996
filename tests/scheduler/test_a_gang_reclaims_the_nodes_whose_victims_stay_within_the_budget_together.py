"""A gang within its team's nominal reclaims on the n nodes whose victims, together, stay
within each quota's budget (issue 3: a team below its nominal gets its GPUs back within a
cycle and the grace period), and on the cheapest such nodes: not only those a cheapest-first
pass reaches, where the cheapest node spends a budget the others then lack
(preempt.plan)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from scheduler.types import RunningJob, Team

from .builders import A100, NOW, decide, job, nodes, running, snap, team, waits

RECLAIM_SENTENCE = "preempted by job B: team b reclaimed its nominal " + A100 + " quota"

# B: 2 nodes x 4 GPUs, within b's nominal 8. On each node c, at its nominal, holds 4 GPUs.
# n1: a's x and d's y, 2 GPUs each, started a minute ago: the cheapest node (least work
# lost). n2: a's a2, n3: d's d2, 2 GPUs each beside 2 free, started an hour ago. a and d each
# hold 2 above their nominal (the budget): n1 with n2 takes x and a2 of a, n1 with n3 y and
# d2 of d, a second victim with the budget spent. n2 with n3 takes one of each.
BUSY = (
    running("c1", {"n1": range(4, 8)}, team="c", limit=36000.0),
    running("c2", {"n2": range(4, 8)}, team="c", limit=36000.0),
    running("c3", {"n3": range(4, 8)}, team="c", limit=36000.0),
    running("x", {"n1": range(2)}, team="a", started=NOW - 60, limit=36000.0),
    running("y", {"n1": range(2, 4)}, team="d", started=NOW - 60, limit=36000.0),
    running("a2", {"n2": range(2)}, team="a", started=NOW - 3600, limit=36000.0),
    running("d2", {"n3": range(2)}, team="d", started=NOW - 3600, limit=36000.0),
)
TEAMS = (
    team("a", 2, borrow=None),
    team("b", 8, borrow=None),
    team("c", 12, borrow=None),
    team("d", 2, borrow=None),
)


@dataclass(frozen=True)
class Case:
    name: str
    count: int  # nodes
    teams: tuple[Team, ...]
    busy: tuple[RunningJob, ...]
    victims: tuple[str, ...]
    on: tuple[str, ...]


CASES = [
    Case(
        # Cheapest first takes n1, then finds n2 and n3 each past a budget with it: B
        # would wait, though n2 and n3 together are within both.
        "the_only_nodes_within_the_budget_together_past_a_cheaper_one",
        3,
        TEAMS,
        BUSY,
        ("a2", "d2"),
        ("n2", "n3"),
    ),
    Case(
        # As above with n4, where e's 6 (e 2 above its nominal 4) is the only victim and
        # takes e below its nominal: n1 with n4 is within the rule (one victim per quota
        # past it), but n2 with n3 keeps every team at its nominal, and costs less.
        "the_nodes_that_keep_every_team_at_its_nominal_over_a_cheaper_node_with_one_that_does_not",
        4,
        (*TEAMS, team("e", 4, borrow=None)),
        (*BUSY, running("e6", {"n4": range(6)}, team="e", started=NOW - 60, limit=36000.0)),
        ("a2", "d2"),
        ("n2", "n3"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_gang_reclaims_the_cheapest_nodes_whose_victims_stay_within_the_budget_together(
    case: Case,
) -> None:
    b = job("B", team="b", gpus=4, nodes=2, model=A100, submit=NOW - 200, limit=3600.0)

    d = decide(snap(nodes(case.count), case.teams, [b], case.busy))

    assert sorted((p.job_id, p.kind, p.message) for p in d.preemptions) == [
        (v, "reclaim", RECLAIM_SENTENCE) for v in sorted(case.victims)
    ], waits(d)["B"].reason.message
    assert d.preempting == (("B", case.on),)
