"""Discrete-event simulation of a workload under a policy, with the production schedule().

Events are submits and run ends; after the events of each instant, schedule() is called on
a Snapshot of the simulated state and its decisions are applied: starts, preemptions (the
victim leaves after the grace period and resumes later from its last checkpoint) and MIG
relayouts (applied at once, then schedule() is called again at the same instant). A run
that reaches its time limit ends there, as a backend would stop it. The wall clock is
injected (`timer`) so that this module stays pure; it only measures decide_ms. An optional
`observe(snapshot, decisions, now)` sees every call, for diagnostics (bench/sim_idle.py).

A job ends the simulation in one of the two states of the spec: `completed`, or
`never_started` when it did not complete. The spec has no state for a job that ran, was
preempted and was never started again before the events ran out (a scheduler that leaves
such a job waiting for ever): it is counted, and written, as `never_started` (no start,
end or placement in JOBS_OUT; its runs stay in RUNS.csv), so that JOBS_OUT agrees with the
report and `completed + never_started == jobs`.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from .engine import running_gpus, schedule
from .types import (
    Decisions,
    Gpu,
    MigInstance,
    Node,
    PendingJob,
    Placement,
    Policy,
    RunningJob,
    Snapshot,
    Team,
    UsageBucket,
)
from .workload import Cluster, SimJob

POLICIES: dict[str, Policy] = {
    "gpuq": Policy(),
    "fifo": Policy(
        name="fifo",
        backfill=False,
        preemption=False,
        quotas=False,
        fair_share=False,
        priorities=False,
        pack_by_end=False,
    ),
    "backfill": Policy(
        name="backfill",
        backfill=True,
        preemption=False,
        quotas=False,
        fair_share=False,
        priorities=False,
        pack_by_end=False,
    ),
}

_END, _SUBMIT = 0, 1  # at one instant, ends are processed before submits
_MAX_CALLS_PER_INSTANT = (
    3  # a relayout is applied and schedule() called again, a bounded number of times
)


@dataclass
class Run:
    job_id: str
    team: str
    run: int
    start_s: float
    end_s: float
    ended_by: str  # "completed" | "preempted"
    placement: Placement
    gpus: float


@dataclass
class JobOutcome:
    job: SimJob
    first_start: float | None = None
    last_start: float | None = None
    end: float | None = None
    preemptions: int = 0
    placement: Placement | None = None

    @property
    def state(self) -> str:
        """`completed` or `never_started` (JOBS_OUT's `state`; the report counts the same)."""
        return "completed" if self.end is not None else "never_started"


@dataclass
class Result:
    policy: str
    report: dict[str, Any]
    jobs: list[JobOutcome]
    runs: list[Run]


@dataclass
class _Active:
    job: RunningJob
    run: int
    gpus: float
    deadline: float  # when the run ends if nothing interrupts it
    whole: int = 0  # whole GPUs held


@dataclass
class _State:
    cluster: Cluster
    policy: Policy
    nodes: dict[str, Node]
    mig_gpus: dict[str, list[list[MigInstance]]] = field(default_factory=dict)
    nodes_dirty: bool = True
    nodes_tuple: tuple[Node, ...] = ()


def placement_text(p: Placement) -> str:
    parts = []
    for a in p.allocs:
        if a.mig is not None:
            parts.append(f"{a.node}:{a.mig.gpu}:{a.mig.profile}@{a.mig.start}")
        else:
            parts.append(f"{a.node}:{','.join(str(g) for g in a.gpus)}")
    return ";".join(parts)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def jain(values: Iterable[float]) -> float | None:
    """Jain's index, None when no value is positive. The index is scale-invariant: the
    values are divided by the largest first, so that squaring a large one cannot overflow."""
    xs = list(values)
    top = max(xs, default=0.0)
    if not top > 0:
        return None
    scaled = [x / top for x in xs]
    return sum(scaled) ** 2 / (len(scaled) * sum(x * x for x in scaled))


def simulate(
    cluster: Cluster,
    jobs: Sequence[SimJob],
    policy_name: str,
    timer: Callable[[], float] | None = None,
    policy: Policy | None = None,
    observe: Callable[[Snapshot, Decisions, float], None] | None = None,
) -> Result:
    """Run the workload under the named policy, or under `policy` reported by that name
    (bench/sim_ablation.py turns the production policy's parts off one at a time).
    `observe` is called after every schedule() call, before its decisions are applied."""
    policy = POLICIES[policy_name] if policy is None else policy
    st = _State(cluster, policy, {n.name: n for n in cluster.nodes})
    for n in cluster.nodes:
        if n.mig:
            st.mig_gpus[n.name] = [[] for _ in range(n.gpus)]
    by_id = {j.request.id: j for j in jobs}
    outcomes = {j.request.id: JobOutcome(j) for j in jobs}
    weights = {t.name: t.weight for t in cluster.teams}
    counted = sorted({j.request.team for j in jobs})
    events: list[tuple[float, int, int, str, int]] = []
    seq = 0
    for j in sorted(jobs, key=lambda j: (j.request.submit_time, j.request.id)):
        events.append((j.request.submit_time, _SUBMIT, seq, j.request.id, 0))
        seq += 1
    heapq.heapify(events)
    pending: dict[str, PendingJob] = {}
    preempting_on: dict[str, tuple[str, ...]] = {}  # jobs with PendingJob.preempting_on set
    active: dict[str, _Active] = {}
    remaining = {j.request.id: j.duration_s for j in jobs}
    runs: list[Run] = []
    run_count: dict[str, int] = {}
    # team -> (at, GPU-seconds of its ended runs, each second decayed to `at`)
    usage: dict[str, tuple[float, float]] = {}
    rate = math.log(2.0) / policy.fair_share_half_life_s
    waiting_per_team = dict.fromkeys(counted, 0)
    running_per_team = dict.fromkeys(counted, 0.0)
    fair_received = dict.fromkeys(counted, 0.0)
    preemptions = 0
    lost = 0.0
    decide_ms: list[float] = []
    now = 0.0
    whole_gpus = sum(n.gpus for n in cluster.nodes if not n.mig and n.state == "up")
    cpu_only = False

    def teams_now() -> tuple[Team, ...]:
        """The teams with their usage as the service hands it over (queue_service/jobs/
        snapshot.py, _usage_by_team): every GPU-second decayed from when it was used, a
        running job's up to now, in one bucket at now."""
        if not policy.fair_share:  # nothing else reads usage
            return cluster.teams
        used = {team: total * math.exp(-rate * (now - at)) for team, (at, total) in usage.items()}
        for a in active.values():
            team = a.job.request.team
            used[team] = used.get(team, 0.0) + a.gpus * _decayed_seconds(
                now - a.job.start_time, rate
            )
        return tuple(
            replace(t, usage=(UsageBucket(now, used[t.name]),)) if used.get(t.name) else t
            for t in cluster.teams
        )

    def end_run(job_id: str, at: float, ended_by: str) -> None:
        nonlocal lost
        act = active.pop(job_id)
        r = act.job.request
        ran = at - act.job.start_time
        sim = by_id[job_id]
        if ended_by == "completed":
            done = min(ran, remaining[job_id])
        else:
            c = sim.checkpoint_s
            done = min(math.floor(ran / c) * c, remaining[job_id]) if c else 0.0
            lost += (ran - done) * act.gpus
        remaining[job_id] -= done
        runs.append(
            Run(
                job_id,
                r.team,
                act.run,
                act.job.start_time,
                at,
                ended_by,
                act.job.placement,
                act.gpus,
            )
        )
        running_per_team[r.team] = running_per_team.get(r.team, 0.0) - act.gpus
        for a in act.job.placement.allocs:
            if a.mig is not None:
                layout = st.mig_gpus[a.node][a.mig.gpu]
                layout[:] = [replace(i, job_id=None) if i.job_id == job_id else i for i in layout]
                st.nodes_dirty = True
        prev_at, prev = usage.get(r.team, (at, 0.0))
        usage[r.team] = (
            at,
            prev * math.exp(-rate * (at - prev_at)) + act.gpus * _decayed_seconds(ran, rate),
        )
        out = outcomes[job_id]
        if ended_by == "completed" or remaining[job_id] <= 1e-9:
            out.end = at
        else:
            pending[job_id] = PendingJob(r, attempts=act.run, preemptions=out.preemptions)
            waiting_per_team[r.team] = waiting_per_team.get(r.team, 0) + 1

    def nodes_now() -> tuple[Node, ...]:
        if st.nodes_dirty:
            st.nodes_tuple = tuple(
                replace(
                    n,
                    mig_gpus=tuple(Gpu(i, tuple(lay)) for i, lay in enumerate(st.mig_gpus[n.name])),
                )
                if n.mig
                else n
                for n in cluster.nodes
            )
            st.nodes_dirty = False
        return st.nodes_tuple

    def decide() -> bool:
        """One schedule() call applied; True when relayouts call for another at this instant."""
        nonlocal seq, preemptions
        snap = Snapshot(
            nodes_now(),
            teams_now(),
            tuple(pending.values()),
            tuple(a.job for a in active.values()),
            cluster.priority_classes,
        )
        t0 = timer() if timer else 0.0
        d = schedule(snap, policy, now)
        if timer:
            decide_ms.append((timer() - t0) * 1000.0)
        if observe is not None:
            observe(snap, d, now)
        # Each waits with the nodes the last cycle preempted on for it, as the service's
        # snapshot reads them from its reason.
        for job_id in preempting_on:
            if job_id in pending:
                pending[job_id] = replace(pending[job_id], preempting_on=())
        preempting_on.clear()
        for job_id, on_nodes in d.preempting:
            pending[job_id] = replace(pending[job_id], preempting_on=on_nodes)
            preempting_on[job_id] = on_nodes
        for s in d.starts:
            pj = pending.pop(s.job_id)
            r = pj.request
            n = run_count[s.job_id] = run_count.get(s.job_id, 0) + 1
            rj = RunningJob(
                r, now, s.placement, s.gpu_model, preemptions=outcomes[s.job_id].preemptions
            )
            gpus = running_gpus(rj)
            length = min(remaining[s.job_id], r.time_limit_s or math.inf)
            whole = sum(len(a.gpus) for a in s.placement.allocs)
            active[s.job_id] = _Active(rj, n, gpus, now + length, whole)
            heapq.heappush(events, (now + length, _END, seq, s.job_id, n))
            seq += 1
            waiting_per_team[r.team] -= 1
            running_per_team[r.team] = running_per_team.get(r.team, 0.0) + gpus
            out = outcomes[s.job_id]
            out.first_start = now if out.first_start is None else out.first_start
            out.last_start = now
            out.placement = s.placement
            for a in s.placement.allocs:
                if a.mig is not None:
                    layout = st.mig_gpus[a.node][a.mig.gpu]
                    layout[:] = [
                        replace(i, job_id=s.job_id)
                        if (i.start, i.size) == (a.mig.start, a.mig.size)
                        else i
                        for i in layout
                    ]
                    st.nodes_dirty = True
        for p in d.preemptions:
            act = active.get(p.job_id)
            if act is None or act.job.preempting_since is not None:
                continue
            act.job = replace(act.job, preempting_since=now)
            exit_at = now + policy.preemption_grace_s
            # A run that ends within its grace completes: that is no preemption (RUNS.csv
            # has no preempted run for it), though the scheduler asked for one.
            if exit_at < act.deadline:
                preemptions += 1
                outcomes[p.job_id].preemptions += 1
                heapq.heappush(events, (exit_at, _END, seq, p.job_id, -act.run))
                seq += 1
        applied = [rl for rl in d.relayouts if not rl.advisory]  # a proposal waits for an admin
        for rl in applied:
            gpu_layouts = st.mig_gpus.get(rl.node)
            if gpu_layouts is not None and all(i.job_id is None for i in gpu_layouts[rl.gpu]):
                gpu_layouts[rl.gpu] = list(rl.instances)
                st.nodes_dirty = True
        return bool(applied)

    while events:
        t = events[0][0]
        # Fair share is measured over the intervals in which every counted team waits.
        if counted and all(waiting_per_team[c] > 0 for c in counted):
            dt = t - now
            for c in counted:
                fair_received[c] += running_per_team[c] * dt / (weights.get(c, 1.0) or 1.0)
        now = t
        freed = False
        while events and events[0][0] == t:
            _, kind, _, job_id, run = heapq.heappop(events)
            if kind == _SUBMIT:
                r = by_id[job_id].request
                pending[job_id] = PendingJob(r)
                waiting_per_team[r.team] += 1
                cpu_only |= r.gpus_per_node == 0 and not r.mig_profile
            else:
                act = active.get(job_id)
                if act is not None and act.run == abs(run):
                    end_run(job_id, t, "preempted" if run < 0 else "completed")
                    freed = True
        # A call that cannot start anything is skipped: without preemption and MIG, new
        # submits alone start nothing on a cluster with no free GPU (deep queues make such
        # calls the bulk of a saturated run).
        idle = whole_gpus - sum(a.whole for a in active.values()) > 0
        if pending and (freed or idle or cpu_only or policy.preemption or st.mig_gpus):
            for _ in range(_MAX_CALLS_PER_INSTANT):
                if not decide():
                    break
    report = _report(cluster, jobs, outcomes, runs, preemptions, lost, fair_received, decide_ms)
    return Result(policy_name, report, [outcomes[j.request.id] for j in jobs], runs)


def _decayed_seconds(ran: float, rate: float) -> float:
    """The seconds of a run of `ran` s that just ended, each decayed from when it was run:
    the integral of exp(-rate * age) over the run."""
    return -math.expm1(-rate * ran) / rate


def _stats(values: Sequence[float], keys: Sequence[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k in keys:
        if k == "mean":
            out[k] = sum(values) / len(values) if values else 0.0
        elif k == "max":
            out[k] = max(values, default=0.0)
        else:
            out[k] = percentile(values, int(k[1:]) / 100.0)
    return {k: round(v, 3) for k, v in out.items()}


def _report(
    cluster: Cluster,
    jobs: Sequence[SimJob],
    outcomes: dict[str, JobOutcome],
    runs: Sequence[Run],
    preemptions: int,
    lost: float,
    fair_received: dict[str, float],
    decide_ms: Sequence[float],
) -> dict[str, Any]:
    completed = [o for o in outcomes.values() if o.end is not None]
    first_submit = min((j.request.submit_time for j in jobs), default=0.0)
    last_end = max((o.end for o in completed if o.end is not None), default=first_submit)
    makespan = last_end - first_submit
    total_gpus = sum(n.gpus for n in cluster.nodes)
    useful = sum(r.gpus * (r.end_s - r.start_s) for r in runs) - lost
    waits = [
        o.first_start - o.job.request.submit_time
        for o in outcomes.values()
        if o.first_start is not None
    ]
    jct = [o.end - o.job.request.submit_time for o in completed if o.end is not None]
    slowdown = [
        max(1.0, (o.end - o.job.request.submit_time) / max(o.job.duration_s, 10.0))
        for o in completed
        if o.end is not None
    ]
    teams: dict[str, dict[str, Any]] = {}
    for o in outcomes.values():
        t = teams.setdefault(
            o.job.request.team, {"gpu_seconds": 0.0, "mean_wait_s": 0.0, "jobs": 0, "_w": []}
        )
        t["jobs"] += 1
        if o.first_start is not None:
            t["_w"].append(o.first_start - o.job.request.submit_time)
    for r in runs:
        teams[r.team]["gpu_seconds"] += r.gpus * (r.end_s - r.start_s)
    for t in teams.values():
        w = t.pop("_w")
        t["mean_wait_s"] = round(sum(w) / len(w), 3) if w else 0.0
        t["gpu_seconds"] = round(t["gpu_seconds"], 3)
    fairness = jain(fair_received.values())
    return {
        "jobs": len(jobs),
        "completed": len(completed),
        "never_started": sum(1 for o in outcomes.values() if o.state == "never_started"),
        "makespan_s": round(makespan, 3),
        "gpu_utilization": round(useful / (total_gpus * makespan), 4)
        if total_gpus and makespan > 0
        else 0.0,
        "wait_s": _stats(waits, ("mean", "p50", "p95", "p99", "max")),
        "jct_s": _stats(jct, ("mean", "p50", "p95")),
        "bounded_slowdown": _stats(slowdown, ("mean", "p95")),
        "jain_fairness": None if fairness is None else round(fairness, 4),
        "preemptions": preemptions,
        "lost_gpu_seconds": round(lost, 3),
        "teams": dict(sorted(teams.items())),
        "decide_ms": {"calls": len(decide_ms), **_stats(decide_ms, ("p50", "p99", "max"))},
    }


JOBS_OUT_COLUMNS = (
    "job_id",
    "team",
    "submit_s",
    "start_s",
    "end_s",
    "state",
    "preemptions",
    "nodes_used",
    "placement",
)
RUNS_COLUMNS = ("job_id", "team", "run", "start_s", "end_s", "ended_by", "placement")


def _num(v: float | None) -> str:
    """A time as a plain decimal that reads back as the same float: the shortest digits
    that round-trip (repr's), never an exponent, no trailing zeros (1234567.5, 10, 0.00001)."""
    if v is None:
        return ""
    text = format(Decimal(repr(v + 0.0)), "f")  # + 0.0: -0.0 is written 0
    return text.rstrip("0").rstrip(".") if "." in text else text


def jobs_rows(result: Result) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for o in result.jobs:
        r = o.job.request
        state = o.state
        # A never_started row has no start, end or placement, even for a job that ran and
        # was preempted without starting again (see the module's docstring).
        p = o.placement if state == "completed" else None
        rows.append(
            (
                r.id,
                r.team,
                _num(r.submit_time),
                _num(o.last_start if state == "completed" else None),
                _num(o.end),
                state,
                str(o.preemptions),
                ";".join(p.node_names) if p else "",
                placement_text(p) if p else "",
            )
        )
    return rows


def runs_rows(result: Result) -> list[tuple[str, ...]]:
    ordered = sorted(result.runs, key=lambda r: (r.start_s, r.job_id, r.run))
    return [
        (
            r.job_id,
            r.team,
            str(r.run),
            _num(r.start_s),
            _num(r.end_s),
            r.ended_by,
            placement_text(r.placement),
        )
        for r in ordered
    ]


def summary(result: Result) -> str:
    rep = result.report
    fairness = "n/a" if rep["jain_fairness"] is None else rep["jain_fairness"]
    return (
        f"{result.policy}: {rep['completed']}/{rep['jobs']} completed, "
        f"utilization {rep['gpu_utilization']:.3f}, mean wait {rep['wait_s']['mean']:.0f} s, "
        f"p95 wait {rep['wait_s']['p95']:.0f} s, "
        f"bounded slowdown {rep['bounded_slowdown']['mean']:.2f}, "
        f"Jain {fairness}, preemptions {rep['preemptions']}, "
        f"decide p50 {rep['decide_ms']['p50']:.1f} ms over {rep['decide_ms']['calls']} calls"
    )
