"""Jobs of one kind (team, class, shape) are alike to the scheduler: once one fails, the
others of its kind share its verdict that cycle, and a kind's failed search for its own
team's victims (preempt_for_quota) is kept and not made again while nothing changes. But a
job that preempted in an earlier cycle (PendingJob.preempting_on) is not like the others:
it looks at its nodes first, claims its leaving victims there past the cycle's search
bound, and a slice job has the instance its preemption freed held for it. The kind's
verdict is not its verdict: it is tried itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from scheduler.types import MigInstance, Node, PendingJob, Policy, RunningJob, Team

from .builders import NOW, decide, job, mig_node, nodes, running, snap, started, team, waits
from .test_a_slice_job_displaces_its_teams_lower_classes_to_fit_its_quota import slice_holder


def high(job_id: str, submit: float, on: tuple[str, ...] = (), gpus: int = 4) -> PendingJob:
    """A high job of team a (of one kind with the others of its GPUs, whatever its id and
    nodes)."""
    return replace(job(job_id, gpus=gpus, priority="high", submit=submit), preempting_on=on)


@dataclass(frozen=True)
class Case:
    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]
    running: tuple[RunningJob, ...]
    policy: Policy
    pending: tuple[PendingJob, ...]
    preempted: set[str]  # the victims `second` preempts, if any
    first: str = "quota_exhausted"  # why `first` waits
    second: str = "preempting"  # why `second` waits, or "started"


# Team a's nominal of 8 is held by its low job leaving n1, which `second` (8 GPUs) preempted.
# Past the cycle's one search (a gang of team c, ahead, searching in vain), `second` still
# claims it (keeps_beyond_bound); `first`, of its kind, has nothing to claim and cannot
# search.
BEYOND = Case(
    nodes(3),
    (team("a", 8), team("c", 100)),
    (
        running("n1-leaving", {"n1": range(8)}, priority="low", leaving_since=NOW - 10),
        *(
            # Ending at NOW+15: the gang is reserved there, not on n1.
            running(f"c-{n}", {n: range(8)}, team="c", priority="high", started=NOW - 3585)
            for n in ("n2", "n3")
        ),
    ),
    Policy(max_preemption_searches=1),
    (
        job("gang", gpus=8, nodes=2, team="c", priority="high", submit=NOW - 300),
        high("first", NOW - 50, gpus=8),
        high("second", NOW - 40, ("n1",), gpus=8),
    ),
    set(),
)


# The same without quotas: `first` fails for capacity (it may not search), and `second`
# still claims its leaving victim, with n1's free GPUs.
CAPACITY = replace(
    BEYOND,
    running=(
        running("n1-leaving", {"n1": range(4, 8)}, priority="low", leaving_since=NOW - 10),
        *BEYOND.running[1:],
    ),
    teams=(team("a", 100), team("c", 100)),
    policy=Policy(quotas=False, max_preemption_searches=1),
    pending=(
        job("gang", gpus=8, nodes=2, priority="high", submit=NOW - 300),
        *BEYOND.pending[1:],
    ),
    first="behind_higher_priority",
)

# m1's seven 1g instances: six held by team b's high jobs, one freed by `second`'s
# preemption (its victim gone), held for it. `first`, of its kind, finds none free.
FREED_INSTANCE = Case(
    (mig_node("m1", [[MigInstance("1g.10gb", s, 1, f"b-{s}" if s else None) for s in range(7)]]),),
    (team("a", 8), team("b", 8)),
    tuple(slice_holder(f"b-{s}", MigInstance("1g.10gb", s, 1), "b", "high") for s in range(1, 7)),
    Policy(),
    (
        job("first", mig="1g.10gb", priority="high", submit=NOW - 50),
        replace(
            job("second", mig="1g.10gb", priority="high", submit=NOW - 40), preempting_on=("m1",)
        ),
    ),
    set(),
    first="mig_unavailable",
    second="started",
)


@pytest.mark.parametrize(
    "case",
    [BEYOND, CAPACITY, FREED_INSTANCE],
    ids=["beyond-the-bound", "capacity-beyond-the-bound", "freed-instance"],
)
def test_a_kinds_failed_search_for_its_own_victims_is_not_another_preemptors_verdict(
    case: Case,
) -> None:
    d = decide(snap(case.nodes, case.teams, case.pending, case.running), case.policy)

    assert waits(d)["first"].reason.code == case.first, waits(d)["first"].reason
    if case.second == "started":
        assert set(started(d)) == {"second"}, waits(d)["second"].reason
        return
    reason = waits(d)["second"].reason
    assert reason.code == case.second, reason
    assert {p.job_id for p in d.preemptions} == case.preempted
    assert {p.by_job_id for p in d.preemptions} <= {"second"}
    assert dict(d.preempting)["second"] == case.pending[-1].preempting_on
