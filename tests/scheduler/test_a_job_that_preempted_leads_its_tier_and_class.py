"""A job that preempted in an earlier cycle (PendingJob.preempting_on) goes first among the
jobs of its tier and class, whatever their teams' fair share: otherwise a job ahead in fair
share takes the GPUs its victims freed, and it preempts again, the same victim once that
has restarted (ping-pong; found by the multi-cycle properties,
test_properties_over_cycles.py). As Kubernetes' nominated pods go before others of their
priority on the nodes preempted for them. Higher classes and tier 0 still go first."""

from __future__ import annotations

from dataclasses import replace

from scheduler.types import PendingJob, Policy

from .builders import NOW, decide, gpus_of, job, nodes, request, running, snap, started, team
from .driver import Driver

# c's normal 2-GPU job reclaimed a's 2-node gang on n1; meanwhile c's low job borrowed n2's
# second GPU, so c (nominal 2) now holds 1 and the 2-GPU job would borrow: tier 1, as the
# gang (a's nominal is 1). a, running nothing, is ahead in fair share.
TEAMS = (team("a", 1, borrow=None), team("b", 4, borrow=None), team("c", 2, borrow=None))
LOW = running("low", {"n2": [1]}, team="c", priority="low", started=NOW - 10, limit=80.0)


def gang() -> PendingJob:
    return replace(
        job("gang", team="a", gpus=1, nodes=2, submit=NOW - 50, limit=140.0), preemptions=1
    )


def test_a_job_that_preempted_starts_on_its_freed_gpus_before_a_job_ahead_in_fair_share() -> None:
    two = replace(job("two", team="c", gpus=2, submit=NOW - 10, limit=140.0), preempting_on=("n1",))

    d = decide(snap(nodes(2, gpus=2), TEAMS, [gang(), two], [LOW]))

    # Before: the gang restarted on n1 and n2, and "two" reclaimed it again next cycle.
    assert {k: gpus_of(s) for k, s in started(d).items()} == {"two": {"n1": (0, 1)}}


def test_without_a_preemption_the_fair_share_order_stands() -> None:
    two = job("two", team="c", gpus=2, submit=NOW - 10, limit=140.0)

    d = decide(snap(nodes(2, gpus=2), TEAMS, [gang(), two], [LOW]))

    assert set(started(d)) == {"gang"}


def test_a_higher_class_still_goes_before_a_job_that_preempted() -> None:
    two = replace(job("two", team="c", gpus=2, submit=NOW - 10, limit=140.0), preempting_on=("n1",))
    high = job("high", team="a", gpus=2, priority="high", submit=NOW, limit=10.0)
    teams = (team("a", 2, borrow=None), team("b", 3, borrow=None), team("c", 2, borrow=None))

    d = decide(snap(nodes(2, gpus=2), teams, [high, two], [LOW]))

    assert set(started(d)) == {"high"}


def test_over_several_cycles_the_gang_is_preempted_once() -> None:
    driver = Driver(nodes(2, gpus=2), TEAMS, Policy())
    driver.submit(request("gang", team="a", gpus=1, nodes=2, submit=NOW, limit=140.0), 140.0)
    driver.run_until(NOW + 30)
    driver.submit(request("low", team="c", gpus=1, priority="low", submit=NOW + 40), 40.0)
    driver.submit(request("two", team="c", gpus=2, submit=NOW + 40, limit=140.0), 80.0)

    driver.run_until(NOW + 400)

    assert driver.preemptions.count(("two", "gang")) == 1, driver.preemptions
