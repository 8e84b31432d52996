"""A job that preempts takes the victims that lose least (issue 3: borrowed first, lowest
class, most recently started): of the plans that make room on nodes, and, for a job over its
team's quota that displaces its own team's lower classes, that also free the quota it lacks,
the one whose victims rank lowest by class, then by the GPU-seconds they have run. A victim
on its nodes frees quota too: the cheapest plan is not the cheapest nodes with the quota
made up elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from scheduler.types import Node, Policy, RunningJob, Team

from .builders import A100, NOW, decide, job, running, snap, team, waits

# Whatever the loss, so that the victims chosen show, not a refusal as not worth it.
ANY_LOSS = Policy(preemption_loss_ratio=None)


@dataclass(frozen=True)
class Case:
    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]
    running: tuple[RunningJob, ...]
    victims: set[str]  # preempted for team a's high 4-GPU job
    policy: Policy = ANY_LOSS


# Team a (nominal 12) holds its quota: a low job of 2 GPUs on n1 (4 GPUs, 2 free) that ran
# 400 s, one of 8 GPUs on n2 that ran 100 s (800 GPU-seconds each) and a high job. The job
# lacks 4 GPUs of quota and 4 on a node. On n1 one victim makes room but frees 2 GPUs of the
# quota, so n2's must go too: 1,600 GPU-seconds. n2's alone does both: 800.
OWN = Case(
    (Node("n1", A100, 4), Node("n2", A100, 8), Node("n3", A100, 8)),
    (team("a", 12), team("b", 6)),
    (
        running("n1-low", {"n1": range(2)}, priority="low", started=NOW - 400, limit=900),
        running("n2-low", {"n2": range(8)}, priority="low", started=NOW - 100, limit=700),
        running("a-high", {"n3": range(2)}, priority="high", limit=36000),
        running("b-high", {"n3": range(2, 8)}, team="b", priority="high", limit=36000),
    ),
    {"n2-low"},
)

# The job would wait 2,400 GPU-seconds (4 GPUs, 600 s until n2-low's limit frees the
# quota): 800 lost is worth it at the default ratio of 0.5, 1,600 is not.
OWN_WORTH_IT = Case(OWN.nodes, OWN.teams, OWN.running, {"n2-low"}, Policy())

# The lowest class before the least work: n1's low victim and a low one elsewhere (10,000
# GPU-seconds) rather than n2's normal one (80).
OWN_LOWEST_CLASS = Case(
    OWN.nodes,
    OWN.teams,
    (
        running("n1-low", {"n1": range(2)}, priority="low", started=NOW - 10),
        running("n2-normal", {"n2": range(8)}, started=NOW - 10),
        running("n3-low", {"n3": range(2)}, priority="low", started=NOW - 5000),
        running("b-high", {"n3": range(2, 8)}, team="b", priority="high", limit=36000),
    ),
    {"n1-low", "n3-low"},
)

# A node with room (n3, 4 GPUs free) frees no quota: the team's jobs in preference order
# would make it up, n1's (2 GPUs that ran 50 s) and then n2's, 900 GPU-seconds. n2's alone
# does both: 800.
OWN_ROOM = Case(
    (Node("n1", A100, 4), Node("n2", A100, 8), Node("n3", A100, 4)),
    (team("a", 10),),
    (
        running("n1-low", {"n1": range(2)}, priority="low", started=NOW - 50),
        running("n2-low", {"n2": range(8)}, priority="low", started=NOW - 100),
    ),
    {"n2-low"},
)

# For priority alone (no quotas): n1's low victim frees 4 GPUs but ran 1,000 s (4,000
# GPU-seconds); n2's 8 GPUs ran 100 s (800).
PRIORITY = Case(
    (Node("n1", A100, 8), Node("n2", A100, 8)),
    (team("a", 100),),
    (
        running("n1-low", {"n1": range(4)}, priority="low", started=NOW - 1000),
        running("n1-high", {"n1": range(4, 8)}, priority="high"),
        running("n2-low", {"n2": range(8)}, priority="low", started=NOW - 100),
    ),
    {"n2-low"},
    Policy(quotas=False, preemption_loss_ratio=None),
)

# Reclaim: team a within its nominal takes back what team b borrows; b's job on n1 ran
# 1,000 s on 4 GPUs, its job on n2 100 s on 8.
RECLAIM = Case(
    PRIORITY.nodes,
    (team("a", 8), team("b", 0, borrow=None)),
    (
        running("n1-b", {"n1": range(4)}, team="b", priority="low", started=NOW - 1000),
        running("n1-a", {"n1": range(4, 8)}, priority="high"),
        running("n2-b", {"n2": range(8)}, team="b", priority="low", started=NOW - 100),
    ),
    {"n2-b"},
)


@pytest.mark.parametrize(
    "case",
    [OWN, OWN_WORTH_IT, OWN_LOWEST_CLASS, OWN_ROOM, PRIORITY, RECLAIM],
    ids=[
        "own-team",
        "own-team-worth-it",
        "own-team-lowest-class",
        "own-team-a-node-with-room",
        "priority",
        "reclaim",
    ],
)
def test_a_preemptor_takes_the_victims_that_lose_least(case: Case) -> None:
    d = decide(
        snap(case.nodes, case.teams, [job("j", gpus=4, priority="high")], case.running),
        case.policy,
    )

    assert waits(d)["j"].reason.code == "preempting", waits(d)["j"].reason
    assert {p.job_id for p in d.preemptions} == case.victims
