"""What is lent: a team borrows other teams' idle nominal and capacity nobody owns, never
more than they lend, and the same whichever lenders' quota earlier loans were counted on."""

from __future__ import annotations

import pytest

from scheduler.types import ANY_MODEL, Decisions, Node, Policy, Quota, Team

from .builders import A100, H100, NOW, decide, job, nodes, running, snap, team, waits


def lendable(d: Decisions, job_id: str) -> float:
    reason = waits(d)[job_id].reason
    assert reason.code == "quota_exhausted", reason.message
    return float(dict(reason.details)["lendable"])


def two_models() -> tuple[Node, ...]:
    return nodes(1, model=A100, prefix="a") + nodes(1, model=H100, prefix="h")


@pytest.mark.parametrize(
    ("c_quota", "b_quota"),
    [(ANY_MODEL, ANY_MODEL), (A100, ANY_MODEL), (ANY_MODEL, A100), (A100, A100)],
)
def test_loans_held_on_a_teams_idle_nominal_are_not_lendable_to_it_once_it_borrows(
    c_quota: str, b_quota: str
) -> None:
    # c (nominal 5) runs 1 GPU; its 6-GPU job is larger than its nominal, so c's idle 4 is
    # lent. b lends 2 of its idle 11; a (nominal 0) borrows 2. To start, c uses its own 4
    # and borrows 2 more: a's 2 must then be on b's 2, and nothing is left to lend to c,
    # whichever of the two pools ("*" or A100) the quotas were written in.
    teams = [
        team("a", 0, borrow=None),
        team("b", 11, model=b_quota, lending=2),
        team("c", 5, borrow=None, model=c_quota),
    ]
    run = [running("a1", {"n4": [0, 1]}, team="a"), running("c1", {"n1": [0]}, team="c")]
    d = decide(snap(nodes(4, gpus=4), teams, [job("c-big", team="c", gpus=3, nodes=2)], run))
    assert d.starts == ()
    assert lendable(d, "c-big") == 0


@pytest.mark.parametrize("a_quota", [ANY_MODEL, A100])
def test_loans_on_a_teams_idle_nominal_it_uses_need_capacity_nobody_owns(
    a_quota: str,
) -> None:
    # 16 GPUs, 12 of them nobody's quota. b (nominal 0) borrows 2; a (nominal 4) runs 3.
    # a's 14-GPU job uses a's idle 1 and may borrow the 10 left, not 11, whether b's loan
    # was counted on a's idle nominal or on capacity nobody owns.
    run = [running(f"a{i}", {"n1": [i]}, team="a") for i in range(3)]
    run.append(running("b1", {"n2": [0, 1]}, team="b"))
    teams = [team("a", 4, borrow=None, model=a_quota), team("b", 0, borrow=None)]
    d = decide(snap(nodes(2), teams, [job("a-big", team="a", gpus=7, nodes=2)], run))
    assert lendable(d, "a-big") == 10


def test_capacity_nobody_owns_stays_lendable_for_another_model_when_an_owner_lends_this_one() -> (
    None
):
    # 8 A100 + 8 H100. z's "*" 12 (lends nothing) and la's A100 2 leave 2 GPUs nobody owns;
    # la's 2 are idle. b borrows 2 on A100: la's idle 2 hold them, so the 2 nobody owns stay
    # lendable, and c borrows them on H100.
    teams = [
        team("z", 12, lending=0),
        team("la", 2, model=A100),
        team("b", 0, borrow=None),
        team("c", 0, borrow=None),
    ]
    run = [running("b0", {"a1": [0, 1]}, team="b", model=A100)]
    d = decide(snap(two_models(), teams, [job("c1", team="c", gpus=2, model=H100)], run))
    assert [s.job_id for s in d.starts] == ["c1"], waits(d)["c1"].reason.message


def test_capacity_nobody_owns_stays_lendable_for_another_model_within_a_cycle() -> None:
    # As above, with b's A100 loan started in the same cycle (b's job comes first).
    teams = [
        team("z", 12, lending=0),
        team("la", 2, model=A100),
        team("b", 0, borrow=None),
        team("c", 0, borrow=None),
    ]
    pending = [
        job("b1", team="b", gpus=2, model=A100, submit=NOW - 1000),
        job("c1", team="c", gpus=2, model=H100, submit=NOW - 10),
    ]
    d = decide(snap(two_models(), teams, pending))
    assert sorted(s.job_id for s in d.starts) == ["b1", "c1"], waits(d)["c1"].reason.message


def test_a_team_borrowing_on_a_model_quota_still_lends_its_idle_star_nominal_to_others() -> None:
    # 8 A100 GPUs, all of them "*" quota. b has an A100 quota (nominal 0, borrows without
    # limit) and a "*" quota of 4: its A100 jobs use the A100 quota, so its "*" 4 stay idle
    # and lent, like s's "*" 4. c borrows 4, which b's "*" 4 can hold: b's 4-GPU A100 job
    # borrows s's 4 (no team borrows its own).
    teams = [
        Team("b", 1.0, (Quota(A100, 0, None), Quota(ANY_MODEL, 4))),
        team("s", 4),
        team("c", 0, borrow=None),
    ]
    run = [running("c1", {"n1": [0, 1, 2, 3]}, team="c")]
    d = decide(snap(nodes(1), teams, [job("b1", team="b", gpus=4, model=A100)], run))
    assert [s.job_id for s in d.starts] == ["b1"], waits(d)["b1"].reason.message


@pytest.mark.parametrize(
    "policy", [Policy(), Policy(preemption=False)], ids=["gpuq", "no-preemption"]
)
def test_loans_an_owner_of_another_models_quota_took_back_are_counted_against_star_quota(
    policy: Policy,
) -> None:
    # 8 A100 + 8 H100; z's "*" 100 lends nothing, so nothing is unowned. Lent for good: s's
    # "*" 4 and lh's H100 2. b holds 2 borrowed on H100 (on lh's 2). lh's 3-GPU job (larger
    # than its nominal, so its 2 were idle) starts: lh takes back its 2 and borrows 1, so
    # b's 2 and lh's 1 are on s's "*" 4 and 1 is left. c may borrow 1 on A100, not 3.
    teams = [
        team("z", 100, lending=0),
        team("s", 4),
        team("lh", 2, borrow=None, model=H100),
        team("b", 0, borrow=None),
        team("c", 0, borrow=None),
    ]
    run = [running("b1", {"h1": [0, 1]}, team="b", model=H100)]
    pending = [
        job("lh-big", team="lh", gpus=3, model=H100, submit=NOW - 1000),
        job("c1", team="c", gpus=3, model=A100, submit=NOW - 10),
    ]
    d = decide(snap(two_models(), teams, pending, run), policy)
    assert [s.job_id for s in d.starts] == ["lh-big"]
    assert lendable(d, "c1") == 1


@pytest.mark.parametrize(
    "policy", [Policy(), Policy(preemption=False)], ids=["gpuq", "no-preemption"]
)
def test_an_owner_using_its_nominal_lent_until_a_time_does_not_also_borrow_its_loans(
    policy: Policy,
) -> None:
    # 16 GPUs of "*" quotas; z's 100 lends nothing. u (4) runs 2 until NOW+3000 and v (4)
    # runs 2 until NOW+2000; each has a blocked 4-GPU job, so each lends its idle 2 until
    # its running job ends. b (nominal 0, ends NOW+600) holds 2 borrowed. u's 4-GPU job
    # (ends NOW+1000) uses u's 4 and would borrow 2: b's 2 must then be on v's 2, and
    # nothing is left for u, whichever loan b's 2 were counted on.
    teams = [
        team("u", 4, borrow=None),
        team("v", 4),
        team("b", 0, borrow=None),
        team("z", 100, lending=0),
    ]
    run = [
        running("u1", {"n1": [0, 1]}, team="u", started=NOW - 600),
        running("v1", {"n1": [2, 3]}, team="v", started=NOW - 1600),
        running("b1", {"n1": [4, 5]}, team="b", started=NOW - 3000),
    ]
    pending = [job("u-next", team="u", gpus=4, limit=1000.0), job("v-next", team="v", gpus=4)]
    d = decide(snap(nodes(2), teams, pending, run), policy)
    assert d.starts == ()
    assert lendable(d, "u-next") == 0


@pytest.mark.parametrize(
    "policy", [Policy(), Policy(preemption=False)], ids=["gpuq", "no-preemption"]
)
@pytest.mark.parametrize("v_lends", ["for good", "until a time"])
def test_loans_on_a_teams_idle_nominal_need_other_lenders_lent_for_good_or_until_a_time(
    policy: Policy, v_lends: str
) -> None:
    # t's "*" 2 is idle and lent for good (its 4-GPU job is larger than its nominal, so it
    # wants none of it); b (nominal 0, ends NOW+600) borrowed those 2. v (4) runs 2 until
    # NOW+2000 and lends its idle 2: for good, or, with a blocked 4-GPU job of its own,
    # until then. t's 4-GPU job (ends NOW+600) uses t's 2 and would borrow 2: b's 2 must
    # move to v's 2, so nothing is left either way.
    teams = [
        team("t", 2, borrow=None),
        team("v", 4),
        team("b", 0, borrow=None),
        team("z", 100, lending=0),
    ]
    run = [
        running("v1", {"n1": [2, 3]}, team="v", started=NOW - 1600),
        running("b1", {"n1": [4, 5]}, team="b", started=NOW - 3000),
    ]
    pending = [job("t-big", team="t", gpus=4, limit=600.0)]
    if v_lends == "until a time":
        pending.append(job("v-next", team="v", gpus=4))
    d = decide(snap(nodes(2), teams, pending, run), policy)
    assert d.starts == ()
    assert lendable(d, "t-big") == 0
