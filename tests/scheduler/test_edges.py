"""Edge cases of the scheduler's rules (issue #3) and of the simulator's command.

What this file specifies:
- MIG plan and take: a slice job that may go anywhere leaves a pool-bound job the instance it
  needs; decisions do not depend on the order of the snapshot's nodes; no GPU is re-laid out
  for slices their team's quota can never start.
- Reclaim and preemption: a team below nominal takes back MIG slices from borrowers (and a
  higher class preempts lower slices), through the same victim rules as whole GPUs; a job that
  must borrow takes none of its team's nominal room from the jobs behind it.
- Estimates and reasons: drained nodes release nothing; a slice job waiting for running slices
  gets an estimated start and says what holds them; jobs "ahead" are those that compete for
  the same GPUs.
- MIG slice preemption: a GPU emptied for a relayout is held for its preemptor (no other slice
  starts on it, no reclaim loop); no victims while an idle GPU can be re-laid out, nor for a
  relayout the policy will never make; victims do not depend on input order; random MIG
  simulations keep every rule with a bounded number of preemptions.
- The simulator refuses inputs too large to simulate (exit 2 naming the field) and writes
  only JSON.
"""

from __future__ import annotations

import json
import math
import random
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from scheduler import mig, schedule
from scheduler.simulate import simulate
from scheduler.types import (
    DEFAULT_PRIORITY_CLASSES,
    Decisions,
    JobRequest,
    MigInstance,
    MigSlot,
    Node,
    NodeAlloc,
    PendingJob,
    Placement,
    Policy,
    Quota,
    RunningJob,
    Snapshot,
    Team,
)
from scheduler.workload import Cluster, SimJob

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
from .test_simulator import ONE_JOB, ONE_NODE, simulate_files

A30 = "A30-24GB"

# -- MIG: plan and take ----------------------------------------------------------------------


def _busy_mig_node(name: str, pool: str, blank_gpus: int = 0) -> Node:
    """One A100 MIG GPU with a 1g.10gb instance in use and one free, plus blank idle GPUs."""
    layout = (
        MigInstance("1g.10gb", 0, 1, f"r-{name}"),
        MigInstance("1g.10gb", 1, 1, None),
    )
    return replace(mig_node(name, [layout], gpus=1 + blank_gpus), pool=pool)


def test_a_slice_job_that_may_go_anywhere_leaves_the_instance_a_pool_bound_job_needs() -> None:
    # Two free 1g.10gb instances: one in pool x, one in pool y. p1 (any pool, first in
    # order) and p2 (pool x only) can both start now: p1 on y, p2 on x.
    pool_x, pool_y = _busy_mig_node("mx", "x"), _busy_mig_node("my", "y")
    pending = [
        job("p1", mig="1g.10gb", submit=NOW - 200),
        job("p2", mig="1g.10gb", pool="x", submit=NOW - 100),
    ]
    d = decide(snap([pool_x, pool_y], [team("a", 8, None)], pending))
    go = started(d)
    assert set(go) == {"p1", "p2"}, [(w.job_id, w.reason.message) for w in d.waits]
    assert go["p1"].placement.allocs[0].node == "my"
    assert go["p2"].placement.allocs[0].node == "mx"


def test_mig_decisions_do_not_depend_on_the_order_of_nodes_in_the_snapshot() -> None:
    # The same cluster listed in two orders; the one in pool x also has a blank idle GPU.
    pool_x, pool_y = _busy_mig_node("mx", "x", blank_gpus=1), _busy_mig_node("my", "y")
    pending = [
        job("p1", mig="1g.10gb", submit=NOW - 200),
        job("p2", mig="1g.10gb", pool="x", submit=NOW - 100),
    ]
    teams = [team("a", 8, None)]
    first = decide(snap([pool_x, pool_y], teams, pending))
    second = decide(snap([pool_y, pool_x], teams, pending))
    assert (first.starts, first.relayouts, first.waits) == (
        second.starts,
        second.relayouts,
        second.waits,
    )


def test_no_mig_gpu_is_re_laid_out_for_slice_jobs_their_team_quota_cannot_start() -> None:
    # Team a may hold 1 A100 (7 x 1g.10gb) and not borrow; it queues 14 slices. Team b's
    # 7g.80gb job fits its own quota, and idle GPU 1 is laid out as exactly that.
    node = mig_node("m1", [(), (MigInstance("7g.80gb", 0, 8),)], gpus=2)
    teams = [team("a", 1, 0, model=A100), team("b", 1, 0, model=A100)]
    pending = [
        *(job(f"a{i:02d}", team="a", mig="1g.10gb", submit=NOW - 500 + i) for i in range(14)),
        job("b1", team="b", mig="7g.80gb", submit=NOW - 100),
    ]
    d = decide(snap([node], teams, pending))
    # At most 7 of team a's slices can ever run at once: one GPU's layout serves them.
    assert [(r.node, r.gpu) for r in d.relayouts] == [("m1", 0)]
    assert "b1" in started(d), waits(d)["b1"].reason.message


# -- MIG: reclaim and preemption -------------------------------------------------------------


def _slice_holders(
    layout: tuple[MigInstance, ...],
    team_of: str,
    model: str = A30,
    priority: str = "normal",
    limit: float | None = None,
    leaving_since: float | None = None,
) -> list[RunningJob]:
    """A running job per held instance of `layout` on GPU 0 of node m1, started a second
    apart (the last instance's job most recently)."""
    return [
        RunningJob(
            JobRequest(
                inst.job_id or "", team_of, priority, NOW - 1000, 1, 0, model, inst.profile, limit
            ),
            NOW - 900 + i,
            Placement((NodeAlloc("m1", (), MigSlot(0, inst.profile, inst.start, inst.size)),)),
            model,
            leaving_since,
        )
        for i, inst in enumerate(layout)
        if inst.job_id is not None
    ]


A30_QUARTERS = tuple(MigInstance("1g.6gb", i, 1, f"b{i}") for i in range(4))
A100_WHOLE = (MigInstance("7g.80gb", 0, 8, "b0"),)

MIG_VICTIMS = [
    pytest.param(
        # One A30 split 4 x 1g.6gb (a slice is 1/4 GPU). Team a's nominal is that GPU, idle,
        # so team b borrowed it. Team a asks for one slice within its nominal: it takes it
        # back from the most recently started borrower within a cycle (plus the grace).
        A30_QUARTERS,
        A30,
        [team("a", 1, 0, model=A30), team("b", 0, None, model=A30)],
        {},
        job("a1", team="a", mig="1g.6gb", model=A30),
        [("b3", "a1", "reclaim")],
        id="a-team-below-nominal-reclaims-its-mig-quota-from-a-borrowing-team",
    ),
    pytest.param(
        # Team b borrowed the whole A100 as one 7g.80gb instance; team a wants a 1g.10gb
        # within its nominal. The borrower's release leaves the GPU idle, to be re-laid out.
        A100_WHOLE,
        A100,
        [team("a", 1, 0, model=A100), team("b", 0, None, model=A100)],
        {},
        job("a1", team="a", mig="1g.10gb", model=A100),
        [("b0", "a1", "reclaim")],
        id="a-reclaim-frees-a-gpu-that-is-re-laid-out-for-another-profile",
    ),
    pytest.param(
        # Team a runs its own low-class slices on every instance, within its nominal; its
        # non-preemptible job preempts the most recently started of them.
        A30_QUARTERS,
        A30,
        [team("a", 2, 0, model=A30)],
        {"team_of": "a", "priority": "low"},
        job("a1", team="a", mig="1g.6gb", model=A30, priority="high"),
        [("b3", "a1", "priority")],
        id="a-higher-class-preempts-its-teams-lower-class-slice",
    ),
    pytest.param(
        # The same, but the holders are of the same class: nobody is a victim.
        A30_QUARTERS,
        A30,
        [team("a", 2, 0, model=A30)],
        {"team_of": "a"},
        job("a1", team="a", mig="1g.6gb", model=A30),
        [],
        id="no-victim-among-equals",
    ),
    pytest.param(
        # Team a borrows itself (nominal 0): it has no guarantee to reclaim.
        A30_QUARTERS,
        A30,
        [team("a", 0, None, model=A30), team("b", 0, None, model=A30)],
        {},
        job("a1", team="a", mig="1g.6gb", model=A30),
        [],
        id="a-borrowing-team-reclaims-nothing",
    ),
]


@pytest.mark.parametrize(("layout", "model", "teams", "holder", "pending", "expected"), MIG_VICTIMS)
def test_slice_victims_follow_the_rules_for_whole_gpus(
    layout: tuple[MigInstance, ...],
    model: str,
    teams: list[Team],
    holder: dict[str, str],
    pending: PendingJob,
    expected: list[tuple[str, str, str]],
) -> None:
    node = mig_node("m1", [layout], model=model)
    holders = _slice_holders(
        layout, holder.get("team_of", "b"), model, holder.get("priority", "normal")
    )
    d = decide(snap([node], teams, [pending], holders))
    assert [(p.job_id, p.by_job_id, p.kind) for p in d.preemptions] == expected, waits(d)[
        pending.request.id
    ].reason.message
    w = waits(d)[pending.request.id]
    if expected:
        assert w.reason.code == "preempting" and w.estimated_start == NOW + 30.0
        assert d.preemptions[0].message.startswith(f"preempted by job {pending.request.id}: ")
    else:
        assert w.reason.code in ("mig_unavailable", "quota_exhausted")


def test_a_slice_job_whose_victim_is_leaving_waits_for_it_without_preempting_again() -> None:
    # The cycle after a reclaim: the victim is in its grace period.
    node = mig_node("m1", [A30_QUARTERS], model=A30)
    holders = _slice_holders(A30_QUARTERS, "b")
    holders[-1] = replace(holders[-1], preempting_since=NOW - 10)
    teams = [team("a", 1, 0, model=A30), team("b", 0, None, model=A30)]
    d = decide(snap([node], teams, [job("a1", team="a", mig="1g.6gb", model=A30)], holders))
    assert d.preemptions == ()
    assert waits(d)["a1"].reason.code == "preempting"


def test_a_team_below_nominal_reclaims_for_a_small_job_behind_its_own_job_that_must_borrow() -> (
    None
):
    # Team b runs 16 GPUs on a nominal of 8 (8 borrowed from team a's idle quota). Team a
    # (0 of 8 used) queues a 16-GPU gang, which needs to borrow and cannot, then a 1-GPU
    # job that fits a's nominal: that one reclaims, as it does without the gang ahead.
    teams = [team("a", 8, 8), team("b", 8, 8)]
    run = [
        running("b1", {"n1": range(8)}, team="b", started=NOW - 900),
        running("b2", {"n2": range(8)}, team="b", started=NOW - 600),
    ]
    pending = [
        job("a-gang", gpus=8, nodes=2, submit=NOW - 200),
        job("a-small", gpus=1, submit=NOW - 100),
    ]
    d = decide(snap(nodes(2), teams, pending, run))
    assert [(p.job_id, p.by_job_id, p.kind) for p in d.preemptions] == [
        ("b2", "a-small", "reclaim")
    ], [(w.job_id, w.reason.message) for w in d.waits]


# -- Estimated starts and reasons ------------------------------------------------------------


def test_estimates_do_not_count_gpus_a_drained_node_releases() -> None:
    # n1 (up) frees its 8 GPUs in 3000 s; d1 is drained: what ends there frees nothing new.
    # Sixteen 1-GPU jobs of an hour: the first eight start in 3000 s, the next eight no
    # sooner than when those end, 6600 s from now.
    cluster = (*nodes(1), *nodes(1, prefix="d", state="drain"))
    run = [
        running("r1", {"n1": range(8)}, started=NOW - 600, limit=3600),
        running("r2", {"d1": range(8)}, started=NOW - 600, limit=700),
    ]
    pending = [job(f"p{i:02d}", submit=NOW - 100 + i, limit=3600) for i in range(16)]
    d = decide(snap(cluster, [team("a", 32, None)], pending, run))
    at = {w.job_id: w.estimated_start for w in d.waits}
    assert at["p07"] == NOW + 3000
    assert at["p08"] is not None and at["p08"] >= NOW + 6600, at["p08"] - NOW


def test_slice_jobs_waiting_for_running_slices_get_estimated_starts_in_queue_order() -> None:
    # Every 1g.6gb instance of the one A30 is held by a job whose limit ends in 3000 s; the
    # team has quota to spare. Four waiting slice jobs start then; the fifth when the first
    # of them ends, an hour later. Nothing is ahead of the first: running jobs hold it all.
    node = mig_node("m1", [A30_QUARTERS], model=A30)
    holders = [
        replace(h, start_time=NOW - 600) for h in _slice_holders(A30_QUARTERS, "a", limit=3600.0)
    ]
    pending = [job(f"a{i}", mig="1g.6gb", model=A30, submit=NOW - 100 + i) for i in range(5)]
    d = decide(snap([node], [team("a", 3, 0)], pending, holders))
    assert [w.estimated_start for w in d.waits] == [NOW + 3000] * 4 + [NOW + 6600]
    assert "(0 free, all held by running jobs)" in d.waits[0].reason.message


def test_jobs_ahead_are_counted_only_where_they_compete_for_the_same_gpus() -> None:
    # Two full pools. A job in pool x waits first; the job in pool y waits behind nobody
    # that wants its GPUs, and the job that may use any pool waits behind both.
    cluster = (
        *nodes(1, pool="x", prefix="x"),
        *nodes(1, pool="y", prefix="y"),
    )
    run = [
        running("rx", {"x1": range(8)}, limit=3600),
        running("ry", {"y1": range(8)}, limit=3600),
    ]
    pending = [
        job("px", gpus=4, pool="x", submit=NOW - 300),
        job("py", gpus=2, pool="y", submit=NOW - 200),
        job("pany", gpus=1, submit=NOW - 100),
    ]
    d = decide(snap(cluster, [team("a", 32, None)], pending, run))
    w = waits(d)
    assert w["px"].reason.code == "no_capacity"
    assert w["py"].reason.code == "no_capacity", w["py"].reason.message
    assert dict(w["pany"].reason.details)["jobs_ahead"] == 2
    assert dict(w["pany"].reason.details)["gpus_ahead"] == 6


# -- The simulator's command (../shared/specs/simulation.md) ---------------------------------


TOO_LARGE = [
    pytest.param(
        '{"nodes": [{"name": "n1", "gpu_model": "A100-SXM4-80GB", "gpus": 99999999999999999999}],\n'
        ' "teams": [{"name": "a", "quota": {"*": {"nominal": 8}}}]}\n',
        ONE_JOB,
        "cluster.json: line 1, field nodes[0].gpus",
        id="node-gpus-beyond-an-integer-of-c",
    ),
    pytest.param(
        '{"nodes": [{"name": "n1", "gpu_model": "A100-SXM4-80GB", "gpus": 100000000}]}\n',
        ONE_JOB,
        "cluster.json: line 1, field nodes[0].gpus",
        id="node-gpus-that-would-take-gigabytes",
    ),
    pytest.param(
        ONE_NODE,
        "job_id,team,submit_s,duration_s\nj1,a,1e308,10\n",
        "jobs.csv: line 2, field submit_s",
        id="submit-time-that-overflows",
    ),
    pytest.param(
        ONE_NODE,
        "job_id,team,submit_s,duration_s,time_limit_s\nj1,a,0,10,1e13\n",
        "jobs.csv: line 2, field time_limit_s",
        id="time-limit-beyond-bound",
    ),
]


@pytest.mark.parametrize(("cluster", "jobs", "message"), TOO_LARGE)
def test_inputs_too_large_to_simulate_exit_2_naming_the_field(
    tmp_path: Path, cluster: str, jobs: str, message: str
) -> None:
    out = simulate_files(tmp_path, cluster, jobs)
    assert out.returncode == 2, out.stderr[-300:]
    line = out.stderr.strip()
    assert "\n" not in line and message in line, line


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def test_times_the_workload_accepts_give_a_report_that_is_json(tmp_path: Path) -> None:
    # The largest times the workload accepts: the report holds no Infinity and no NaN.
    report = tmp_path / "r.json"
    out = simulate_files(
        tmp_path,
        ONE_NODE,
        "job_id,team,submit_s,duration_s\nj1,a,1e12,1e12\n",
        "--out",
        str(report),
    )
    assert out.returncode == 0, out.stderr[-300:]
    json.loads(report.read_text(), parse_constant=_refuse_constant)


# -- MIG slice preemption: holds, needless victims, order ----------------------------------


def _instance_holders(node, gpu, layout, team_of, model=A100, priority="normal", base=0):
    return [
        RunningJob(
            JobRequest(inst.job_id, team_of, priority, NOW - 1000, 1, 0, model, inst.profile, None),
            NOW - 900 + base + i,
            Placement((NodeAlloc(node, (), MigSlot(gpu, inst.profile, inst.start, inst.size)),)),
            model,
        )
        for i, inst in enumerate(layout)
        if inst.job_id is not None
    ]


def test_no_mig_victim_for_a_relayout_the_policy_will_never_make() -> None:
    # Relayouts are off: b's 7g.80gb instance cannot serve a 1g.10gb job even once b0 leaves
    # (the idle GPU keeps its 7g layout). Preempting b0 frees nothing a1 can use.
    layout = (MigInstance("7g.80gb", 0, 8, "b0"),)
    node = mig_node("m1", [layout])
    teams = [team("a", 1, 0, model=A100), team("b", 0, None, model=A100)]
    s = snap(
        [node],
        teams,
        [job("a1", team="a", mig="1g.10gb", model=A100)],
        _instance_holders("m1", 0, layout, "b"),
    )
    d = decide(s, Policy(mig_repartition=False))
    assert d.preemptions == (), waits(d)["a1"].reason.message


def test_a_gpu_cleared_for_a_relayout_is_not_given_to_another_slice_in_the_same_cycle() -> None:
    # m1's GPU is laid out 7 x 1g.10gb; b0 (team b, borrowing) holds one. a1 (team a, within
    # nominal) needs a 3g.40gb: only a relayout of the idle GPU serves it, so b0 is reclaimed.
    # b1, behind a1 in the order, must not start on the very GPU being emptied for a1:
    # otherwise the GPU is never idle and a1 preempts again at every cycle.
    layout = (MigInstance("1g.10gb", 6, 1, "b0"), *(MigInstance("1g.10gb", i, 1) for i in range(6)))
    node = mig_node("m1", [layout])
    teams = [team("a", 1, 0, model=A100), team("b", 0, None, model=A100)]
    pending = [
        job("a1", team="a", mig="3g.40gb", model=A100, submit=NOW - 50),
        job("b1", team="b", mig="1g.10gb", model=A100, submit=NOW - 40),
    ]
    d = decide(snap([node], teams, pending, _instance_holders("m1", 0, layout, "b")))
    assert [(p.job_id, p.by_job_id) for p in d.preemptions] == [("b0", "a1")]
    on_cleared = [x.job_id for x in d.starts if x.placement.allocs[0].node == "m1"]
    assert on_cleared == [], "b1 starts on the GPU a1 is emptying"


def test_a_slice_reclaim_for_a_relayout_does_not_loop_forever() -> None:
    # The same as a simulation (decisions applied, fake clock): were b0 and b1 to take turns
    # on the GPU a1 empties, a1 would reclaim each in turn, never start, and the simulation
    # never end. A bounded number of preemptions must get a1 started.
    cluster = Cluster(
        (Node("m1", A100, 1, mig=True),),
        (Team("a", 1.0, (Quota(A100, 1.0, 0.0),)), Team("b", 1.0, (Quota(A100, 0.0, None),))),
    )

    def sim_job(id: str, team_: str, profile: str, submit: float, duration: float) -> SimJob:
        return SimJob(
            JobRequest(id, team_, "normal", submit, 1, 0, A100, profile, duration), duration
        )

    jobs = [
        sim_job("b0", "b", "1g.10gb", 0.0, 10000.0),
        sim_job("a1", "a", "3g.40gb", 10.0, 100.0),
        sim_job("b1", "b", "1g.10gb", 10.0, 10000.0),
    ]
    seen: list[tuple[float, str, str]] = []

    def observe(s: Snapshot, d: Decisions, now: float) -> None:
        seen.extend((now, p.job_id, p.by_job_id) for p in d.preemptions)
        if len(seen) > 6:
            raise PreemptionLoop(f"a1 preempted {seen[:8]} and still waits")

    result = simulate(cluster, jobs, "gpuq", observe=observe)
    (a1,) = [o for o in result.jobs if o.job.request.id == "a1"]
    assert a1.end is not None


def test_a_slice_request_that_no_gpu_can_serve_does_not_block_its_teams_relayouts() -> None:
    # Team a's quota holds one A30 slice. Its first job asks for pool x, whose only node is
    # drained: no GPU can serve it. Its second job may go anywhere, and m1's GPU is idle.
    # The first job's share must not hold back the second: m1 is re-laid out for it.
    idle = mig_node("m1", [()], model=A30)
    drained = replace(mig_node("x1", [()], model=A30), pool="x", state="drain")
    pending = [
        job("a-pool-x", team="a", mig="1g.6gb", model=A30, pool="x", submit=NOW - 200),
        job("a-any", team="a", mig="1g.6gb", model=A30, submit=NOW - 100),
    ]
    d = decide(snap([idle, drained], [team("a", 0.25, 0, model=A30)], pending))
    assert [(r.node, r.gpu) for r in d.relayouts] == [("m1", 0)], waits(d)["a-any"].reason.message
    assert waits(d)["a-any"].reason.code == "mig_relayout"


def test_no_slice_is_reclaimed_while_an_idle_gpu_could_be_laid_out_for_the_job() -> None:
    # As above, plus team b borrowing every slice of another A30: a-any must not reclaim one
    # of b's slices, since the idle GPU m1 serves it (the victim is not needed).
    idle = mig_node("m1", [()], model=A30)
    drained = replace(mig_node("x1", [()], model=A30), pool="x", state="drain")
    lay = tuple(MigInstance("1g.6gb", i, 1, f"b{i}") for i in range(4))
    busy = mig_node("m2", [lay], model=A30)
    teams = [team("a", 0.25, 0, model=A30), team("b", 0, None, model=A30)]
    pending = [
        job("a-pool-x", team="a", mig="1g.6gb", model=A30, pool="x", submit=NOW - 200),
        job("a-any", team="a", mig="1g.6gb", model=A30, submit=NOW - 100),
    ]
    d = decide(
        snap([idle, drained, busy], teams, pending, _instance_holders("m2", 0, lay, "b", model=A30))
    )
    assert d.preemptions == ()


def test_slice_victims_do_not_depend_on_the_order_instances_are_listed_in() -> None:
    # Two GPUs each wholly held by two borrowed 3g.40gb jobs of team b, alike in age; a1
    # needs a 7g.80gb, so one GPU's holders go. Listing GPU 0's instances in the other
    # order (the same cluster) must not change which.
    teams = [team("a", 1, 0, model=A100), team("b", 0, None, model=A100)]
    age = {"p": NOW - 500, "s": NOW - 400, "q": NOW - 500, "r": NOW - 400}
    gpu1 = (MigInstance("3g.40gb", 0, 4, "q"), MigInstance("3g.40gb", 4, 4, "r"))

    def victims(gpu0: tuple[MigInstance, ...]) -> list[str]:
        node = mig_node("m1", [gpu0, gpu1], gpus=2)
        run = _instance_holders("m1", 0, gpu0, "b") + _instance_holders("m1", 1, gpu1, "b")
        run = [replace(x, start_time=age[x.request.id]) for x in run]
        s = snap([node], teams, [job("a1", team="a", mig="7g.80gb", model=A100)], run)
        return sorted(p.job_id for p in decide(s).preemptions)

    gpu0 = (MigInstance("3g.40gb", 0, 4, "p"), MigInstance("3g.40gb", 4, 4, "s"))
    assert victims(gpu0) == victims(gpu0[::-1])


def test_a_non_preemptible_slice_job_is_not_reported_as_borrowing() -> None:
    # Team a's nominal is 2 A30 slices, both held by its normal jobs. Its high
    # (non-preemptible) job fits the nominal for non-preemptible work and starts; the
    # borrowed part stays on the normal jobs (quota.py), so the Start says borrowed=False,
    # as for whole GPUs.
    lay = (
        MigInstance("1g.6gb", 0, 1, "n0"),
        MigInstance("1g.6gb", 1, 1, "n1"),
        MigInstance("1g.6gb", 2, 1),
        MigInstance("1g.6gb", 3, 1),
    )
    node = mig_node("m1", [lay], model=A30)
    teams = [team("a", 0.5, 1, model=A30), team("b", 1, 0, model=A30)]
    d = decide(
        snap(
            [node],
            teams,
            [job("h", team="a", priority="high", mig="1g.6gb", model=A30)],
            _instance_holders("m1", 0, lay, "a", model=A30),
        )
    )
    (start,) = d.starts
    assert start.job_id == "h" and start.borrowed is False


# -- Random simulations on MIG clusters ----------------------------------------------------


PROFILES = {
    A100: ["1g.10gb", "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    A30: ["1g.6gb", "1g.6gb", "2g.12gb", "4g.24gb"],
}
PREEMPTIBLE = {c.name: c.preemptible for c in DEFAULT_PRIORITY_CLASSES}
# Derandomized, with no example database: the same examples every run, whatever ran before
# in the process (with @seed(8) they also followed from the hypothesis tests run earlier, so
# the full suite met a loop a run of this file never did: mig_reclaim_loop.txt). @seed(8)
# reached another loop (a GPU emptied for a relayout retaken by its victims) at about the 65th.
SIM = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a loop is plain enough
)


@st.composite
def mig_workloads(draw: st.DrawFn) -> tuple[Cluster, list[SimJob]]:
    nodes = []
    for i in range(draw(st.integers(1, 2))):
        model = draw(st.sampled_from([A100, A30]))
        nodes.append(Node(f"m{i}", model, draw(st.integers(1, 2)), mig=True))
    if draw(st.booleans()):
        nodes.append(Node("w0", A100, draw(st.sampled_from([1, 2, 4]))))
    models = sorted({n.gpu_model for n in nodes})
    teams = []
    for t in ["a", "b", "c"][: draw(st.integers(2, 3))]:
        teams.append(
            Team(
                t,
                1.0,
                (
                    Quota(
                        draw(st.sampled_from(["*", *models])),
                        draw(st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0])),
                        draw(st.sampled_from([0.0, 0.5, None])),
                    ),
                ),
            )
        )
    jobs = []
    whole = any(not n.mig for n in nodes)
    for j in range(draw(st.integers(1, 20))):
        model = draw(st.sampled_from(models))
        duration = float(draw(st.integers(50, 3000)))
        if whole and draw(st.integers(0, 3)) == 0:
            jobs.append(
                SimJob(
                    JobRequest(
                        f"j{j}",
                        draw(st.sampled_from([t.name for t in teams])),
                        draw(st.sampled_from(["high", "normal", "low"])),
                        float(draw(st.integers(0, 3000))),
                        1,
                        draw(st.sampled_from([1, 2])),
                        draw(st.sampled_from([A100, None])),
                        None,
                        duration + 60.0,
                    ),
                    duration,
                )
            )
            continue
        jobs.append(
            SimJob(
                JobRequest(
                    f"j{j}",
                    draw(st.sampled_from([t.name for t in teams])),
                    draw(st.sampled_from(["high", "normal", "normal", "low", "low"])),
                    float(draw(st.integers(0, 3000))),
                    1,
                    0,
                    draw(st.sampled_from([model, None])),
                    draw(st.sampled_from(PROFILES[model])),
                    duration + draw(st.sampled_from([0.0, 60.0, 2000.0])),
                ),
                duration,
            )
        )
    return Cluster(tuple(nodes), tuple(teams)), jobs


SIM_POLICIES = [
    Policy(),
    Policy(preemptible_classes_preempt=True),
    Policy(preemptible_classes_preempt=True, min_runtime_s=500.0, preemption_loss_ratio=None),
]


def _share(model: str, profile: str) -> float:
    return mig.gpu_fraction(model, profile)


class PreemptionLoop(AssertionError):
    pass


class Checker:
    """Checks every schedule() call of a simulation (simulate's observe hook)."""

    def __init__(self, cluster: Cluster, policy: Policy, jobs: int = 10) -> None:
        self.cluster, self.policy = cluster, policy
        self.bound = 4 * jobs + 4  # more preemptions than this: a loop
        self.problems: list[str] = []
        self.preempted_by: list[tuple[float, str, str, str]] = []  # (at, victim, by, kind)

    def fail(self, now: float, text: str) -> None:
        self.problems.append(f"t={now}: {text}")

    def __call__(self, s: Snapshot, d: Decisions, now: float) -> None:
        nodes = {n.name: n for n in s.nodes}
        running = {j.request.id: j for j in s.running}
        pending = {p.request.id: p.request for p in s.pending}
        # every pending job starts or waits, once
        ids = [x.job_id for x in d.starts] + [w.job_id for w in d.waits]
        if sorted(ids) != sorted(pending):
            self.fail(now, f"starts+waits {sorted(ids)} != pending {sorted(pending)}")
        # geometry: starts on free existing instances, no instance twice
        used: set[tuple[str, int, int]] = set()
        for n in s.nodes:
            for g in n.mig_gpus:
                for inst in g.mig_instances:
                    if inst.job_id is not None:
                        used.update(
                            (n.name, g.index, m) for m in range(inst.start, inst.start + inst.size)
                        )
        whole_used = {(a.node, g) for j in s.running for a in j.placement.allocs for g in a.gpus}
        for x in d.starts:
            (a,) = x.placement.allocs
            slot = a.mig
            if slot is None:
                for g in a.gpus:
                    if (a.node, g) in whole_used or nodes[a.node].mig:
                        self.fail(now, f"{x.job_id} on a used GPU {a.node}:{g}")
                    whole_used.add((a.node, g))
                continue
            gpu = nodes[a.node].mig_gpus[slot.gpu]
            match = [
                i
                for i in gpu.mig_instances
                if (i.start, i.size, i.profile) == (slot.start, slot.size, slot.profile)
            ]
            if not match or match[0].job_id is not None:
                self.fail(now, f"{x.job_id} on a missing or held instance {a}")
            keys = {(a.node, slot.gpu, m) for m in range(slot.start, slot.start + slot.size)}
            if keys & used:
                self.fail(now, f"{x.job_id} overlaps memory slices {keys & used}")
            used |= keys
        # quota: nominal + borrowing limit per team (one quota each)
        quota = {t.name: t.quotas[0] for t in s.teams}
        usage: dict[str, float] = defaultdict(float)
        fixed: dict[str, float] = defaultdict(float)
        jobs = [(j.request, j.gpu_model, j.placement) for j in s.running]
        jobs += [(pending[x.job_id], x.gpu_model, x.placement) for x in d.starts]
        for r, model, placement in jobs:
            q = quota.get(r.team)
            if q is None or q.gpu_model not in ("*", model):
                continue
            share = sum(
                _share(model, a.mig.profile) if a.mig else len(a.gpus) for a in placement.allocs
            )
            usage[r.team] += share
            if not PREEMPTIBLE[r.priority]:
                fixed[r.team] += share
        new_teams = {pending[x.job_id].team for x in d.starts}
        for t in new_teams:
            q = quota.get(t)
            if q is None:
                self.fail(now, f"team {t} without quota started")
                continue
            limit = math.inf if q.borrowing_limit is None else q.borrowing_limit
            if usage[t] > q.nominal + limit + 1e-9:
                self.fail(now, f"team {t} at {usage[t]} > {q.nominal} + {limit}")
            if fixed[t] > q.nominal + 1e-9:
                self.fail(now, f"team {t} non-preemptible {fixed[t]} > nominal {q.nominal}")
        # victims
        seen = set()
        for p in d.preemptions:
            v = running.get(p.job_id)
            if v is None:
                self.fail(now, f"victim {p.job_id} not running")
                continue
            if not PREEMPTIBLE[v.request.priority]:
                self.fail(now, f"non-preemptible victim {p.job_id}")
            if v.preempting_since is not None:
                self.fail(now, f"victim {p.job_id} preempted again")
            if p.job_id in seen:
                self.fail(now, f"victim {p.job_id} twice")
            seen.add(p.job_id)
            if p.kind == "priority" and now - v.start_time < self.policy.min_runtime_s:
                self.fail(now, f"{p.job_id} preempted for priority within min run time")
            self.preempted_by.append((now, p.job_id, p.by_job_id, p.kind))
        if len(self.preempted_by) > self.bound:
            raise PreemptionLoop(f"t={now}: {self.preempted_by[-6:]}")
        # reasons and estimates
        for w in d.waits:
            if w.estimated_start is not None and w.estimated_start < now - 1e-9:
                self.fail(now, f"{w.job_id} estimated in the past")
            if (
                w.reason.code == "preempting"
                and not any(p.by_job_id == w.job_id for p in d.preemptions)
                and not any(j.preempting_since is not None for j in s.running)
            ):
                self.fail(now, f"{w.job_id} says preempting with no victim")
        # determinism under permutations
        rnd = random.Random(int(now) ^ len(s.pending))
        for _ in range(2):
            p, r, n = list(s.pending), list(s.running), list(s.nodes)
            rnd.shuffle(p)
            rnd.shuffle(r)
            rnd.shuffle(n)
            shuffled = replace(s, pending=tuple(p), running=tuple(r), nodes=tuple(n))
            again = schedule(shuffled, self.policy, now)
            if (again.starts, again.waits, again.relayouts) != (
                d.starts,
                d.waits,
                d.relayouts,
            ) or sorted(map(repr, again.preemptions)) != sorted(map(repr, d.preemptions)):
                self.fail(now, "decisions depend on input order")
                break

    def ping_pong(self) -> list[str]:
        out = []
        pairs = {(v, by) for _, v, by, _ in self.preempted_by}
        for at, v, by, kind in self.preempted_by:
            if (by, v) in pairs:
                out.append(f"t={at}: {v} preempted by {by} ({kind}) and the other way round")
        return out


@SIM
@given(mig_workloads(), st.sampled_from(SIM_POLICIES))
def test_random_mig_simulations_keep_every_rule(workload, policy) -> None:  # type: ignore[no-untyped-def]
    cluster, jobs = workload
    check = Checker(cluster, policy, len(jobs))
    simulate(cluster, jobs, "gpuq", policy=policy, observe=check)
    assert not check.problems, check.problems[:5]
    assert not check.ping_pong(), check.ping_pong()[:5]


def test_a_reclaim_that_needs_a_relayout_gets_the_idle_gpu_before_borrowers_of_a_higher_class() -> (
    None
):
    """Found by the random simulation above in CI: team b's low 7g.80gb job, within its
    nominal, reclaimed a GPU from borrowers of a higher class; the plan, ordered by class
    alone, then gave the emptied GPU back to those borrowers, and it reclaimed again every
    30 s. The plan orders jobs within their nominal first, as the order does."""
    import scheduler.types as types
    import scheduler.workload as workload

    text = (Path(__file__).parent / "data" / "mig_reclaim_loop.txt").read_text()
    names = {**vars(types), **vars(workload)}
    cluster, jobs = eval(text.split("#POLICY")[0], names)  # noqa: S307 (our own data file)
    policy = eval(text.split("#POLICY")[1], names)  # noqa: S307
    check = Checker(cluster, policy, len(jobs))
    simulate(cluster, jobs, "gpuq", policy=policy, observe=check)
    assert not check.problems, check.problems[:5]
    assert not check.ping_pong(), check.ping_pong()[:5]
