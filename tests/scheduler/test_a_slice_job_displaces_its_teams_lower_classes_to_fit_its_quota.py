"""A slice job of a class that cannot be preempted, over its team's quota, displaces its own
team's lower classes on that quota as a whole-GPU job in its place does: enough of them to
fit the quota, and only where it then has an instance (one free, an idle GPU to lay out, or
one that its team's lower-class slice jobs among the victims free). The instance is held for
it while they leave."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from scheduler.types import (
    JobRequest,
    MigInstance,
    MigSlot,
    NodeAlloc,
    PendingJob,
    Placement,
    RunningJob,
)

from .builders import A100, NOW, decide, job, mig_node, nodes, running, snap, team, waits
from .test_mig_over_several_cycles import MigDriver

SEVEN_1G = tuple(MigInstance("1g.10gb", s, 1) for s in range(7))
DAY = 86400.0


def slice_holder(
    job_id: str, inst: MigInstance, team: str, priority: str, started: float = NOW - 60
) -> RunningJob:
    r = JobRequest(job_id, team, priority, started - 10, 1, 1, None, inst.profile, DAY)
    slot = MigSlot(0, inst.profile, inst.start, inst.size)
    return RunningJob(r, started, Placement((NodeAlloc("m1", (), slot),)), A100)


def train(started: float = NOW - 60, limit: float = DAY) -> RunningJob:
    """Team a's normal training job on all 8 GPUs of n1, its team's whole nominal."""
    return running("train", {"n1": range(8)}, team="a", started=started, limit=limit)


@dataclass(frozen=True)
class Case:
    # Holders of m1's seven 1g.10gb instances: index -> (team, class); None: m1 is idle,
    # with no instance at all.
    holders: dict[int, tuple[str, str]] | None
    pending: PendingJob
    victims: set[str]
    nominal: float = 8.0
    train: RunningJob = field(default_factory=train)
    not_worth: bool = False  # its reason says it does not preempt: not worth it


HIGH_SLICE = job("s", team="a", mig="1g.10gb", priority="high", limit=DAY)
B_HOLDS_SIX = dict.fromkeys(range(6), ("b", "high"))

CASES = {
    # The same spot for a whole-GPU high job: it displaces the training job (as before).
    "whole-gpu-job": Case(
        dict.fromkeys(range(7), ("b", "high")),
        job("w", team="a", priority="high", limit=DAY),
        {"train"},
    ),
    # m1 is idle: the slice job displaces the training job, m1 held for it to be laid out
    # once its quota is free (before, it waited a day: the training job's limit).
    "idle-mig-gpu": Case(None, HIGH_SLICE, {"train"}),
    # One instance is free on a GPU in use: the same, the instance held for it.
    "free-instance": Case(B_HOLDS_SIX, HIGH_SLICE, {"train"}),
    # The only instance it could use is its own team's low slice job's: that one job frees
    # both the quota and the instance; the training job keeps running.
    "own-low-slice-frees-both": Case(
        {**B_HOLDS_SIX, 6: ("a", "low")}, HIGH_SLICE, {"a-6"}, nominal=8 + 1 / 7
    ),
    # The same with a nominal of 8 (lowered since): the low slice job frees the instance but
    # too little quota, so the training job goes too.
    "instance-and-more-quota": Case({**B_HOLDS_SIX, 6: ("a", "low")}, HIGH_SLICE, {"a-6", "train"}),
    # No instance could be had (every one held by another team's high jobs): displacing the
    # training job would free quota it cannot use.
    "no-instance-to-be-had": Case(dict.fromkeys(range(7), ("b", "high")), HIGH_SLICE, set()),
    # The only instance is another team's low job's, on that team's nominal: not its to take.
    "instance-of-another-team": Case(
        {**B_HOLDS_SIX, 6: ("b", "low")}, HIGH_SLICE, set(), nominal=8.0
    ),
    # A preemptible class does not displace lower classes by default (as for whole GPUs).
    "normal-class": Case(None, job("s", team="a", mig="1g.10gb", limit=DAY), set()),
    # Not worth it: the training job ran 50 minutes and ends in 10; the slice waits.
    "not-worth-it": Case(None, HIGH_SLICE, set(), train=train(NOW - 3000, 3600.0), not_worth=True),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_slice_job_displaces_its_teams_lower_classes_to_fit_its_quota(case: Case) -> None:
    layout = (
        []
        if case.holders is None
        else [
            MigInstance(i.profile, i.start, i.size, f"{case.holders[i.start][0]}-{i.start}")
            if i.start in case.holders
            else i
            for i in SEVEN_1G
        ]
    )
    run = [case.train]
    for start, (owner, priority) in (case.holders or {}).items():
        run.append(slice_holder(f"{owner}-{start}", SEVEN_1G[start], owner, priority))
    teams = [team("a", case.nominal), team("b", 8)]
    s = snap([*nodes(1), mig_node("m1", [layout])], teams, [case.pending], run)
    d = decide(s)
    job_id = case.pending.request.id
    assert {p.job_id for p in d.preemptions} == case.victims, waits(d)[job_id].reason
    reason = waits(d)[job_id].reason
    if case.victims:
        assert reason.code == "preempting", reason
        assert {p.by_job_id for p in d.preemptions} == {job_id}
        assert {p.kind for p in d.preemptions} == {"priority"}
        if case.pending.request.mig_profile:
            assert dict(d.preempting)[job_id] == ("m1",)
            assert dict(reason.details)["on_nodes"] == ("m1",)
    else:
        assert reason.code == "quota_exhausted", reason
        assert ("preemption_not_worth" in dict(reason.details)) == case.not_worth, reason


def request_for(job_id: str, team_name: str, priority: str = "high") -> JobRequest:
    return JobRequest(job_id, team_name, priority, NOW - 50, 1, 1, None, "1g.10gb", DAY)


@pytest.mark.parametrize("mig_gpu_idle", [False, True], ids=["free-instance", "idle-gpu"])
def test_the_slice_job_starts_on_the_instance_held_for_it_once_its_victims_have_left(
    mig_gpu_idle: bool,
) -> None:
    # Team a (nominal 8) runs its training job on n1; m1 is idle, or holds six high jobs of
    # team b and one free instance. Team a's high slice job displaces the training job. With
    # the free instance, team c's normal slice job (nominal 0: it borrows) comes after it in
    # the order: it may not take the instance, which the slice job would then preempt it for.
    layout = () if mig_gpu_idle else SEVEN_1G
    teams = (team("a", 8), team("b", 8), team("c", 0, borrow=None))
    driver = MigDriver((*nodes(1), mig_node("m1", [layout])), teams)
    if not mig_gpu_idle:
        for i in range(6):
            driver.holds(f"b-{i}", "m1", 0, i, priority="high", team="b", limit=None)
        driver.submit(request_for("rival", "c", "normal"))
    driver.place(train())
    driver.submit(request_for("s", "a"))

    driver.run_until(NOW + driver.policy.preemption_grace_s + 4 * driver.step)

    # Preempted once: the training job did not restart on the quota while s waited for its
    # GPU's layout, to be preempted again.
    assert driver.preemptions == [("s", "train")]
    assert "s" in driver.running, driver.decisions[-1].waits
    (alloc,) = driver.running["s"].placement.allocs
    assert alloc.node == "m1"
    assert "train" in driver.pending  # over its team's quota now: it waits
    if not mig_gpu_idle:
        assert "rival" in driver.pending
