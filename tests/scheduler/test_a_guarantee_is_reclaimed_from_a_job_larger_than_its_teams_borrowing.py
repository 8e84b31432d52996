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
