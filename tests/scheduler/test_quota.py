"""Quotas: nominal is guaranteed; borrowing uses other teams' idle nominal quota."""

from __future__ import annotations

import pytest

from scheduler.types import Decisions, PendingJob, Policy, PriorityClass, Quota, Team

from .builders import A100, H100, NOW, decide, job, mig_node, nodes, running, snap, team, waits


def test_team_runs_up_to_its_nominal_quota() -> None:
    s = snap(
        nodes(1),
        [team("a", 2), team("b", 6)],
        [job(f"a{i}", team="a", submit=i) for i in range(4)] + [job("b1", team="b")],
    )
    d = decide(s)
    assert sorted(x.job_id for x in d.starts if x.job_id.startswith("a")) == ["a0", "a1"]


@pytest.mark.parametrize(("borrow", "expected_starts"), [(0.0, 2), (2.0, 4), (None, 8)])
def test_team_borrows_idle_quota_up_to_its_borrowing_limit(
    borrow: float | None, expected_starts: int
) -> None:
    s = snap(
        nodes(1),
        [team("a", 2, borrow=borrow), team("b", 6)],
        [job(f"a{i}", team="a", submit=i) for i in range(10)],
    )
    d = decide(s)
    assert len(d.starts) == expected_starts
    assert [x.borrowed for x in sorted(d.starts, key=lambda x: x.job_id)] == [False] * 2 + [
        True
    ] * (expected_starts - 2)


def _gang_waits_for_nodes(a_limit: float) -> Decisions:
    """b's 2-node gang fits b's nominal but waits for nodes: c holds 2 GPUs of n1 until
    NOW + 3000. a (nominal 2, no borrowing limit) has 6 one-GPU jobs."""
    pending = [job(f"a{i}", team="a", submit=i, limit=a_limit) for i in range(6)] + [
        job("b-gang", team="b", gpus=8, nodes=2)
    ]
    c_runs = running("c1", {"n1": [0, 1]}, team="c")
    teams = [team("a", 2, borrow=None), team("b", 16), team("c", 2)]
    return decide(snap(nodes(2), teams, pending, [c_runs]))


def test_quota_wanted_by_its_owner_is_not_lent() -> None:
    # From NOW + 3000 the gang wants b's nominal: a's jobs would still hold it then (their
    # limit ends at NOW + 3600), so a does not borrow it only to have it reclaimed.
    d = _gang_waits_for_nodes(3600.0)
    assert sorted(x.job_id for x in d.starts) == ["a0", "a1"]
    assert waits(d)["a2"].reason.code == "quota_exhausted"
    assert dict(waits(d)["a2"].reason.details)["lendable"] == 0


def test_nominal_wanted_by_a_job_waiting_for_nodes_is_lent_until_the_nodes_free() -> None:
    # The gang cannot use b's nominal before c1's limit frees n1 at NOW + 3000: until then it
    # is lent, to jobs whose limit ends first. Nodes hold 14 free GPUs; a takes 6 of them.
    d = _gang_waits_for_nodes(600.0)
    assert sorted(x.job_id for x in d.starts) == [f"a{i}" for i in range(6)]
    assert [x.borrowed for x in sorted(d.starts, key=lambda x: x.job_id)] == [False] * 2 + [
        True
    ] * 4
    assert waits(d)["b-gang"].reason.code == "no_capacity"


def test_lending_limit_caps_what_a_team_lends() -> None:
    s = snap(
        nodes(1),
        [team("a", 2, borrow=None), team("b", 6, lending=1)],
        [job(f"a{i}", team="a", submit=i) for i in range(8)],
    )
    assert len(decide(s).starts) == 3


def test_non_preemptible_class_never_borrows() -> None:
    s = snap(
        nodes(1),
        [team("a", 1, borrow=None), team("b", 7)],
        [job("h1", priority="high", submit=1), job("h2", priority="high", submit=2)],
    )
    d = decide(s)
    assert [x.job_id for x in d.starts] == ["h1"]
    reason = waits(d)["h2"].reason
    assert reason.code == "quota_exhausted"
    assert "cannot be preempted" in reason.message


@pytest.mark.parametrize(
    ("priority", "borrow", "holds"),
    [
        ("normal", 0.0, "the quota holds at most 2 (nominal 2, borrowing limit 0)"),
        ("normal", 1.0, "the quota holds at most 3 (nominal 2, borrowing limit 1)"),
        ("high", None, "classes that cannot be preempted run only within nominal quota, 2"),
    ],
    ids=["no-borrowing", "borrowing-too-little", "not-preemptible"],
)
def test_a_job_larger_than_its_quota_could_ever_hold_is_told_it_can_never_run_under_it(
    priority: str, borrow: float | None, holds: str
) -> None:
    # The same whether the quota was this small at submit or lowered since (a resumed or
    # requeued job meets it then): no wait helps, so "(needs 4 more)" would mislead. One of
    # the team's jobs runs, and the other team's idle quota is there to borrow.
    s = snap(
        nodes(1),
        [team("a", 2, borrow=borrow), team("b", 6)],
        [job("big", gpus=4, priority=priority)],
        [running("r", {"n1": [0]}, team="a")],
    )
    wait = waits(decide(s))["big"]
    assert wait.reason.code == "quota_exhausted"
    assert wait.reason.message == (
        f"it can never run under team a's * quota as it is: it needs 4 GPUs and {holds};"
        " it waits until the quota is raised"
    ), wait.reason.message
    assert dict(wait.reason.details)["never_fits"] is True
    assert wait.estimated_start is None


def test_team_without_quota_never_starts_and_says_so() -> None:
    d = decide(snap(nodes(1), [team("a", 8)], [job("x", team="nobody")]))
    assert not d.starts
    assert waits(d)["x"].reason.code == "no_quota"
    assert "nobody" in waits(d)["x"].reason.message


def test_quota_reason_gives_the_numbers() -> None:
    run = [running(f"r{i}", {"n1": [i]}, team="vision") for i in range(2)]
    d = decide(
        snap(
            nodes(1), [team("vision", 2, model=A100), team("b", 6)], [job("v", team="vision")], run
        )
    )
    reason = waits(d)["v"].reason
    assert reason.message.startswith(f"team vision uses 2 of 2 {A100} GPUs; borrowing limit 0")
    assert dict(reason.details)["used"] == 2 and dict(reason.details)["nominal"] == 2


def test_model_quota_applies_to_its_model_and_star_quota_to_the_rest() -> None:
    t = Team("a", quotas=(Quota(A100, 1), Quota("*", 2)))
    pending = [job(f"x{i}", team="a", submit=i) for i in range(5)]
    cluster = nodes(1, model=A100) + nodes(1, model=H100, prefix="h")
    d = decide(snap(cluster, [t], pending))
    assert sorted(x.gpu_model for x in d.starts) == [A100, H100, H100]


def test_capacity_no_team_owns_is_lent() -> None:
    s = snap(
        nodes(1), [team("a", 2, borrow=None)], [job(f"a{i}", team="a", submit=i) for i in range(8)]
    )
    assert len(decide(s).starts) == 8


def test_max_running_jobs_is_enforced() -> None:
    s = snap(
        nodes(1), [team("a", 8, max_jobs=3)], [job(f"a{i}", team="a", submit=i) for i in range(5)]
    )
    d = decide(s)
    assert len(d.starts) == 3 and waits(d)["a3"].reason.code == "quota_exhausted"


def test_quotas_off_ignore_teams() -> None:
    d = decide(snap(nodes(1), [], [job("x", team="nobody")]), Policy(quotas=False))
    assert [x.job_id for x in d.starts] == ["x"]


def test_unknown_priority_class_counts_as_lowest() -> None:
    s = snap(
        nodes(1, gpus=1),
        [team("a", 1)],
        [job("odd", priority="weird", submit=1), job("low", priority="low", submit=2)],
    )
    s = s.__class__(s.nodes, s.teams, s.pending, s.running, (PriorityClass("low", 10, True),))
    assert [x.job_id for x in decide(s).starts] == ["low"]


def _loan(pending: list[PendingJob], owner_limit: float | None = 1600.0) -> Decisions:
    """a (nominal 8) runs 4 GPUs, until NOW + 1000 with the default limit, and waits with a
    job that fits its nominal only once those end; b runs its nominal 8 and may borrow 8."""
    a_run = running("a-run", {"n1": [0, 1, 2, 3]}, team="a", started=NOW - 600, limit=owner_limit)
    b_runs = [running(f"b{i}", {"n2": [i]}, team="b") for i in range(8)]
    teams = [team("a", 8), team("b", 8, borrow=8)]
    return decide(snap(nodes(2), teams, pending, [a_run, *b_runs]))


def test_nominal_wanted_by_a_blocked_job_is_lent_until_that_job_could_start() -> None:
    d = _loan(
        [
            job("a-big", team="a", gpus=8, submit=NOW - 900),
            job("b-short", team="b", limit=300.0, submit=NOW - 50),
            job("b-long", team="b", limit=3600.0, submit=NOW - 40),
        ]
    )
    # b-short ends (NOW + 300) before a-big could start (NOW + 1000): it borrows a's idle
    # nominal. b-long would still hold it then: it is not lent.
    assert [(x.job_id, x.borrowed) for x in d.starts] == [("b-short", True)]
    reason = waits(d)["b-long"].reason
    assert reason.code == "quota_exhausted"
    assert dict(reason.details)["lendable"] == 0
    # a lends 4, b-short took 1: 3 are left for jobs that end before NOW + 1000.
    assert dict(reason.details)["lendable_to_shorter_jobs"] == 3
    assert reason.message.endswith("3 more are lent only to jobs that end sooner")


def test_a_shorter_job_of_a_refused_kind_still_borrows_until_the_owner_needs_it() -> None:
    # b-long and b-short are the same kind (team, class, shape): b-long's refusal does not
    # stand for b-short, which ends before the loan does.
    d = _loan(
        [
            job("a-big", team="a", gpus=8, submit=NOW - 900),
            job("b-long", team="b", limit=3600.0, submit=NOW - 50),
            job("b-short", team="b", limit=300.0, submit=NOW - 40),
        ]
    )
    assert [x.job_id for x in d.starts] == ["b-short"]
    assert waits(d)["b-long"].reason.code == "quota_exhausted"


def test_nominal_of_an_owner_whose_jobs_have_no_limit_is_not_lent() -> None:
    # When a-big could start is unknown, so no loan can be sure to end first.
    d = _loan([job("a-big", team="a", gpus=8), job("b-short", team="b", limit=300.0)], None)
    assert d.starts == ()
    assert waits(d)["b-short"].reason.code == "quota_exhausted"


def test_nominal_lent_until_a_time_is_not_lent_to_a_job_without_a_limit() -> None:
    d = _loan([job("a-big", team="a", gpus=8), job("b-open", team="b", limit=None)])
    assert d.starts == ()
    assert waits(d)["b-open"].reason.code == "quota_exhausted"


def test_owner_job_that_fits_its_nominal_now_keeps_it_from_loans() -> None:
    # a-small fits what is left of a's nominal: that GPU is wanted, and a-big (6) fits beside
    # it once a-run ends; the other 3 GPUs are lent until then.
    d = _loan(
        [
            job("a-big", team="a", gpus=6, submit=NOW - 900),
            job("a-small", team="a", gpus=1, submit=NOW - 800),
            *[job(f"b-short{i}", team="b", limit=300.0, submit=NOW - 50 + i) for i in range(4)],
        ]
    )
    started = sorted(x.job_id for x in d.starts)
    assert started == ["a-small", "b-short0", "b-short1", "b-short2"]


# -- what may be lent, and to whom -------------------------------------------------------


def test_a_star_quota_borrows_another_teams_idle_quota_of_the_jobs_model() -> None:
    # a's 8 A100 GPUs of nominal are idle and unwanted; b's "*" quota (nominal 0, unlimited
    # borrowing) borrows them for an A100 job, as a quota written for A100 would.
    s = snap(
        nodes(1),
        [team("a", 8, model=A100), team("b", 0, borrow=None)],
        [job("p", team="b", gpus=4, model=A100)],
    )
    d = decide(s)
    assert [(x.job_id, x.borrowed) for x in d.starts] == [("p", True)]


def test_capacity_nobody_owns_is_lent_though_a_quota_is_for_a_model_without_up_nodes() -> None:
    # Nobody's quota covers the 8 A100 GPUs; c's 8 H100 of nominal have no up node. The
    # A100 capacity is still nobody's, and lent.
    cluster = nodes(1) + nodes(1, model=H100, prefix="h", state="down")
    s = snap(
        cluster,
        [team("a", 0, borrow=None, model=A100), team("c", 8, model=H100)],
        [job("p", team="a", gpus=4)],
    )
    assert [x.job_id for x in decide(s).starts] == ["p"]


def test_capacity_nobody_owns_is_lent_for_its_own_model_only() -> None:
    # The H100 node is nobody's quota; the A100 node is a's, whose queue wants all of it. b
    # ("*", nominal 0) may borrow H100 capacity for an H100 job, but not for an A100 job.
    cluster = nodes(1) + nodes(1, model=H100, prefix="h")
    run = [running(f"r{i}", {"n1": [i]}, team="a") for i in range(4)]
    pending = [
        job("a-more", team="a", gpus=4, submit=NOW - 300),
        job("b-a100", team="b", gpus=4, model=A100),
        job("b-h100", team="b", gpus=4, model=H100),
    ]
    teams = [team("a", 8, model=A100), team("b", 0, borrow=None)]
    d = decide(snap(cluster, teams, pending, run))
    assert sorted(x.job_id for x in d.starts) == ["a-more", "b-h100"]
    reason = waits(d)["b-a100"].reason
    assert reason.code == "quota_exhausted", reason.message
    assert dict(reason.details)["lendable"] == 0


def test_a_team_does_not_borrow_its_own_idle_nominal() -> None:
    # a uses its 6; b (nominal 2, unlimited borrowing) runs nothing. Nobody else has idle
    # quota and all capacity is someone's: b holds at most its own 2 GPUs, so its 4- and
    # 8-GPU jobs wait for quota (none lendable), not for capacity.
    run = [running(f"r{i}", {"n1": [i]}, team="a") for i in range(6)]
    teams = [team("a", 6), team("b", 2, borrow=None)]
    for gpus in (4, 8):
        d = decide(snap(nodes(1), teams, [job("b-big", team="b", gpus=gpus)], run))
        reason = waits(d)["b-big"].reason
        assert reason.code == "quota_exhausted", reason.message
        assert dict(reason.details)["lendable"] == 0, reason.message


def test_a_team_starting_on_its_idle_nominal_takes_it_back_from_what_is_lent() -> None:
    # a's 8-GPU job uses a's idle 4 and borrows 4 of the 8 GPUs nobody owns; b (running its
    # nominal 4) may then borrow the other 4, not a's 4 again.
    run = [running(f"r{i}", {"n2": [i]}, team="b") for i in range(4)]
    teams = [team("a", 4, borrow=None), team("b", 4, borrow=None)]
    pending = [
        job("a-big", team="a", gpus=8, submit=NOW - 300),
        job("b1", team="b", gpus=4, submit=NOW - 200),
        job("b2", team="b", gpus=4, submit=NOW - 100),
    ]
    d = decide(snap(nodes(2), teams, pending, run))
    assert sorted(x.job_id for x in d.starts) == ["a-big", "b1"]
    reason = waits(d)["b2"].reason
    assert reason.code == "quota_exhausted", reason.message
    assert dict(reason.details)["lendable"] == 0


@pytest.mark.parametrize(
    ("never", "says"),
    [
        ([job("ag", team="a", gpus=2, nodes=3, submit=1)], "unsatisfiable"),  # 1 node has GPUs
        ([job("ag", team="a", gpus=6, model=H100, submit=1)], "unsatisfiable"),  # no H100
        # A100-40GB's profile: no MIG GPU (an A100 80GB) offers it; 14 x 3/7 = 6 GPUs.
        (
            [job(f"ag{i}", team="a", mig="3g.20gb", model=A100, submit=1) for i in range(14)],
            "unsatisfiable",
        ),
    ],
    ids=["more-nodes-than-exist", "absent-model", "mig-profile-not-offered"],
)
def test_a_job_that_can_never_run_wants_none_of_its_teams_nominal(
    never: list[PendingJob], says: str
) -> None:
    # a's only pending jobs can never run on the cluster as it is: a's 6 idle GPUs are lent,
    # and b (nominal 2, unlimited borrowing) borrows them for its 8-GPU job.
    cluster = (*nodes(1), mig_node("m1"))
    s = snap(
        cluster,
        [team("a", 6), team("b", 2, borrow=None)],
        [*never, job("bj", team="b", gpus=8, submit=2)],
    )
    d = decide(s)
    assert [x.job_id for x in d.starts] == ["bj"], waits(d)["bj"].reason.message
    assert {waits(d)[p.request.id].reason.code for p in never} == {says}


def test_a_job_that_can_never_run_takes_no_nominal_from_its_teams_jobs_behind_it() -> None:
    # One GPU is free; a (3 of 4 used) and b (4 of 8) each have a 1-GPU job within nominal,
    # and a, using less, goes first. a's earlier H100 job (no H100 here) would fill a's
    # nominal in the team's own order and push a1 behind b's job.
    run = [running(f"a{i}", {"n1": [i]}, team="a") for i in range(3)]
    run += [running(f"b{i}", {"n1": [3 + i]}, team="b") for i in range(4)]
    pending = [
        job("a-h100", team="a", model=H100, submit=NOW - 300),
        job("a1", team="a", model=A100, submit=NOW - 200),
        job("b1", team="b", submit=NOW - 100),
    ]
    d = decide(snap(nodes(1), [team("a", 4), team("b", 8)], pending, run))
    assert [x.job_id for x in d.starts] == ["a1"]
