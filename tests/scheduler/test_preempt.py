"""Preemption: reclaim of nominal quota, priority, minimal victims, no ping-pong."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.types import Policy

from .builders import A100, NOW, decide, job, nodes, running, snap, team, waits

# Most preemptors below are normal jobs, a preemptible class: they preempt lower classes only
# where the policy lets preemptible classes do so (by default only non-preemptible ones do).
NORMAL_PREEMPTS = Policy(preemptible_classes_preempt=True)


def borrowed_cluster(b_jobs: int = 8, started_step: float = 10.0):  # type: ignore[no-untyped-def]
    """One 8-GPU node; team b (nominal 4) runs 8 one-GPU jobs: 4 of them on a's idle quota."""
    teams = [team("a", 4, model=A100), team("b", 4, borrow=4, model=A100)]
    busy = [
        running(f"b{i}", {"n1": [i]}, team="b", started=NOW - 1000 + i * started_step)
        for i in range(b_jobs)
    ]
    return teams, busy


def test_team_below_nominal_reclaims_borrowed_gpus() -> None:
    teams, busy = borrowed_cluster()
    d = decide(snap(nodes(1), teams, [job("a1", team="a", gpus=2)], busy))
    assert {p.job_id for p in d.preemptions} == {"b7", "b6"}  # the most recently started
    assert all(p.kind == "reclaim" and p.by_job_id == "a1" for p in d.preemptions)
    assert (
        d.preemptions[0].message
        == f"preempted by job a1: team a reclaimed its nominal {A100} quota"
    )
    w = waits(d)["a1"]
    assert w.reason.code == "preempting" and w.estimated_start == NOW + 30


def test_reclaim_never_takes_more_than_the_borrowed_part() -> None:
    teams, busy = borrowed_cluster()
    d = decide(
        snap(
            nodes(1),
            teams,
            [job("a1", team="a", gpus=4), job("a2", team="a", gpus=4, submit=NOW)],
            busy,
        )
    )
    assert len(d.preemptions) == 4  # b keeps its nominal 4


def test_team_above_nominal_does_not_reclaim() -> None:
    teams, busy = borrowed_cluster()
    d = decide(snap(nodes(1), teams, [job("b9", team="b")], busy))
    assert not d.preemptions


def test_higher_class_preempts_lower_preemptible_class_of_its_own_team() -> None:
    busy = [
        running(f"low{i}", {"n1": [i]}, priority="low", started=NOW - 100 * i) for i in range(8)
    ]
    s = snap(nodes(1), [team("a", 8)], [job("hi", priority="normal", gpus=2)], busy)
    d = decide(s, NORMAL_PREEMPTS)
    assert {p.job_id for p in d.preemptions} == {"low0", "low1"}
    assert d.preemptions[0].kind == "priority"
    assert "outranks low (10)" in d.preemptions[0].message


def test_by_default_a_preemptible_class_does_not_preempt_lower_classes() -> None:
    # Kubernetes' preemptionPolicy Never for preemptible classes: normal waits, by nodes and
    # by its own team's quota alike, where a non-preemptible class would preempt.
    busy = [
        running(f"low{i}", {"n1": [i]}, priority="low", started=NOW - 100 * i) for i in range(8)
    ]
    for quotas in (True, False):
        policy = Policy(quotas=quotas)
        normal = snap(nodes(1), [team("a", 8)], [job("x", priority="normal", gpus=2)], busy)
        assert decide(normal, policy).preemptions == ()
        high = snap(nodes(1), [team("a", 8)], [job("x", priority="high", gpus=2)], busy)
        preempted = decide(high, policy).preemptions
        assert {p.job_id for p in preempted} == {"low0", "low1"}
        assert {p.kind for p in preempted} == {"priority"}


def test_by_default_a_preemptible_job_still_reclaims_its_teams_nominal_quota() -> None:
    teams, busy = borrowed_cluster()
    mine = job("a1", team="a", priority="low", gpus=2)  # the lowest class there is
    d = decide(snap(nodes(1), teams, [mine], busy))
    assert {(p.job_id, p.kind) for p in d.preemptions} == {("b7", "reclaim"), ("b6", "reclaim")}


def test_a_job_displaces_its_own_lower_classes_only_to_run_within_nominal() -> None:
    # a holds its nominal 4 with normal jobs and borrows 4 with low ones. Another normal job
    # would run on borrowed quota even with the low jobs gone: they keep running.
    busy = [running(f"n{i}", {"n1": [i]}, team="a") for i in range(4)]
    busy += [running(f"low{i}", {"n1": [4 + i]}, team="a", priority="low") for i in range(4)]
    pending = [job("x", team="a", priority="normal")]
    teams = [team("a", 4, borrow=4), team("b", 4)]
    d = decide(snap(nodes(1), teams, pending, busy))
    assert d.preemptions == ()
    # A high job fits a's nominal once a lower class leaves: it displaces one.
    d = decide(snap(nodes(1), teams, [job("h", team="a", priority="high")], busy))
    assert [p.job_id for p in d.preemptions] == ["low0"]


def test_priority_does_not_take_another_teams_guaranteed_gpus() -> None:
    busy = [running(f"b{i}", {"n1": [i]}, team="b", priority="low") for i in range(4)]
    busy += [running(f"a{i}", {"n1": [4 + i]}, team="a") for i in range(4)]
    d = decide(
        snap(
            nodes(1),
            [team("a", 4, borrow=4), team("b", 4)],
            [job("x", team="a", priority="high")],
            busy,
        )
    )
    # b's low jobs run within b's nominal quota: x displaces a job of its own team instead.
    assert [p.job_id for p in d.preemptions] == ["a0"]


def test_non_preemptible_jobs_are_never_victims() -> None:
    busy = [running(f"h{i}", {"n1": [i]}, team="b", priority="high") for i in range(8)]
    d = decide(snap(nodes(1), [team("a", 4), team("b", 8)], [job("a1", team="a")], busy))
    assert not d.preemptions


def test_victims_are_borrowed_first_then_lowest_class_then_most_recent() -> None:
    teams = [team("a", 4), team("b", 4, borrow=4)]
    busy = [
        running(f"b-normal{i}", {"n1": [i]}, team="b", started=NOW - 5000 + i) for i in range(4)
    ]
    busy += [
        running(f"b-low{i}", {"n1": [4 + i]}, team="b", priority="low", started=NOW - 9000 + i)
        for i in range(4)
    ]
    d = decide(snap(nodes(1), teams, [job("a1", team="a")], busy))
    # b's 4 borrowed GPUs are its 4 most recent jobs (the normal ones); among them the newest.
    assert [p.job_id for p in d.preemptions] == ["b-normal3"]


def test_a_victim_the_job_fits_without_is_spared() -> None:
    """The minimal victim set: the most recent low job (1 GPU) comes first in preference
    order, but once the 7-GPU one is taken the high job fits without it."""
    s = snap(
        nodes(1),
        [team("a", 16)],
        [job("p", gpus=7, priority="high")],
        [
            running("A", {"n1": [0]}, started=NOW - 60, priority="low"),
            running("B", {"n1": range(1, 8)}, started=NOW - 600, priority="low"),
        ],
    )
    d = decide(s, Policy(preemption_loss_ratio=None))
    assert [p.job_id for p in d.preemptions] == ["B"]


@pytest.mark.parametrize(("age_s", "preempted"), [(100.0, False), (4000.0, True)])
def test_min_runtime_protects_from_priority_preemption(age_s: float, preempted: bool) -> None:
    busy = [
        running(f"low{i}", {"n1": [i]}, priority="low", started=NOW - age_s, limit=86400.0)
        for i in range(8)
    ]
    policy = replace(NORMAL_PREEMPTS, min_runtime_s=3600)
    d = decide(snap(nodes(1), [team("a", 8)], [job("hi")], busy), policy)
    assert bool(d.preemptions) is preempted


def test_min_runtime_does_not_protect_from_reclaim() -> None:
    teams, busy = borrowed_cluster()
    d = decide(snap(nodes(1), teams, [job("a1", team="a")], busy), Policy(min_runtime_s=1e9))
    assert [p.kind for p in d.preemptions] == ["reclaim"]


def test_jobs_already_leaving_are_counted_and_not_preempted_again() -> None:
    teams, busy = borrowed_cluster()
    busy[7] = running("b7", {"n1": [7]}, team="b", leaving_since=NOW - 10)
    d = decide(snap(nodes(1), teams, [job("a1", team="a")], busy))
    assert not d.preemptions
    assert waits(d)["a1"].reason.code == "preempting"


def test_each_victim_is_claimed_by_one_preemptor_per_cycle() -> None:
    teams, busy = borrowed_cluster()
    d = decide(snap(nodes(1), teams, [job(f"a{i}", team="a", submit=i) for i in range(3)], busy))
    assert sorted(p.job_id for p in d.preemptions) == ["b5", "b6", "b7"]
    assert len({p.by_job_id for p in d.preemptions}) == 3


def test_preemption_can_be_switched_off() -> None:
    teams, busy = borrowed_cluster()
    d = decide(snap(nodes(1), teams, [job("a1", team="a")], busy), Policy(preemption=False))
    assert not d.preemptions and waits(d)["a1"].reason.code in {
        "no_capacity",
        "behind_higher_priority",
    }


def test_without_the_class_order_a_class_preempts_nothing() -> None:
    # The victim would be ordered ahead of its preemptor again, start on the GPUs it gave
    # up, and be preempted again: a loop at every cycle.
    busy = [
        running(f"low{i}", {"n1": [i]}, priority="low", started=NOW - 100 * i) for i in range(8)
    ]
    s = snap(nodes(1), [team("a", 8)], [job("hi", priority="high", gpus=2)], busy)
    assert decide(s).preemptions
    assert not decide(s, Policy(priorities=False)).preemptions


def test_without_the_class_order_a_team_still_reclaims_its_nominal_quota() -> None:
    teams, busy = borrowed_cluster()
    d = decide(snap(nodes(1), teams, [job("a1", team="a", gpus=2)], busy), Policy(priorities=False))
    assert {(p.job_id, p.kind) for p in d.preemptions} == {("b7", "reclaim"), ("b6", "reclaim")}


def test_non_preemptible_job_runs_within_nominal_while_its_team_borrows_with_others() -> None:
    # a holds 6 GPUs (2 borrowed) in preemptible jobs; its high job fits a's nominal for
    # non-preemptible work, starts, and is not counted as borrowed: the borrowed part stays
    # on the preemptible jobs, which b can reclaim.
    busy = [running(f"a{i}", {"n1": [i]}, team="a") for i in range(6)]
    s = snap(
        nodes(1),
        [team("a", 4, borrow=4), team("b", 4)],
        [job("urgent", team="a", priority="high")],
        busy,
    )
    d = decide(s)
    assert [(x.job_id, x.borrowed) for x in d.starts] == [("urgent", False)]
    later = snap(
        nodes(1),
        s.teams,
        [job("b1", team="b", gpus=2)],
        [*busy, running("urgent", {"n1": [6]}, team="a", priority="high")],
    )
    victims = {p.job_id for p in decide(later).preemptions}
    assert victims and victims <= {f"a{i}" for i in range(6)}


def test_preemption_takes_the_victims_that_lose_the_least_work() -> None:
    # One victim either way: the half of a 2-node gang on n1 (16 GPUs for 500 s) or a 1-GPU
    # job on n2 (1 GPU for 1,000 s). The 1-GPU job goes.
    gang = running("gang", {"n1": range(8), "n3": range(8)}, priority="low", started=NOW - 500)
    small = running("small", {"n2": [0]}, priority="low", started=NOW - 1000)
    rest = running("rest", {"n2": range(1, 8)}, priority="normal")
    s = snap(nodes(3), [team("a", 24)], [job("x", priority="normal")], [gang, small, rest])
    d = decide(s, replace(NORMAL_PREEMPTS, quotas=False))
    assert [p.job_id for p in d.preemptions] == ["small"]


@pytest.mark.parametrize(
    ("preempted_before", "cap", "preempted"), [(1, 2, True), (2, 2, False), (5, None, True)]
)
def test_a_job_preempted_often_enough_is_not_preempted_for_priority_again(
    preempted_before: int, cap: int | None, preempted: bool
) -> None:
    low = running("low", {"n1": range(8)}, priority="low", limit=86400.0)
    busy = [replace(low, preemptions=preempted_before)]
    s = snap(nodes(1), [team("a", 8)], [job("hi", priority="normal")], busy)
    # The cap alone: without protection after preemptions, which would spare "low" at once.
    policy = replace(NORMAL_PREEMPTS, max_priority_preemptions=cap, protect_after_preemptions=None)
    d = decide(s, policy)
    assert [p.job_id for p in d.preemptions] == (["low"] if preempted else [])


def test_the_preemption_cap_does_not_protect_from_reclaim() -> None:
    borrower = replace(running("b1", {"n1": range(8)}, team="b"), preemptions=9)
    teams = [team("a", 8), team("b", 0, borrow=8)]
    d = decide(snap(nodes(1), teams, [job("mine", team="a")], [borrower]))
    assert [(p.job_id, p.kind) for p in d.preemptions] == [("b1", "reclaim")]


@pytest.mark.parametrize(
    ("started_ago", "preempted"),
    [
        # 8 x 200 s lost against 1 x 3400 s of waiting by the limit: at most half, it preempts.
        (200.0, True),
        # 8 x 300 s lost against 1 x 3300 s: less than the wait, but more than half of it.
        (300.0, False),
    ],
)
def test_by_default_a_priority_preemption_loses_at_most_half_the_wait_by_time_limits(
    started_ago: float, preempted: bool
) -> None:
    # Time limits are padded, so the wait they give is about twice the real one.
    low = running("low", {"n1": range(8)}, priority="low", started=NOW - started_ago)
    s = snap(nodes(1), [team("a", 8)], [job("hi", priority="normal")], [low])
    d = decide(s, replace(NORMAL_PREEMPTS, quotas=False))
    assert [p.job_id for p in d.preemptions] == (["low"] if preempted else [])


@pytest.mark.parametrize(
    ("started_ago", "ratio", "preempted"),
    [
        # 8 GPUs x 600 s of work lost against 1 GPU x 3000 s of waiting: it waits.
        (600.0, 1.0, False),
        # 8 x 60 s lost against 1 x 3540 s of waiting: it preempts.
        (60.0, 1.0, True),
        (600.0, 2.0, True),
        (600.0, None, True),
    ],
)
def test_priority_preemption_must_lose_less_work_than_the_job_would_wait(
    started_ago: float, ratio: float | None, preempted: bool
) -> None:
    # The low job ends by its limit an hour after it started. Without quotas the job waits
    # for nodes (with them the next test's case: it waits for its own team's quota).
    low = running("low", {"n1": range(8)}, priority="low", started=NOW - started_ago)
    s = snap(nodes(1), [team("a", 8)], [job("hi", priority="normal")], [low])
    d = decide(s, replace(NORMAL_PREEMPTS, quotas=False, preemption_loss_ratio=ratio))
    assert [p.job_id for p in d.preemptions] == (["low"] if preempted else [])
    if not preempted:
        w = waits(d)["hi"]
        assert w.reason.code == "no_capacity"
        assert w.estimated_start == NOW - started_ago + 3600
        # The reason says why it does not preempt, with the numbers.
        assert w.reason.message.endswith(
            "; it does not preempt lower classes: they would lose 1.3 GPU-hours of work,"
            " more than the 3000 GPU-seconds it waits"
        )
        assert dict(w.reason.details)["preemption_not_worth"] == {
            "lost_gpu_seconds": 4800.0,
            "wait_gpu_seconds": 3000.0,
        }


@pytest.mark.parametrize(("started_ago", "preempted"), [(3000.0, False), (100.0, True)])
def test_displacing_its_own_lower_class_must_be_worth_it_too(
    started_ago: float, preempted: bool
) -> None:
    # a runs its whole nominal with low jobs that end by their limits at NOW + 600 (after
    # 3000 s: not worth throwing away) or at NOW + 3500 (after 100 s: worth it).
    limit = 3600.0 if started_ago == 3000.0 else 3600.0 + 3500.0 - 100.0
    busy = [
        running(f"low{i}", {"n1": [i]}, priority="low", started=NOW - started_ago, limit=limit)
        for i in range(4)
    ]
    d = decide(snap(nodes(1), [team("a", 4)], [job("x", priority="normal")], busy), NORMAL_PREEMPTS)
    assert len(d.preemptions) == (1 if preempted else 0)
    if not preempted:
        reason = waits(d)["x"].reason
        assert reason.code == "quota_exhausted"
        assert dict(reason.details)["preemption_not_worth"] == {
            "lost_gpu_seconds": 3000.0,
            "wait_gpu_seconds": 600.0,
        }


def test_a_job_behind_others_still_says_why_it_does_not_preempt() -> None:
    # Two jobs of one kind wait for the low job (8 GPUs, 600 s in, ends in 3000 s): the
    # second is behind the first, and its reason keeps the note.
    low = running("low", {"n1": range(8)}, priority="low", started=NOW - 600)
    pending = [job("hi1", priority="normal", submit=1), job("hi2", priority="normal", submit=2)]
    d = decide(
        snap(nodes(1), [team("a", 8)], pending, [low]), replace(NORMAL_PREEMPTS, quotas=False)
    )
    assert d.preemptions == ()
    second = waits(d)["hi2"].reason
    assert second.code == "behind_higher_priority"
    assert "it does not preempt lower classes" in second.message
    assert "preemption_not_worth" in dict(second.details)


def test_reclaim_does_not_weigh_the_work_it_throws_away() -> None:
    # b's borrowed jobs have run almost an hour and end in 100 s: a reclaims anyway, its
    # guarantee is not traded for b's work.
    teams = [team("a", 4, model=A100), team("b", 4, borrow=4, model=A100)]
    busy = [running(f"b{i}", {"n1": [i]}, team="b", started=NOW - 3500 + i) for i in range(8)]
    d = decide(snap(nodes(1), teams, [job("a1", team="a")], busy))
    assert [(p.job_id, p.kind) for p in d.preemptions] == [("b7", "reclaim")]
