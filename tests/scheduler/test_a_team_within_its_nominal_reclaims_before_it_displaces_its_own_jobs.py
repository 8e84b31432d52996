"""A job within its team's nominal that must preempt takes other teams' borrowed work before
its own team's lower classes (Kueue's candidate order: other ClusterQueues' workloads before
the preemptor's own), even where the borrower is then taken below its nominal. Its own team's
job would otherwise wait within that same nominal and reclaim the borrower a grace period
later: two jobs preempted where one would do (found by the multi-cycle properties,
test_properties_over_cycles.py)."""

from __future__ import annotations

from scheduler.types import Policy, RunningJob

from .builders import NOW, decide, job, nodes, request, running, snap, team
from .driver import Driver

# a (nominal 3) runs a 4-GPU gang, 1 GPU borrowed; c (nominal 3) runs a 2-GPU normal job.
TEAMS = (team("a", 3, borrow=None), team("b", 0, borrow=None), team("c", 3, borrow=None))


def busy() -> list[RunningJob]:
    return [
        running("gang", {"n1": [0, 1], "n2": [0, 1]}, team="a", started=NOW - 10, limit=150.0),
        running("c2", {"n3": [0, 1]}, team="c", started=NOW - 20, limit=100.0),
    ]


def test_a_job_within_its_nominal_reclaims_a_borrower_before_displacing_its_own_team() -> None:
    # c's high 1-GPU job fits c's nominal (2 + 1 of 3). Before: it preempted c2 (c's own,
    # lower class) because taking the gang takes a below its nominal; c2 then reclaimed the
    # gang 30 s later.
    high = job("high", team="c", gpus=1, priority="high", submit=NOW - 5, limit=10.0)

    d = decide(snap(nodes(3, gpus=2), TEAMS, [high], busy()))

    assert [(p.job_id, p.by_job_id, p.kind) for p in d.preemptions] == [("gang", "high", "reclaim")]


def test_its_own_teams_job_is_displaced_when_no_other_team_borrows() -> None:
    # a runs within its nominal (2 of 2) and c's nominal (3) is more than c holds: nobody
    # borrows, so the high job still displaces c's lower class, as before.
    teams = (team("a", 2, borrow=None), team("c", 3, borrow=None))
    run = [
        running("a2", {"n1": [0, 1]}, team="a", started=NOW - 10, limit=150.0),
        running("c2", {"n2": [0, 1]}, team="c", started=NOW - 20, limit=100.0),
    ]
    high = job("high", team="c", gpus=1, priority="high", submit=NOW - 5, limit=10.0)

    d = decide(snap(nodes(2, gpus=2), teams, [high], run))

    assert [(p.job_id, p.kind) for p in d.preemptions] == [("c2", "priority")]


def test_over_several_cycles_one_job_is_preempted_not_two() -> None:
    # The case the properties found, run on the fake clock: the gang borrowing, c's normal
    # job running, c's high job arriving.
    driver = Driver(nodes(3, gpus=2), TEAMS, Policy())
    for job_run in busy():
        driver.place(job_run)
    driver.submit(request("high", team="c", gpus=1, priority="high", submit=NOW, limit=10.0), 10)

    driver.run_until(NOW + 120)

    assert driver.preemptions == [("high", "gang")]  # before: high took c2, c2 the gang
