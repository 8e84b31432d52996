"""A job that preempted in an earlier cycle waits, with the nodes it preempted on
(PendingJob.preempting_on), for its victims to leave. Each cycle it claims them again (they
are leaving: no new victim), holding what they have freed so far. A cycle's victim searches
are bounded (Policy.max_preemption_searches), but that claim is not a new search: past the
bound it is still made, on its nodes and of its leaving victims only. Otherwise a job
behind it takes the GPUs (and quota) its victims freed, and it preempts again next cycle
(or, for a slice job, the GPU it emptied is re-laid out for others).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from scheduler.types import MigInstance, PendingJob, Policy, RunningJob, Team

from .builders import (
    NOW,
    decide,
    job,
    mig_node,
    nodes,
    request,
    running,
    snap,
    started,
    team,
    waits,
)
from .test_mig_over_several_cycles import MigDriver

BOUND_ONE = Policy(max_preemption_searches=1)

# `p` (high, 8 GPUs) preempted both 4-GPU jobs of n1 in an earlier cycle: one has left (GPUs
# 0-3 free), the other is in its grace period.
P = replace(job("p", gpus=8, priority="high", submit=NOW - 200), preempting_on=("n1",))
LEAVING = running("p-victim", {"n1": range(4, 8)}, priority="low", leaving_since=NOW - 10)
# A gang ahead of p makes the cycle's one search, in vain: n2 and n3 run team c's high jobs
# (ending at NOW+15, where the gang is reserved: not on n1).
GANG = job("gang", gpus=8, nodes=2, priority="high", submit=NOW - 300)
TEAM_C_HIGH = tuple(
    running(f"c-{n}", {n: range(8)}, team="c", priority="high", started=NOW - 3585, limit=3600)
    for n in ("n2", "n3")
)
# Behind p: a job of p's team that fits n1's free GPUs.
SMALL = job("small", gpus=4, submit=NOW - 100)


@dataclass(frozen=True)
class Case:
    pending: tuple[PendingJob, ...]
    teams: tuple[Team, ...]
    policy: Policy = BOUND_ONE
    running: tuple[RunningJob, ...] = (LEAVING, *TEAM_C_HIGH)


CASES = {
    # Without quotas no search may pass the bound (none reclaims).
    "no-quotas": Case(
        (GANG, P, SMALL),
        (team("a", 100), team("c", 100)),
        Policy(quotas=False, max_preemption_searches=1),
    ),
    # With quotas, past the bound each team may search once to reclaim: here team a's
    # search is spent already, by its 2 x 4 gang that cannot find a second node.
    "team-search-spent": Case(
        (GANG, job("gang2", gpus=4, nodes=2, priority="high", submit=NOW - 250), P, SMALL),
        (team("a", 100), team("c", 100)),
    ),
    # p displaced its own team's lower classes to fit team a's nominal of 8 (the leaving
    # victim still counts on it): past the bound, `small` takes both the quota and the GPUs,
    # and p would displace it next. (The gang is team c's, within its nominal: ahead of p,
    # which its leaving victim's quota puts behind.)
    "own-team-for-quota": Case(
        (replace(GANG, request=replace(GANG.request, team="c")), P, SMALL),
        (team("a", 8), team("c", 32)),
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_preemptor_keeps_what_its_victims_free_past_the_search_limit(case: Case) -> None:
    d = decide(snap(nodes(3), case.teams, case.pending, case.running), case.policy)

    assert dict(d.stats)["preemption_searches"] >= 1  # the bound was reached ahead of p
    assert "small" not in started(d), waits(d)["p"].reason
    assert waits(d)["p"].reason.code == "preempting", waits(d)["p"].reason
    assert dict(d.preempting) == {"p": ("n1",)}
    assert d.preemptions == ()  # only its leaving victim, claimed again


def test_a_slice_preemptor_keeps_the_gpu_it_empties_past_the_search_limit() -> None:
    # m1's one A100 is laid out 4g + 3g for two low jobs. `full` (high, 7g.80gb) preempts
    # both. From the next cycle on, a high 8-GPU job ahead of it makes the cycle's one
    # search in vain (n1's low job is too young to preempt), and a high 1g job comes too,
    # ahead of `full`. Past the bound, `full` must still keep the GPU: otherwise, once idle,
    # it is re-laid out for the 1g job and `full` has preempted two jobs for nothing.
    policy = Policy(quotas=False, max_preemption_searches=1, min_runtime_s=600)
    layout = (MigInstance("4g.40gb", 0, 4), MigInstance("3g.40gb", 4, 4))
    driver = MigDriver((mig_node("m1", [layout]), *nodes(1)), (team("a", 100),), policy)
    driver.holds("low-4g", "m1", 0, 0)
    driver.holds("low-3g", "m1", 0, 4)
    driver.place(running("young", {"n1": range(8)}, priority="low", started=NOW - 60))
    driver.submit(request("full", mig="7g.80gb", priority="high", submit=NOW - 50))
    driver.cycle()
    driver.advance()
    driver.submit(request("whole", gpus=8, priority="high", submit=NOW - 60))
    driver.submit(request("rival", mig="1g.10gb", priority="high", submit=NOW - 55))

    driver.run_until(NOW + 6 * driver.step)

    assert all(dict(d.stats)["preemption_searches"] >= 1 for d in driver.decisions)
    assert sorted(driver.preemptions) == [("full", "low-3g"), ("full", "low-4g")]
    assert driver.gpu_of("full") == ("m1", 0), driver.decisions[-1].waits


def test_a_slice_job_displacing_its_teams_lower_classes_keeps_its_claim_past_the_search_limit() -> (
    None
):
    # Team a's high 1g job `s` displaced its team's training job (all of team a's nominal
    # of 8) for m1's idle GPU, held for it. Team c's high job ahead makes the cycle's one
    # search in vain (its victim would lose too much). The training job still counts on
    # team a's quota while it leaves, so `s` is refused quota again: it must still claim it
    # (waiting with m1), or m1 is re-laid out for team b's 7g job, and what s's preemption
    # freed goes to another team.
    train = running("train", {"n1": range(8)}, team="a", leaving_since=NOW - 10, limit=86400)
    old = running("old", {"n2": range(8)}, team="c", priority="low", started=NOW - 3000)
    s = replace(job("s", mig="1g.10gb", priority="high", submit=NOW - 50), preempting_on=("m1",))
    pending = [
        job("whole", gpus=8, team="c", priority="high", submit=NOW - 60),
        s,
        job("b-7g", mig="7g.80gb", team="b", submit=NOW - 40),
    ]
    teams = [team("a", 8), team("b", 1), team("c", 8, weight=10)]
    d = decide(snap([*nodes(2), mig_node("m1")], teams, pending, [train, old]), BOUND_ONE)

    assert dict(d.stats)["preemption_searches"] >= 1
    assert waits(d)["s"].reason.code == "preempting", waits(d)["s"].reason
    assert dict(d.preempting) == {"s": ("m1",)}
    assert d.relayouts == ()  # m1 stays held for s while the training job leaves
