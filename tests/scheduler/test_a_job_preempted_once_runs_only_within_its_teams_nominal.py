"""A job the queue preempted Policy.protect_after_preemptions times (1 by default) is
protected: it starts again only within its team's nominal quota, as a job of a class that
cannot be preempted does, and is no victim again (reclaim, priority, a slice's preemption),
so it is not thrown away over and over. It keeps its class's rank otherwise: it gains no
power to preempt lower classes. A job larger than its team's nominal stays unprotected (it
could never start again)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from scheduler.types import (
    JobRequest,
    MigInstance,
    MigSlot,
    NodeAlloc,
    PendingJob,
    Placement,
    Policy,
    RunningJob,
    Snapshot,
)

from .builders import (
    A100,
    NOW,
    decide,
    job,
    mig_node,
    nodes,
    running,
    snap,
    started,
    team,
    waits,
)

DAY = 86400.0
NO_PROTECTION = Policy(protect_after_preemptions=None)


def preempted(p: PendingJob, times: int) -> PendingJob:
    return replace(p, preemptions=times)


def ran_after(j: RunningJob, times: int) -> RunningJob:
    return replace(j, preemptions=times)


# -- starts: only within the team's nominal ----------------------------------------------------


@dataclass(frozen=True)
class StartCase:
    preemptions: int
    policy: Policy
    starts: bool  # and borrows: team a's nominal is full of its high job


START_CASES = {
    "never-preempted-borrows": StartCase(0, Policy(), True),
    "preempted-once-waits": StartCase(1, Policy(), False),
    "preempted-three-times-waits": StartCase(3, Policy(), False),
    "no-protection-borrows": StartCase(1, NO_PROTECTION, True),
    "below-the-threshold-borrows": StartCase(2, Policy(protect_after_preemptions=3), True),
}


def _team_a_full_of_its_high_job(p: PendingJob) -> Snapshot:
    # Team a (nominal 8 A100) runs a high job on n1's 8 GPUs; team b's nominal 8 is idle and
    # lent; n2 is free. Team a's 8-GPU normal job could start there only by borrowing.
    teams = [team("a", 8, borrow=None, model=A100), team("b", 8, model=A100)]
    hi = running("hi", {"n1": range(8)}, priority="high")
    return snap(nodes(2), teams, [p], [hi])


@pytest.mark.parametrize("case", START_CASES.values(), ids=START_CASES.keys())
def test_a_preempted_job_starts_again_only_within_its_teams_nominal(case: StartCase) -> None:
    p = preempted(job("p", gpus=8), case.preemptions)
    d = decide(_team_a_full_of_its_high_job(p), case.policy)
    if case.starts:
        assert started(d)["p"].borrowed
        return
    assert not d.starts and not d.preemptions
    reason = waits(d)["p"].reason
    assert reason.code == "quota_exhausted"
    times = "1 time" if case.preemptions == 1 else f"{case.preemptions} times"
    assert reason.message == (
        f"preempted {times}, so it now runs only within team a's nominal quota, where nothing"
        f" preempts it again: team a runs 8 of 8 {A100} GPUs there (needs 8)"
    )
    details = dict(reason.details)
    assert details["protected_after_preemptions"] == case.preemptions
    assert (details["non_preemptible_used"], details["nominal"], details["requested"]) == (8, 8, 8)


def test_a_high_job_refused_for_a_protected_job_is_told_it_is_one() -> None:
    # Team a's nominal 8 is held by a protected normal job: the high job may not borrow, and
    # "classes that cannot be preempted" alone would not be what holds it.
    teams = [team("a", 8, borrow=None, model=A100), team("b", 8, model=A100)]
    prot = ran_after(running("prot", {"n1": range(8)}), 1)
    d = decide(snap(nodes(2), teams, [job("hi", gpus=8, priority="high")], [prot]))
    reason = waits(d)["hi"].reason
    assert reason.code == "quota_exhausted"
    assert reason.message == (
        f"team a runs 8 of 8 {A100} GPUs in classes that cannot be preempted or in jobs"
        " protected after being preempted (8 of them), which run only within nominal quota"
        " (needs 8)"
    )
    assert dict(reason.details)["protected_used"] == 8


# -- no victim again -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "victims"),
    [(Policy(), ["b-old"]), (NO_PROTECTION, ["b-prot"])],
    ids=["protected", "no-protection"],
)
def test_a_protected_job_is_no_reclaim_victim_and_the_guarantee_comes_from_the_others(
    policy: Policy, victims: list[str]
) -> None:
    # Team b (nominal 8) runs 16 GPUs: b-prot (4 GPUs on n1, restarted a minute ago after a
    # preemption), b-old (4 on n1) and b-gang (8 on n2). Team a asks for its nominal 4 on a
    # full cluster. Unprotected, b-prot is the cheapest victim; protected, team a reclaims
    # from b's other jobs, which hold what b borrows: b-old, fewer GPUs than the gang.
    teams = [team("a", 4, model=A100), team("b", 8, borrow=None, model=A100)]
    busy = [
        ran_after(running("b-prot", {"n1": range(4)}, team="b", started=NOW - 60), 1),
        running("b-old", {"n1": range(4, 8)}, team="b", started=NOW - 5000),
        running("b-gang", {"n2": range(8)}, team="b", started=NOW - 3000),
    ]
    d = decide(snap(nodes(2), teams, [job("a1", gpus=4)], busy), policy)
    assert [(p.job_id, p.kind) for p in d.preemptions] == [(v, "reclaim") for v in victims]
    assert waits(d)["a1"].reason.code == "preempting"


@pytest.mark.parametrize(
    ("policy", "victims"),
    [(Policy(), []), (NO_PROTECTION, ["low"])],
    ids=["protected", "no-protection"],
)
def test_a_protected_job_is_no_priority_victim_of_a_high_job(
    policy: Policy, victims: list[str]
) -> None:
    # Team a (nominal 16) runs a low job on n1's 8 GPUs, restarted after one preemption; its
    # high job fits the nominal but not the node.
    low = ran_after(running("low", {"n1": range(8)}, priority="low", started=NOW - 100), 1)
    s = snap(nodes(1), [team("a", 16, model=A100)], [job("hi", gpus=8, priority="high")], [low])
    d = decide(s, policy)
    assert [p.job_id for p in d.preemptions] == victims


def _slice_holder(i: int, started_at: float, preemptions: int, priority: str = "low") -> RunningJob:
    r = JobRequest(f"a{i}", "a", priority, started_at - 10, 1, 1, None, "1g.10gb", DAY)
    slot = MigSlot(0, "1g.10gb", i, 1)
    placement = Placement((NodeAlloc("m1", (), slot),))
    return RunningJob(r, started_at, placement, A100, preemptions=preemptions)


@pytest.mark.parametrize(
    ("policy", "victims"),
    [(Policy(), ["a0"]), (NO_PROTECTION, ["a6"])],
    ids=["protected", "no-protection"],
)
def test_a_protected_slice_job_is_no_victim_of_a_slice_job(
    policy: Policy, victims: list[str]
) -> None:
    # m1's seven 1g.10gb instances are held by team a's low jobs; a6 restarted a minute ago
    # after a preemption (the cheapest victim, unprotected). A high slice job needs one.
    holders = [_slice_holder(i, NOW - 5000, 0) for i in range(6)]
    holders.append(_slice_holder(6, NOW - 60, 1))
    m1 = mig_node("m1", [[MigInstance("1g.10gb", i, 1, f"a{i}") for i in range(7)]])
    pending = [job("s", mig="1g.10gb", priority="high", limit=DAY)]
    d = decide(snap([m1], [team("a", 8, model=A100)], pending, holders), policy)
    assert [p.job_id for p in d.preemptions] == victims


# -- no new power to preempt -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("preemptions", "classes_preempt", "victims"),
    [
        # As a normal job it does not preempt for priority; protection changes nothing.
        (0, False, []),
        (1, False, []),
        # Where normal jobs do preempt lower classes, so does a protected one.
        (0, True, ["low"]),
        (1, True, ["low"]),
    ],
)
def test_a_protected_job_preempts_lower_classes_only_as_its_class_does(
    preemptions: int, classes_preempt: bool, victims: list[str]
) -> None:
    # Team a (nominal 8) runs a low job on n1's 8 GPUs; its normal job, over its quota while
    # the low job runs, could run within the nominal by displacing it.
    low = running("low", {"n1": range(8)}, priority="low", started=NOW - 100)
    p = preempted(job("p", gpus=8), preemptions)
    s = snap(nodes(1), [team("a", 8, model=A100)], [p], [low])
    d = decide(s, Policy(preemptible_classes_preempt=classes_preempt))
    assert [p.job_id for p in d.preemptions] == victims


# -- larger than the nominal: unprotected --------------------------------------------------------


def test_a_preempted_job_larger_than_its_teams_nominal_still_borrows() -> None:
    # Team a's nominal is 4; its 8-GPU job could never start within it.
    teams = [team("a", 4, borrow=None, model=A100), team("b", 8, model=A100)]
    d = decide(snap(nodes(2), teams, [preempted(job("big", gpus=8), 2)]))
    assert started(d)["big"].borrowed


def test_a_running_job_larger_than_its_teams_nominal_is_still_reclaimed() -> None:
    # Team b (nominal 4) runs an 8-GPU job it restarted after two preemptions, on n1; team a
    # asks for its nominal.
    teams = [team("a", 8, model=A100), team("b", 4, borrow=None, model=A100)]
    big = ran_after(running("big", {"n1": range(8)}, team="b"), 2)
    d = decide(snap(nodes(1), teams, [job("a1", gpus=8)], [big]))
    assert [(p.job_id, p.kind) for p in d.preemptions] == [("big", "reclaim")]


# -- running above the nominal (started before the rule, or the nominal cut since) -----------------


@pytest.mark.parametrize(
    ("high_on_b", "victims"),
    [(False, ["b-new"]), (True, ["b-old", "b-new"])],
    ids=["the-first-fits-the-nominal", "a-high-job-holds-the-nominal"],
)
def test_protected_jobs_above_their_teams_nominal_are_reclaimed_all_the_same(
    high_on_b: bool, victims: list[str]
) -> None:
    # Team b (nominal 4) runs two 4-GPU jobs on n1, each once preempted: they borrow 4 GPUs
    # (they started before protection was on, or b's nominal was cut). Protection covers
    # them, earliest first, only while b's protected and non-preemptible jobs fit its
    # nominal: the rest is borrowed and team a, asking for its nominal, reclaims it. With
    # b's high job holding b's nominal (on n2), neither is covered: team a's 8 GPUs come
    # from both.
    asks = 8 if high_on_b else 4
    teams = [team("a", asks, model=A100), team("b", 4, borrow=None, model=A100)]
    busy = [
        ran_after(running("b-old", {"n1": range(4)}, team="b", started=NOW - 5000), 1),
        ran_after(running("b-new", {"n1": range(4, 8)}, team="b", started=NOW - 3000), 1),
    ]
    if high_on_b:
        busy.append(running("b-hi", {"n2": range(4)}, team="b", priority="high"))
        busy.append(running("b-fill", {"n2": range(4, 8)}, team="b", started=NOW - 9000))
    d = decide(snap(nodes(2 if high_on_b else 1), teams, [job("a1", gpus=asks)], busy))
    assert sorted(p.job_id for p in d.preemptions) == sorted(victims)
    assert {p.kind for p in d.preemptions} == {"reclaim"}


@pytest.mark.parametrize(
    ("nominal", "waits_for_quota"),
    [(1 / 7, True), (0.1, False)],
    ids=["a-slice-fits-the-nominal", "a-slice-exceeds-the-nominal"],
)
def test_a_slice_job_is_protected_when_its_share_fits_its_teams_nominal(
    nominal: float, waits_for_quota: bool
) -> None:
    # A 1g.10gb slice counts 1/7 of a GPU: within a nominal of 1/7, not of 0.1. Team a's
    # high slice job holds one instance of m1 (all of a nominal of 1/7); team b's idle
    # nominal is lent.
    holder = _slice_holder(0, NOW - 60, 0, priority="high")
    layout = [MigInstance("1g.10gb", i, 1, "a0" if i == 0 else None) for i in range(7)]
    m1 = mig_node("m1", [layout])
    teams = [team("a", nominal, borrow=None, model=A100), team("b", 8, model=A100)]
    p = preempted(job("s", mig="1g.10gb"), 1)
    d = decide(snap([m1], teams, [p], [holder]))
    if waits_for_quota:
        reason = waits(d)["s"].reason
        assert reason.code == "quota_exhausted"
        assert dict(reason.details)["protected_after_preemptions"] == 1
    else:
        assert started(d)["s"].borrowed


# -- one verdict per kind --------------------------------------------------------------------------


@pytest.mark.parametrize("protected_first", [True, False])
def test_a_protected_job_and_an_unprotected_one_of_a_kind_get_their_own_verdicts(
    protected_first: bool,
) -> None:
    # Both are team a's normal 8-GPU jobs; team a's nominal is full of its high job. The
    # unprotected one borrows, whichever is first in the queue; the protected one waits.
    first, second = (NOW - 200, NOW - 100) if protected_first else (NOW - 100, NOW - 200)
    prot = preempted(job("prot", gpus=8, submit=first), 1)
    free = job("free", gpus=8, submit=second)
    teams = [team("a", 8, borrow=None, model=A100), team("b", 8, model=A100)]
    hi = running("hi", {"n1": range(8)}, priority="high")
    d = decide(snap(nodes(2), teams, [prot, free], [hi]))
    assert list(started(d)) == ["free"]
    assert dict(waits(d)["prot"].reason.details)["protected_after_preemptions"] == 1
