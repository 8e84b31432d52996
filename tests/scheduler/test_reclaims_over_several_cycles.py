"""Reclaims over several cycles with a fake clock (tests/scheduler/driver.py): a team
within its nominal gets its GPUs back within one cycle plus the victims' grace, with no
victim more than the room it needs."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from scheduler.types import (
    JobRequest,
    Node,
    Quota,
    Team,
)

from .builders import A100, NOW, nodes, request, running, team
from .driver import Driver

# -- reclaim within one cycle plus the victims' grace period ------------------------------


def test_a_reclaim_completes_within_one_grace_period_without_extra_victims() -> None:
    # Two 4-GPU nodes, every GPU held by a one-GPU job of team b, whose nominal is 0: all of
    # it runs on borrowed quota. Team a (nominal 3) asks for 1 GPU, then for a gang of 2 nodes
    # x 1 GPU: 3 GPUs, within its nominal. Three victims make room for both at once.
    cluster = nodes(2, gpus=4)
    driver = Driver(cluster, (team("a", 3), team("b", 0, borrow=None)))
    for n in (1, 2):
        for g in range(4):
            driver.place(running(f"b{n}{g}", {f"n{n}": [g]}, team="b", limit=None))
    driver.submit(request("a1", team="a", gpus=1, submit=NOW))
    driver.submit(request("a2", team="a", gpus=1, nodes=2, submit=NOW + 1))
    grace = driver.policy.preemption_grace_s

    driver.run_until(NOW + grace + driver.step)

    assert [j for j in ("a1", "a2") if j in driver.pending] == []
    assert len(driver.victims) == 3, driver.victims


@st.composite
def borrowed_clusters(draw: st.DrawFn):  # type: ignore[no-untyped-def]
    """Nodes of 4 or 8 A100 all taken by team b (nominal 0, unlimited borrowing) through
    the scheduler itself; team a then asks for jobs that fit its nominal, all of one GPU
    count per node that divides every node (a's own jobs cannot fragment a node for another)."""
    sizes = [draw(st.sampled_from([4, 8])) for _ in range(draw(st.integers(1, 4)))]
    cluster = tuple(Node(f"n{i}", A100, g) for i, g in enumerate(sizes))
    nominal = draw(st.integers(1, sum(sizes)))
    teams = (
        Team("a", 1.0, (Quota(draw(st.sampled_from(["*", A100])), nominal, 0.0),)),
        Team("b", 1.0, (Quota(draw(st.sampled_from(["*", A100])), 0, None),)),
    )
    b_jobs = [
        JobRequest(
            f"b{i:02d}",
            "b",
            draw(st.sampled_from(["normal", "low"])),
            NOW - 1000 + i,
            nodes=draw(st.sampled_from([1, 1, 2])),
            gpus_per_node=draw(st.sampled_from([1, 2, 4])),
            time_limit_s=None,
        )
        for i in range(draw(st.integers(1, 20)))
    ]
    g = draw(st.sampled_from([1, 2, 4]))
    a_jobs, left = [], nominal
    for i in range(draw(st.integers(1, 4))):
        n = draw(st.sampled_from([1, 1, 2]))
        if g * n > left or len(sizes) < n:
            continue
        left -= g * n
        a_jobs.append(
            JobRequest(
                f"a{i}",
                "a",
                draw(st.sampled_from(["normal", "low", "high"])),
                NOW + 100 + i,
                nodes=n,
                gpus_per_node=g,
                time_limit_s=3600.0,
            )
        )
    return cluster, teams, b_jobs, a_jobs


def _one_gpu(i: int, team: str, nodes: int = 1, submit: float = NOW - 1000) -> JobRequest:
    return JobRequest(f"{team}{i:02d}", team, "normal", submit + i, nodes=nodes, time_limit_s=None)


@settings(
    max_examples=100, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(borrowed_clusters())
@example(
    (
        (Node("n0", A100, 4), Node("n1", A100, 4)),
        (Team("a", 1.0, (Quota("*", 3, 0.0),)), Team("b", 1.0, (Quota("*", 0, None),))),
        [_one_gpu(i, "b") for i in range(8)],
        [
            replace(_one_gpu(0, "a", submit=NOW + 100), time_limit_s=3600.0),
            replace(_one_gpu(1, "a", nodes=2, submit=NOW + 100), time_limit_s=3600.0),
        ],
    )
)
def test_a_team_within_its_nominal_gets_its_gpus_back_within_a_cycle_and_the_grace(c) -> None:  # type: ignore[no-untyped-def]
    cluster, teams, b_jobs, a_jobs = c
    driver = Driver(cluster, teams)
    for r in b_jobs:
        driver.submit(r, math.inf)
    for _ in range(3):  # b borrows all it can
        driver.cycle()
        driver.advance()
    driver.now = NOW + 100
    for r in a_jobs:
        driver.submit(r)

    driver.run_until(driver.now + driver.policy.preemption_grace_s + driver.step)

    assert not [r.id for r in a_jobs if r.id in driver.pending]
