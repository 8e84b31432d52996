"""Policy.quota_hold_after_s: a job refused quota that has waited that long holds its
team's nominal against the team's later jobs, as a job that fits the nominal but waits for
nodes does (test_team_fifo.py): they may take it only if they end before it could start, or
if there is room for both by then. Its nodes are reserved from then too, so they drain
while its quota does. Without it (the default) a job refused quota holds
nothing, as in Kueue's BestEffortFIFO: a gang then sees its own team's later, smaller jobs
take each GPU of the nominal as one frees, and may wait for days (docs/BENCHMARKS.md,
thirty-eighth session: 990,000 s on seed 5's workload). Slurm's bf_min_age_reserve
likewise reserves only for jobs that have waited a set time."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from scheduler.types import PendingJob, Policy

from .builders import NOW, decide, job, nodes, request, running, snap, started, team, waits
from .driver import Driver

DAY = 24 * 3600.0
HOLD = Policy(quota_hold_after_s=3 * DAY)

# Team a (nominal 8, no borrowing) runs seven 1-GPU jobs on n1: three end by +1000, four by
# +10000. Team b fills n2 with its own nominal. a's `old` (1 x 4 GPUs) is refused quota: it
# could start at +1000, when a's three jobs have freed enough of a's nominal and of n1.
TEAMS = [team("a", 8), team("b", 8)]
BUSY = [
    *(running(f"a{i}", {"n1": [i]}, started=NOW - 2600, limit=3600.0) for i in range(3)),
    *(running(f"a{i}", {"n1": [i]}, started=NOW - 100, limit=10100.0) for i in range(3, 7)),
    running("b-all", {"n2": range(8)}, team="b", started=NOW - 100, limit=36000.0),
]


def old(waited: float) -> PendingJob:
    return job("old", gpus=4, submit=NOW - waited)


@dataclass(frozen=True)
class Case:
    pending: tuple[PendingJob, ...]
    policy: Policy = field(default_factory=Policy)
    later_starts: bool = True
    # When `old` could start, as worked out at its turn: at +1000, or at +3600 when `later`
    # (ahead of it) took a GPU of the nominal first.
    old_at: float = NOW + 1000


CASES = {
    # The default: the later 1-GPU job takes the free GPU of a's nominal.
    "no-hold-by-default": Case((old(4 * DAY), job("later", submit=NOW - 100))),
    "held-after-three-days": Case(
        (old(4 * DAY), job("later", submit=NOW - 100)), HOLD, later_starts=False
    ),
    "not-held-before": Case((old(2 * DAY), job("later", submit=NOW - 100)), HOLD),
    # Ends by +600, before `old` could start at +1000.
    "a-shorter-job-passes": Case((old(4 * DAY), job("later", submit=NOW - 100, limit=600)), HOLD),
    # Classes rank first.
    "a-higher-class-passes": Case(
        (old(4 * DAY), job("later", submit=NOW - 100, priority="high")), HOLD, old_at=NOW + 3600
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_job_refused_quota_long_enough_holds_its_teams_nominal(case: Case) -> None:
    d = decide(snap(nodes(2), TEAMS, case.pending, BUSY), case.policy)

    assert "old" not in started(d)
    assert waits(d)["old"].reason.code == "quota_exhausted"
    assert waits(d)["old"].estimated_start == case.old_at
    assert ("later" in started(d)) is case.later_starts
    if not case.later_starts:
        reason = waits(d)["later"].reason
        assert reason.code == "quota_exhausted"
        assert dict(reason.details)["held_for"] == "old"
        assert "holds 4 more for its earlier job old" in reason.message
        assert waits(d)["later"].estimated_start is not None
        assert waits(d)["later"].estimated_start >= NOW + 1000


def test_a_job_whose_start_is_not_known_holds_nothing() -> None:
    # a's running jobs have no time limit: nobody knows when `old` could start (n2 frees at
    # +36000, but a's nominal stays full), and a's later jobs would wait for a time nobody
    # knows.
    busy = [
        replace(j, request=replace(j.request, time_limit_s=None)) if j.request.team == "a" else j
        for j in BUSY
    ]
    pending = [old(4 * DAY), job("later", submit=NOW - 100, limit=40000)]

    d = decide(snap(nodes(2), TEAMS, pending, busy), HOLD)

    assert waits(d)["old"].estimated_start is None
    assert "later" in started(d)


def test_a_policy_refuses_a_negative_hold_age() -> None:
    with pytest.raises(ValueError, match="quota_hold_after_s"):
        Policy(quota_hold_after_s=-1.0)


@pytest.mark.parametrize(("policy", "starts_by"), [(Policy(), None), (HOLD, NOW + 400)])
def test_a_gang_is_not_passed_for_ever_by_its_teams_later_jobs(
    policy: Policy, starts_by: float | None
) -> None:
    # One 8-GPU node, all of team a's nominal: its eight jobs end one every 100 s. A gang of 4
    # that has waited four days, and twenty later 1-GPU jobs of an hour each. Without the hold
    # each GPU that frees goes to a later job; with it the gang starts once four have freed.
    driver = Driver(nodes(1), (team("a", 8),), policy)
    for i in range(8):
        driver.place(running(f"r{i}", {"n1": [i]}, started=NOW - 3600 + 100 * (i + 1)))
    driver.submit(request("gang", gpus=4, submit=NOW - 4 * DAY))
    for i in range(20):
        driver.submit(request(f"later{i:02d}", submit=NOW - 100 + i))

    driver.run_until(NOW + 1000)

    if starts_by is None:
        assert "gang" in driver.pending
    else:
        assert driver.running["gang"].start_time <= starts_by


# Team c (nominal 1) runs and wants nothing: team b (borrowing up to 1) may borrow that GPU
# of quota for a 1-GPU job on n1's free GPU. It comes after `old` in the order (both
# borrow, and a uses less than b).
TEAMS_AND_C = [team("a", 8), team("b", 8, borrow=1), team("c", 1)]


@pytest.mark.parametrize(
    ("limit", "b_starts"),
    [(36000.0, False), (600.0, True)],
    ids=["outlasting-the-wait-waits", "ending-before-it-starts"],
)
def test_a_held_job_also_reserves_its_nodes_from_when_its_quota_frees(
    limit: float, b_starts: bool
) -> None:
    # `old` (4 GPUs on one node) has a's nominal from +1000, when a's three short jobs on n1
    # end; n1 then has those three GPUs and the one free now. Its nodes are reserved from
    # then too, so the free GPU is not taken by a job that outlasts +1000: else `old` would
    # find its quota at +1000 and wait for a node after it, until +10000.
    pending = [old(4 * DAY), job("b-job", team="b", submit=NOW - 50, limit=limit)]

    d = decide(snap(nodes(2), TEAMS_AND_C, pending, BUSY), HOLD)

    assert waits(d)["old"].reason.code == "quota_exhausted"
    assert waits(d)["old"].estimated_start == NOW + 1000
    assert ("b-job" in started(d)) is b_starts
    if not b_starts:
        reason = waits(d)["b-job"].reason
        assert reason.code == "behind_higher_priority"
        assert dict(reason.details)["reserved_for"] == "old"
    assert waits(d)["old"].reserved


def test_a_held_job_starts_when_its_quota_frees_on_the_node_kept_for_it() -> None:
    # Over cycles: a's three short jobs end at +1000 (their limit), and `old` starts then on
    # n1, though team b's long job waits beside it all the while.
    driver = Driver(nodes(2), tuple(TEAMS_AND_C), HOLD)
    for j in BUSY:
        driver.place(j)  # each ends at its limit
    driver.submit(request("old", gpus=4, submit=NOW - 4 * DAY))
    driver.submit(request("b-job", team="b", submit=NOW - 50, limit=36000.0))

    driver.run_until(NOW + 1200)

    assert driver.running["old"].start_time <= NOW + 1000 + driver.step
