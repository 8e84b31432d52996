"""A job that preempted in an earlier cycle (PendingJob.preempting_on) waits for the jobs
still leaving its nodes rather than take GPUs free on a node where another such job waits:
those were likely freed for that job, which would then preempt one more. Victims leave as
they finish checkpointing, in any order, so a preemptor's own victims may be the last to go.
GPUs free where no other preemptor waits it takes at once; and once nothing is leaving on its
nodes, it starts wherever it fits, as any job does."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.types import RunningJob

from .builders import NOW, decide, gpus_of, job, nodes, request, running, snap, started, team
from .driver import Driver

TEAMS = (team("a", 3), team("b", 0, borrow=None))


def borrowed(
    skip: tuple[tuple[int, int], ...] = (), leaving: tuple[tuple[int, int], ...] = ()
) -> list[RunningJob]:
    """Team b's one-GPU jobs on every GPU of n1 and n2 (4 each) but `skip`, all on borrowed
    quota; those of `leaving` are in their grace period."""
    return [
        running(
            f"b-{n}-{g}",
            {f"n{n}": [g]},
            team="b",
            started=NOW - 600 + 10 * g + n,
            limit=None,
            leaving_since=NOW - 10 if (n, g) in leaving else None,
        )
        for n in (1, 2)
        for g in range(4)
        if (n, g) not in skip
    ]


def test_a_preemptor_waits_for_its_victim_rather_than_take_a_gpu_freed_for_a_gang() -> None:
    # one (1 GPU) preempted b-1-3 on n1; the gang (2 nodes x 1 GPU) preempted b-1-2 on n1
    # and b-2-3 on n2. b-2-3 has left; the two on n1 are still leaving.
    one = replace(job("one", gpus=1, submit=NOW - 100), preempting_on=("n1",))
    gang = replace(job("gang", gpus=1, nodes=2, submit=NOW - 90), preempting_on=("n1", "n2"))
    run = borrowed(skip=((2, 3),), leaving=((1, 3), (1, 2)))

    d = decide(snap(nodes(2, gpus=4), TEAMS, [one, gang], run))

    assert d.preemptions == ()  # before: one started on n2's free GPU, the gang took b-2-2
    assert started(d) == {}
    assert {k: set(on) for k, on in d.preempting} == {"one": {"n1"}, "gang": {"n1", "n2"}}


def test_a_preemptor_takes_a_gpu_free_where_no_other_preemptor_waits() -> None:
    # one's victim b-1-3 is still leaving; b-2-3 ended on its own and nobody preempted on
    # n2: one starts there now rather than wait out its victim's grace.
    one = replace(job("one", gpus=1, submit=NOW - 100), preempting_on=("n1",))
    run = borrowed(skip=((2, 3),), leaving=((1, 3),))

    d = decide(snap(nodes(2, gpus=4), TEAMS, [one], run))

    assert {k: gpus_of(s) for k, s in started(d).items()} == {"one": {"n2": (3,)}}
    assert d.preemptions == ()


def test_a_preemptor_with_nothing_leaving_on_its_nodes_starts_where_it_fits() -> None:
    # one's victim on n1 has left and its GPU was taken; nothing is leaving there now.
    one = replace(job("one", gpus=1, submit=NOW - 100), preempting_on=("n1",))
    run = borrowed(skip=((2, 3),))

    d = decide(snap(nodes(2, gpus=4), TEAMS, [one], run))

    assert {k: gpus_of(s) for k, s in started(d).items()} == {"one": {"n2": (3,)}}
    assert d.preemptions == ()


@pytest.mark.parametrize("first", ["n1", "n2"])
def test_a_reclaim_for_two_jobs_takes_three_victims_whichever_leaves_first(first: str) -> None:
    # The service's test_a_preemptor_runs_where_its_victims_were, with the victims leaving
    # one at a time: the one on `first` a cycle after its preemption, the others at the end
    # of their grace. Three victims make room for both, and each job runs where they were.
    driver = Driver(nodes(2, gpus=4), TEAMS)
    for job_ in borrowed():
        driver.place(job_)
    driver.submit(request("one", gpus=1, submit=NOW))
    driver.submit(request("gang", gpus=1, nodes=2, submit=NOW + 1))
    decided = driver.cycle()
    victims = {p.job_id for p in decided.preemptions}
    on = {v: driver.running[v].placement.allocs[0].node for v in victims}
    early = {v for v in victims if on[v] == first}
    assert early and early != victims, on
    for v in early:  # it finished checkpointing at once; the others take their whole grace
        driver.leaves_at[v] = driver.now + driver.step
    driver.advance()

    driver.run_until(driver.now + driver.policy.preemption_grace_s + 2 * driver.step)

    assert sorted(driver.victims) == sorted(victims), driver.preemptions  # no fourth
    assert "one" in driver.running and "gang" in driver.running
    ones = {on[p.job_id] for p in decided.preemptions if p.by_job_id == "one"}
    assert {a.node for a in driver.running["one"].placement.allocs} == ones
