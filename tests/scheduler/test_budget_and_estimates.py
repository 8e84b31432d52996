"""The reclaim budget, estimates for jobs refused quota, fair share with drained nodes and
the bound on victim searches, at their edges. Each test names the rule, what is expected
and (as "Before:") what the code did when a review of these changes found it."""

from __future__ import annotations

from scheduler.types import (
    JobRequest,
    MigInstance,
    MigSlot,
    Node,
    NodeAlloc,
    Placement,
    Policy,
    Quota,
    RunningJob,
    Team,
)

from .builders import (
    A100,
    H100,
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


def _slice(
    id: str,
    node: str,
    gpu: int,
    profile: str,
    start: int,
    size: int,
    started: float,
    limit: float | None,
) -> RunningJob:
    return RunningJob(
        JobRequest(id, "a", "normal", NOW - 5000, 1, 0, A100, profile, limit),
        started,
        Placement((NodeAlloc(node, (), MigSlot(gpu, profile, start, size)),)),
        A100,
    )


# -- 1. reclaim budget --------------------------------------------------------------------------


def test_a_reclaim_within_budget_is_found_when_the_cheapest_node_would_exceed_it() -> None:
    # Rule: a team below its nominal may reclaim ANY preemptible job of a team above its
    # nominal, up to what that team holds above it. b (nominal 6) holds 8: budget 2. On n1
    # its recent 4-GPU job b1 (the labelled borrower, 4 > budget); on n2 two older 2-GPU
    # jobs. a (nominal 2, nothing running) asks for 2 GPUs. Expected: a reclaims b2 or b3
    # on n2 (b keeps its nominal 6). Before: no preemption at all (a waits ~NOW + 2600):
    # preempt.plan picks the cheapest node (n1, least lost work) first and only then checks
    # the budget (_within); failing it, it drops the whole group instead of trying n2.
    teams = [team("a", 2), team("b", 6, borrow=None)]
    busy = [
        running("b1", {"n1": range(4)}, team="b", started=NOW - 100),
        running("b2", {"n2": [0, 1]}, team="b", started=NOW - 1000),
        running("b3", {"n2": [2, 3]}, team="b", started=NOW - 1000),
    ]
    d = decide(snap(nodes(2, 4), teams, [job("a1", team="a", gpus=2)], busy))
    assert [(p.kind, p.by_job_id) for p in d.preemptions] == [("reclaim", "a1")], waits(d)[
        "a1"
    ].reason.message
    assert d.preemptions[0].job_id in ("b2", "b3")


def test_a_reclaim_of_older_jobs_does_not_leave_the_labelled_ones_to_priority_victims() -> None:
    # Rule: "the budget keeps the team at its nominal or above"; priority preemption takes
    # other teams' jobs only "where those run on borrowed quota (so no team's guarantee is
    # taken by another team's priority)". b (nominal 4) holds 8 low jobs: bo1, bo2 (old,
    # pool y) and bn1, bn2 (recent, pool x: the labelled borrowers). a1 (pool y, within a's
    # nominal) reclaims bo1 + bo2 = the whole budget of 4: b is now at its nominal. c2
    # (normal, tier 1 because c's c1 comes first in c's order; pool z is full of d's high
    # job) then preempts bn1 for priority, as bn1 is still labelled borrowed: b ends at 2 of
    # its nominal 4. Expected: b keeps >= 4 GPUs (bn1 is no longer borrowed quota).
    # Before: bo1, bo2 reclaimed and bn1 priority-preempted (b left with 2). Priority
    # victims neither spend nor respect the budget. (Before these changes a1 could not reclaim in
    # pool y and b kept 6.)
    cluster = (
        Node("nx", A100, 4, pool="x"),
        Node("ny", A100, 4, pool="y"),
        Node("nz", A100, 4, pool="z"),
    )
    teams = [team("a", 4), team("b", 4, borrow=None), team("c", 4), team("d", 4)]
    busy = [
        running("bo1", {"ny": [0, 1]}, team="b", started=NOW - 5000, priority="low"),
        running("bo2", {"ny": [2, 3]}, team="b", started=NOW - 5000, priority="low"),
        running("bn1", {"nx": [0, 1]}, team="b", started=NOW - 500, priority="low"),
        running("bn2", {"nx": [2, 3]}, team="b", started=NOW - 500, priority="low"),
        running("d1", {"nz": range(4)}, team="d", priority="high"),
    ]
    pending = [
        job("a1", team="a", gpus=4, pool="y"),
        job("c1", team="c", gpus=4, pool="z", priority="high", submit=NOW - 200),
        job("c2", team="c", gpus=2, pool="x", submit=NOW - 100),
    ]
    policy = Policy(preemptible_classes_preempt=True, preemption_loss_ratio=None)
    d = decide(snap(cluster, teams, pending, busy), policy)
    gone = {p.job_id for p in d.preemptions}
    kept = sum(
        len(j.placement.allocs[0].gpus)
        for j in busy
        if j.request.team == "b" and j.request.id not in gone
    )
    assert kept >= 4, [(p.job_id, p.by_job_id, p.kind) for p in d.preemptions]


# -- 2. estimated start for jobs refused quota ------------------------------------------------


def test_a_job_refused_for_max_running_jobs_is_not_estimated_to_start_now() -> None:
    # Rule: estimated start of a job refused quota. t may run at most 1 job (nominal 8);
    # its one job r0 ends by its limit at NOW + 1000. Expected: estimated start >= NOW + 1000
    # (or None). Before: NOW: quota_estimate counts GPUs only (7 of 8 free) and ignores
    # that the refusal is max_running_jobs.
    teams = [team("t", 8, model=A100, max_jobs=1), team("o", 0)]
    busy = [running("r0", {"n1": [0]}, team="t", started=NOW - 600, limit=1600.0)]
    w = waits(decide(snap(nodes(1), teams, [job("j", team="t")], busy)))["j"]
    assert w.reason.code == "quota_exhausted"
    assert w.estimated_start is None or w.estimated_start >= NOW + 1000, w.estimated_start


def test_a_start_without_time_limit_this_cycle_holds_the_quota_for_later_estimates() -> None:
    # t (nominal 4, no borrowing) runs r0 (2 GPUs, ends NOW + 1000). j1 (4) is refused first:
    # the quota fluid is built. j2 (2, no time limit) then starts: t holds 2 GPUs for good.
    # j3 (3) is refused: 2 held forever + 3 > 4, it never fits the nominal. Expected
    # estimated start None. Before: NOW + 1100: quota_taken skips a start with no end
    # (`ends is None: return`), so the existing fluid never loses j2's GPUs.
    teams = [team("t", 4, model=A100), team("o", 0)]
    busy = [running("r0", {"n1": [0, 1]}, team="t", started=NOW - 600, limit=1600.0)]
    pending = [
        job("j1", team="t", gpus=4, submit=NOW - 300, limit=100.0),
        job("j2", team="t", gpus=2, submit=NOW - 200, limit=None),
        job("j3", team="t", gpus=3, submit=NOW - 100, limit=100.0),
    ]
    d = decide(snap(nodes(1), teams, pending, busy))
    assert "j2" in started(d)
    assert waits(d)["j3"].reason.code == "quota_exhausted"
    assert waits(d)["j3"].estimated_start is None, waits(d)["j3"].estimated_start


def test_a_quota_estimate_counts_a_job_of_the_team_ahead_waiting_for_nodes() -> None:
    # t (nominal 4) runs r0 (2 GPUs, ends NOW + 1000); the node is full until then. j1 (2,
    # no limit, ahead) fits the quota and holds a reservation from NOW + 1000, when it takes
    # 2 of t's nominal for good. j2 (3) is refused quota: it can never fit the nominal
    # behind j1. Expected None (at least not NOW + 1000, j1's own start). Before: NOW + 1000:
    # the fluid counts only jobs ahead "refused alike", not those ahead waiting for nodes.
    teams = [team("t", 4, model=A100), team("o", 6, model=A100)]
    busy = [
        running("r0", {"n1": [0, 1]}, team="t", started=NOW - 600, limit=1600.0),
        running("o1", {"n1": range(2, 8)}, team="o", started=NOW - 600, limit=1600.0),
    ]
    pending = [
        job("j1", team="t", gpus=2, submit=NOW - 300, limit=None),
        job("j2", team="t", gpus=3, submit=NOW - 200, limit=100.0),
    ]
    d = decide(snap(nodes(1), teams, pending, busy))
    assert waits(d)["j1"].reserved and waits(d)["j1"].estimated_start == NOW + 1000
    assert waits(d)["j2"].reason.code == "quota_exhausted"
    assert waits(d)["j2"].estimated_start is None, waits(d)["j2"].estimated_start


def test_quota_estimates_of_slice_jobs_do_not_depend_on_the_order_of_running_jobs() -> None:
    # Determinism: decisions must not depend on the order of snapshot tuples. a (A100 nominal
    # 2) holds 1 whole GPU and three 2g slices (13/7 GPU); s0 is overdue (ends now), s1 ends
    # at NOW + 500. p3 (3g, 3/7) then p1 (2g, 2/7) are refused quota. In exact arithmetic
    # p3 fits at NOW (1/7 + 2/7) and p1 at NOW + 500. Before: with running order
    # (s0, s1, s2, w) estimates NOW + 500 / NOW + 4100, with (s0, w, s1, s2) NOW / NOW + 500:
    # the Fluid compares `free < gpus` with no tolerance on float sums whose rounding depends
    # on the order in which the ledger added the running jobs.
    busy = [
        _slice("s0", "m1", 0, "2g.20gb", 0, 2, NOW - 2000, 1000.0),
        _slice("s1", "m1", 0, "2g.20gb", 2, 2, NOW - 500, 1000.0),
        _slice("s2", "m1", 0, "2g.20gb", 4, 2, NOW - 500, None),
        running("w", {"n1": [0]}, team="a", priority="high", limit=None),
    ]
    layout = [MigInstance("2g.20gb", start, 2, f"s{i}") for i, start in enumerate((0, 2, 4))]
    cluster = (mig_node("m1", [layout]), Node("n1", A100, 1))
    teams = [Team("a", quotas=(Quota(A100, 2),))]
    pending = [
        job("p3", team="a", mig="3g.40gb", model=A100, priority="high", submit=NOW - 10),
        job("p1", team="a", mig="2g.20gb", model=A100, submit=NOW - 5),
    ]
    # Without preemption: p3 (high) would empty m1 of its team's normal slices for a 3g
    # instance and its quota, and the estimates are what is checked here.
    policy = Policy(preemption=False)
    first = decide(snap(cluster, teams, pending, busy), policy)
    second = decide(snap(cluster, teams, pending, [busy[0], busy[3], busy[1], busy[2]]), policy)
    assert first.waits == second.waits
    assert waits(second)["p3"].estimated_start == NOW


# -- 3. drained nodes and fair share ----------------------------------------------------------


def test_gpus_held_on_a_drained_model_still_count_toward_fair_share() -> None:
    # Fair share: a team's standing grows with the GPUs it runs. t1 runs 8 H100 on h1, the
    # only H100 node, now drained; t2 runs 1 of 8 A100. Both ask for 7 A100 (only 7 free).
    # Expected: t2 (1 GPU held) goes first. Before: t1 starts: with open_capacity as the
    # denominator an H100 has 0 open GPUs, standings() skips it (cap 0), and t1's 8 GPUs
    # count as nothing. (Before these changes capacity included drained nodes: t2 first.)
    cluster = (Node("n1", A100, 8), Node("h1", H100, 8, state="drain"))
    busy = [
        running("r1", {"h1": range(8)}, team="t1", model=H100),
        running("r2", {"n1": [0]}, team="t2"),
    ]
    pending = [
        job("p1", team="t1", gpus=7, model=A100, submit=NOW - 50),
        job("p2", team="t2", gpus=7, model=A100, submit=NOW - 50),
    ]
    d = decide(snap(cluster, [], pending, busy), Policy(quotas=False, preemption=False))
    assert "p2" in started(d), [w.job_id for w in d.waits]


# -- 5. searches with no victim ---------------------------------------------------------------


def test_slice_searches_with_no_victim_do_not_use_up_the_bound() -> None:
    # Rule: a victim search with no reachable candidate does not count toward
    # Policy.max_preemption_searches. 16 high slice jobs wait in pool p, whose only GPU is
    # full of team z's non-preemptible slices (no victim there); team y's preemptible slices
    # in pool q exist, so mig_holders() is not empty. m1 is full of b's borrowed jobs; a
    # (0 of 8) asks for 1 GPU. Expected: a reclaims one of b's jobs (as with 15 slice jobs,
    # or with max_preemption_searches=17). Before: no preemption: preempt_for_mig counts
    # a search before looking for a reachable victim (only preempt_for was fixed).
    def slices(team_name: str, node: str, priority: str) -> list[RunningJob]:
        return [
            RunningJob(
                JobRequest(
                    f"{team_name}{i}", team_name, priority, NOW - 2000, 1, 0, A100, "1g.10gb", None
                ),
                NOW - 1000,
                Placement((NodeAlloc(node, (), MigSlot(0, "1g.10gb", i, 1)),)),
                A100,
            )
            for i in range(7)
        ]

    def layout(prefix: str) -> list[MigInstance]:
        return [MigInstance("1g.10gb", i, 1, f"{prefix}{i}") for i in range(7)]

    p1 = mig_node("p1", [layout("z")])
    q1 = mig_node("q1", [layout("y")])
    cluster = (
        Node("p1", A100, 1, pool="p", mig=True, mig_gpus=p1.mig_gpus),
        Node("q1", A100, 1, pool="q", mig=True, mig_gpus=q1.mig_gpus),
        Node("m1", A100, 8),
    )
    teams = [team("z", 1), team("y", 1), team("a", 8), team("b", 0, borrow=None)]
    teams += [team(f"t{i}", 1) for i in range(16)]
    busy = slices("z", "p1", "high") + slices("y", "q1", "normal")
    busy += [running(f"b{i}", {"m1": [i]}, team="b", started=NOW - 500 + i) for i in range(8)]
    pending = [
        job(
            f"t{i}",
            team=f"t{i}",
            priority="high",
            pool="p",
            mig="1g.10gb",
            model=A100,
            submit=NOW - 200,
        )
        for i in range(16)
    ]
    pending.append(job("a1", team="a", submit=NOW - 300))
    d = decide(snap(cluster, teams, pending, busy))
    assert [(p.job_id, p.by_job_id, p.kind) for p in d.preemptions] == [("b7", "a1", "reclaim")], (
        waits(d)["a1"].reason.message
    )
