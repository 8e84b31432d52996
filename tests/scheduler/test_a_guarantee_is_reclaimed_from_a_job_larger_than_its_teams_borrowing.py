"""A team below its nominal quota takes GPUs back from a borrower also when the borrower's
jobs are larger than what it holds above its nominal (issue 3, reclaim). As Kueue's minimal
preemption set: a job of another team's quota may be a victim while that quota is still
above its nominal before it, so the last victim may take it below; what the reclaimer does
not need stays free for that team (the nominals add up to at most the cluster). A plan that
keeps every team at its nominal or above is still preferred where one exists."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from scheduler.types import Node, RunningJob, Team

from .builders import A100, NOW, decide, job, nodes, request, running, snap, team, waits
from .driver import Driver

RECLAIM_SENTENCE = "preempted by job {by}: team {team} reclaimed its nominal " + A100 + " quota"


@dataclass(frozen=True)
class Case:
    name: str
    cluster: tuple[Node, ...]
    teams: tuple[Team, ...]
    busy: tuple[RunningJob, ...]
    gpus: int  # the reclaimer's, team b's, on one node
    victims: tuple[str, ...]  # reclaimed, in any order


CASES = [
    Case(
        # The reported case: a1 holds 8, 4 above a's nominal; b needs 4 of its nominal 4.
        "a_job_larger_than_the_borrowing_is_reclaimed",
        nodes(1),
        (team("a", 4, borrow=None), team("b", 4, borrow=None)),
        (running("a1", {"n1": range(8)}, team="a", started=NOW - 600, limit=36000.0),),
        4,
        ("a1",),
    ),
    Case(
        # a holds 6 + 2, 4 above its nominal: the 2-GPU job is within that budget, the 6 is
        # not (though the 6 started later and has run less).
        "a_victim_within_the_budget_is_preferred",
        nodes(1),
        (team("a", 4, borrow=None), team("b", 4, borrow=None)),
        (
            running("a6", {"n1": range(6)}, team="a", started=NOW - 600, limit=36000.0),
            running("a2", {"n1": range(6, 8)}, team="a", started=NOW - 3600, limit=36000.0),
        ),
        2,
        ("a2",),
    ),
    Case(
        # 4 GPUs on one node: only the 6 frees them (the 2 frees 2).
        "the_larger_job_goes_when_nothing_within_the_budget_frees_enough",
        nodes(1),
        (team("a", 4, borrow=None), team("b", 4, borrow=None)),
        (
            running("a6", {"n1": range(6)}, team="a", started=NOW - 600, limit=36000.0),
            running("a2", {"n1": range(6, 8)}, team="a", started=NOW - 3600, limit=36000.0),
        ),
        4,
        ("a6",),
    ),
    Case(
        # a (nominal 6) holds 6 on n1 and 2 + 2 on n2: 4 above its nominal. The 2 + 2 free 4
        # within that budget; the 6 would take a below its nominal, though it has run less.
        # c runs within its nominal: no victim.
        "a_node_within_the_budget_wins_over_a_cheaper_one_below_it",
        nodes(2),
        (team("a", 6, borrow=None), team("b", 4, borrow=None), team("c", 6, borrow=None)),
        (
            running("a6", {"n1": range(6)}, team="a", started=NOW - 600, limit=36000.0),
            running("c2", {"n1": range(6, 8)}, team="c", started=NOW - 600, limit=36000.0),
            running("a2x", {"n2": range(2)}, team="a", started=NOW - 3600, limit=36000.0),
            running("a2y", {"n2": range(2, 4)}, team="a", started=NOW - 3600, limit=36000.0),
            running("c4", {"n2": range(4, 8)}, team="c", started=NOW - 600, limit=36000.0),
        ),
        4,
        ("a2x", "a2y"),
    ),
    Case(
        # The same without the 2 + 2 (c holds n2): the 6 goes.
        "a_node_below_the_budget_when_it_is_the_only_one",
        nodes(2),
        (team("a", 6, borrow=None), team("b", 4, borrow=None), team("c", 6, borrow=None)),
        (
            running("a6", {"n1": range(6)}, team="a", started=NOW - 600, limit=36000.0),
            running("c2", {"n1": range(6, 8)}, team="c", started=NOW - 600, limit=36000.0),
            running("a2x", {"n2": range(2)}, team="a", started=NOW - 3600, limit=36000.0),
            running("c6", {"n2": range(2, 8)}, team="c", started=NOW - 600, limit=36000.0),
        ),
        4,
        ("a6",),
    ),
    Case(
        # a1 is of a class no one preempts: never a victim, however far a borrows.
        "a_non_preemptible_job_is_never_a_victim",
        nodes(1),
        (team("a", 4, borrow=None), team("b", 4, borrow=None)),
        (
            running(
                "a1", {"n1": range(8)}, team="a", priority="high", started=NOW - 600, limit=36000.0
            ),
        ),
        4,
        (),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_team_within_its_nominal_reclaims_the_victims_its_guarantee_needs(case: Case) -> None:
    b = job("B", team="b", gpus=case.gpus, model=A100, submit=NOW - 200, limit=3600.0)

    d = decide(snap(case.cluster, case.teams, [b], case.busy))

    assert sorted((p.job_id, p.kind, p.message) for p in d.preemptions) == [
        (v, "reclaim", RECLAIM_SENTENCE.format(by="B", team="b")) for v in sorted(case.victims)
    ], waits(d)["B"].reason.message


def test_a_team_taken_below_its_nominal_does_not_reclaim_back_from_the_reclaimer() -> None:
    # Cycle 1: b reclaims a1 (8 GPUs, a's nominal 4), taking a below its nominal. Once a1 has
    # left and been requeued, b runs 4 within its nominal and a1 waits: b has no GPUs above
    # its nominal, so a (now holding 0 of its 4) may not take b's job back; a's jobs that
    # fit the 4 GPUs b does not hold start instead.
    driver = Driver(nodes(1), (team("a", 4, borrow=None), team("b", 4, borrow=None)))
    driver.place(running("a1", {"n1": range(8)}, team="a", started=NOW - 600, limit=36000.0))
    driver.submit(request("B", team="b", gpus=4, model=A100, submit=NOW - 200, limit=3600.0))
    driver.submit(request("a4", team="a", gpus=4, model=A100, submit=NOW + 1, limit=3600.0))
    grace = driver.policy.preemption_grace_s

    driver.run_until(NOW + grace + 10 * driver.step)

    assert driver.preemptions == [("B", "a1")]
    assert sorted(driver.running) == ["B", "a4"]
    assert "a1" in driver.pending


@pytest.mark.parametrize(("gpus", "kind"), [(8, None), (4, "reclaim")])
def test_only_a_job_within_its_nominal_takes_another_team_below_its_own(
    gpus: int, kind: str | None
) -> None:
    # With preemptible classes preempting for priority, b's normal job may take a's low one
    # (c's idle nominal lends b what it borrows). Of 8 GPUs, 4 borrowed, taking a below its
    # nominal would leave a's guarantee to reclaim from b, back and forth: it waits. Of 4,
    # within b's nominal, it reclaims a1.
    from scheduler.types import Policy

    a1 = running("a1", {"n1": range(8)}, team="a", priority="low", started=NOW - 600)
    b = job("B", team="b", gpus=gpus, priority="normal", submit=NOW - 100)
    teams = [team("a", 4, borrow=None), team("b", 4, borrow=None), team("c", 8, borrow=None)]
    d = decide(
        snap(nodes(1), teams, [b], [a1]),
        Policy(preemptible_classes_preempt=True, preemption_loss_ratio=None),
    )
    assert [(p.job_id, p.kind) for p in d.preemptions] == ([("a1", kind)] if kind else [])


@dataclass(frozen=True)
class NodeCase:
    name: str
    a_nominal: int  # a's budget is the 8 GPUs its jobs on n1 hold less this
    a_jobs: tuple[tuple[str, int, float], ...]  # (id, GPUs, started), packed on n1 from GPU 0
    c_on_n1: int  # c's GPUs on n1, from GPU 7 down; c holds 8 - that on n2 minus n2_free
    n2_free: int  # fewer than B needs: B runs on n1 or nowhere
    gpus: int  # B's, within b's nominal
    victims: tuple[str, ...]  # reclaimed, in any order; () when B cannot preempt


# One node's victim search (preempt.plan), in preference order: the most recently started
# first. Every victim set under the rule is found, not only the first the walk in that order
# takes (1 then 1 spend a's budget of 2, and the 4 could no longer go); of them, those whose
# victims all come first, minus any B fits without; one that keeps a at its nominal first.
NODE_CASES = [
    NodeCase(
        # Budget 2; 1, 1, 4 in that order, B needs 5 of n1: {1, 4} (the 1 within the
        # budget, the 4 while a is still above its nominal); {1, 1, 4} would take a below it
        # with two of them.
        "the_first_small_one_and_the_large_one",
        4,
        (("a1x", 1, NOW - 300), ("a1y", 1, NOW - 600), ("a4", 4, NOW - 3600)),
        2,
        4,
        5,
        ("a1x", "a4"),
    ),
    NodeCase(
        # As above with one GPU of n1 free: B needs 4 of its victims, which the 4 alone frees.
        "the_large_one_alone_once_the_small_one_is_spared",
        4,
        (("a1x", 1, NOW - 300), ("a1y", 1, NOW - 600), ("a4", 4, NOW - 3600)),
        1,
        3,
        5,
        ("a4",),
    ),
    NodeCase(
        # Budget 4; 2, 3, 3, B needs 6: only {3, 3} frees 6 (3 within the budget, the other
        # crosses); the 2 first leaves room for one 3 only.
        "the_two_later_ones_when_the_first_leaves_too_little",
        4,
        (("a2", 2, NOW - 300), ("a3x", 3, NOW - 600), ("a3y", 3, NOW - 900)),
        0,
        2,
        6,
        ("a3x", "a3y"),
    ),
    NodeCase(
        # Budget 4 (a holds 7 on n1, nominal 3); 3, 2, 2, B needs 4: {2, 2} is within the
        # budget, though the 3 comes first and {3, 2} frees 4 as well, a taken below its
        # nominal.
        "a_set_within_the_budget_over_an_earlier_one_past_it",
        3,
        (("a3", 3, NOW - 300), ("a2x", 2, NOW - 600), ("a2y", 2, NOW - 900)),
        1,
        3,
        4,
        ("a2x", "a2y"),
    ),
    NodeCase(
        # Budget 1; 1, 1, 4, B needs 5: no set frees 5 (1 + 4 spends the budget before the
        # 4, 1 + 1 before the second 1): no victim, B waits for capacity as before.
        "none_when_no_set_under_the_rule_frees_enough",
        5,
        (("a1x", 1, NOW - 300), ("a1y", 1, NOW - 600), ("a4", 4, NOW - 3600)),
        2,
        4,
        5,
        (),
    ),
]


@pytest.mark.parametrize("case", NODE_CASES, ids=[c.name for c in NODE_CASES])
def test_a_reclaim_finds_a_victim_set_under_the_rule_wherever_one_exists(case: NodeCase) -> None:
    busy: list[RunningJob] = []
    gpu = 0
    for id_, gpus, since in case.a_jobs:
        on = {"n1": range(gpu, gpu + gpus)}
        busy.append(running(id_, on, team="a", started=since, limit=36000.0))
        gpu += gpus
    c_n2 = 8 - case.n2_free
    busy.append(running("c1", {"n1": range(8 - case.c_on_n1, 8)}, team="c", limit=36000.0))
    busy.append(running("c2", {"n2": range(c_n2)}, team="c", limit=36000.0))
    teams = (
        team("a", case.a_nominal, borrow=None),
        team("b", case.gpus, borrow=None),
        team("c", case.c_on_n1 + c_n2, borrow=None),  # at its nominal: no victim
    )
    b = job("B", team="b", gpus=case.gpus, model=A100, submit=NOW - 200, limit=3600.0)

    d = decide(snap(nodes(2), teams, [b], busy))

    reason = waits(d)["B"].reason
    assert sorted((p.job_id, p.kind, p.message) for p in d.preemptions) == [
        (v, "reclaim", RECLAIM_SENTENCE.format(by="B", team="b")) for v in sorted(case.victims)
    ], reason.message
    if case.victims:
        assert d.preempting == (("B", ("n1",)),)
        assert reason.code == "preempting"
    else:
        assert not d.preempting
        assert (reason.code, reason.message) == (
            "no_capacity",
            f"needs 1 node x 5 free {A100}; the best now is 0 nodes",
        )
