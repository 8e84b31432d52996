"""A whole-GPU job of more than one GPU that its team's nominal could hold, refused quota
because the team's own jobs use it, is told what the policy lets those jobs do meanwhile: by
default (Kueue's BestEffortFIFO) it holds none of the nominal, so the team's smaller jobs
start before it, later ones too; with Policy.quota_hold_after_s, only until it has waited that
long, and then its reason says it holds the nominal. Before, a gang's reason gave only the
numbers ("team02 uses 64 of 64 ... needs 32") while it watched its team's later jobs start
for days (docs/BENCHMARKS.md, forty-second session: 268 hours on seed 5's workload)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from scheduler.types import PendingJob, Policy

from .builders import NOW, decide, job, nodes, running, snap, started, team, waits

DAY = 24 * 3600.0
HOLD = Policy(quota_hold_after_s=3 * DAY)

PASSED = (
    "; a job refused quota holds none of its team's nominal quota, so the team's smaller jobs"
    " may start before it, later ones too"
)
PASSED_UNTIL = (
    "; a job refused quota holds none of its team's nominal quota until it has waited 259200 s,"
    " so until then the team's smaller jobs may start before it, later ones too"
)
HOLDING = (
    "; having waited 259200 s, it holds 4 GPUs of its team's nominal quota as they free: the"
    " team's later jobs take them only if their time limit ends before it can start"
)
# What the ledger says of team a at `gang`'s turn: six GPUs used, none to borrow.
NUMBERS = (
    "team a uses 6 of 8 * GPUs; borrowing limit 0 (needs 4 more)",
    "team a uses 7 of 8 * GPUs; borrowing limit 0 (needs 4 more)",
)

# Team a (nominal 8, no borrowing) runs six 1-GPU jobs on n1: two end by +1000 by their
# limits, four by +50000. Its `gang` (4 GPUs) does not fit the two GPUs of nominal left, and
# could start at +1000; a later 1-GPU job fits now, but not beside the gang then.
TEAMS = [team("a", 8)]
BUSY = [
    running(f"a{i}", {"n1": [i]}, started=NOW - 100, limit=1100.0 if i < 2 else 50100.0)
    for i in range(6)
]


@dataclass(frozen=True)
class Case:
    waited: float
    policy: Policy = field(default_factory=Policy)
    tail: str = PASSED
    holds_nominal_after_s: float | None = None
    later_starts: bool = True


CASES = {
    "by-default": Case(waited=4 * DAY),
    "before-the-hold-age": Case(
        waited=2 * DAY, policy=HOLD, tail=PASSED_UNTIL, holds_nominal_after_s=3 * DAY
    ),
    "past-the-hold-age": Case(waited=4 * DAY, policy=HOLD, tail=HOLDING, later_starts=False),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_job_refused_quota_is_told_whether_its_teams_smaller_jobs_may_pass_it(
    case: Case,
) -> None:
    pending = [
        job("gang", gpus=4, submit=NOW - case.waited),
        job("later", submit=NOW - 100, limit=7200.0),  # it outlasts the gang's wait
    ]

    d = decide(snap(nodes(2), TEAMS, pending, BUSY), case.policy)

    assert ("later" in started(d)) is case.later_starts
    reason = waits(d)["gang"].reason
    assert reason.code == "quota_exhausted"
    # The gang goes first in the order (FIFO within the team), so it saw six GPUs used.
    assert reason.message == NUMBERS[0] + case.tail
    details = dict(reason.details)
    if case.later_starts:
        assert details["holds_nominal_after_s"] == case.holds_nominal_after_s
        assert "holds_nominal" not in details
    else:
        assert details["holds_nominal"] == 4
        assert "holds_nominal_after_s" not in details


@pytest.mark.parametrize(
    ("pending", "why"),
    [
        # One GPU: no smaller job can pass it, and a later one of its size comes after it.
        ([job("one", submit=NOW - DAY)], "a job of one GPU"),
        # More than the nominal: it can only start by borrowing, whatever the team's jobs do.
        ([job("big", gpus=9, nodes=1, submit=NOW - DAY)], "a job its nominal cannot hold"),
    ],
    ids=["one-gpu", "larger-than-the-nominal"],
)
def test_a_job_the_teams_smaller_jobs_cannot_pass_is_told_nothing_of_them(
    pending: list[PendingJob], why: str
) -> None:
    busy = [running(f"a{i}", {"n1": [i]}, started=NOW - 100) for i in range(8)]

    d = decide(snap(nodes(2, gpus=16), TEAMS, pending, busy))

    reason = waits(d)[pending[0].request.id].reason
    assert reason.code == "quota_exhausted", why
    assert "smaller jobs" not in reason.message, why
    assert "holds_nominal_after_s" not in dict(reason.details), why


def test_a_later_job_of_the_same_kind_is_told_it_too() -> None:
    # Two gangs of one kind: the second gets the kind's verdict, worked out again at its turn
    # once `later` has started (seven GPUs used then).
    pending = [
        job("gang", gpus=4, submit=NOW - 2 * DAY),
        job("later", submit=NOW - 1000),
        job("gang2", gpus=4, submit=NOW - 100),
    ]

    d = decide(snap(nodes(2), TEAMS, pending, BUSY))

    assert "later" in started(d)
    assert waits(d)["gang"].reason.message == NUMBERS[0] + PASSED
    assert waits(d)["gang2"].reason.message == NUMBERS[1] + PASSED
