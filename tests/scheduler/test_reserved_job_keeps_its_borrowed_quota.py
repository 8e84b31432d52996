"""EASY backfill holds quota as it holds GPUs: a later job may not borrow the quota a reserved
job will borrow at its reserved start unless it ends by then (issue 3, backfill: "a later job
may start now only if it does not delay that reservation")."""

from __future__ import annotations

import pytest

from .builders import A100, H100, NOW, decide, job, nodes, running, snap, started, team, waits

# J (team a, nominal 0) borrows team c's idle 8 GPUs, the only quota lent (e lends none of
# its nominal), but waits for n1, where e's job ends at NOW + 3000: J is reserved from then.
# S (team b, nominal 0) could borrow the same quota now on the idle H100 node.
CLUSTER = nodes(1) + nodes(1, model=H100, prefix="h")
TEAMS = [
    team("a", 0, borrow=None),
    team("b", 0, borrow=None),
    team("c", 8),
    team("e", 8, model=A100, lending=0),
]
E_JOB = running("e1", {"n1": range(8)}, team="e", started=NOW - 600, limit=3600.0)
J = job("J", team="a", gpus=8, model=A100, submit=NOW - 200, limit=3600.0)


@pytest.mark.parametrize(
    ("s_limit", "s_starts"),
    [
        (36_000.0, False),  # still running at J's start: it would take J's quota then
        (3000.0, True),  # ends exactly at J's start: it delays nothing
        (2000.0, True),
    ],
)
def test_a_later_job_borrows_a_reserved_jobs_quota_only_if_it_ends_by_the_reservation(
    s_limit: float, s_starts: bool
) -> None:
    s = job("S", team="b", gpus=8, model=H100, submit=NOW - 100, limit=s_limit)
    d = decide(snap(CLUSTER, TEAMS, [J, s], [E_JOB]))
    wait = waits(d)["J"]
    assert wait.reserved and wait.estimated_start == NOW + 3000
    assert ("S" in started(d)) is s_starts, waits(d)["S"].reason.message
    if not s_starts:
        reason = waits(d)["S"].reason
        assert reason.code == "quota_exhausted"
        assert "lent only to jobs that end sooner" in reason.message
