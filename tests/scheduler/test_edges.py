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
- The simulator refuses inputs too large to simulate (exit 2 naming the field) and writes
  only JSON.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.types import (
    JobRequest,
    MigInstance,
    MigSlot,
    Node,
    NodeAlloc,
    PendingJob,
    Placement,
    RunningJob,
    Team,
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
