"""Where a simulated run loses utilization, and when: GPUs busy before and after the last
submit (a saturated queue drains after it), the work preemption threw away, and the GPUs
idle before the last submit by what the waiting 1-GPU jobs were told; how many jobs of less
than a node were left waiting (the jobs that could refill a hole) and whether idle GPUs sat
on idle nodes or in holes on partly used ones; the jobs left waiting by shape; then the
lost work by kind of preemption (reclaim, or a higher class of the same or another team);
last, the useful share of the cluster day by day (when a policy falls behind: at the start,
in the steady state, or in the drain).

    python3 bench/sim_idle.py --cluster C.json --workload J.csv [--policy gpuq --policy backfill]

Plain standard-library script (run from the repository root), on the simulator's observe
hook. A 1-GPU job fits any idle whole GPU, so its reason says why that GPU stays idle; when
no 1-GPU job waits, only larger jobs do ("only larger jobs wait": fragmentation, or nodes
draining for a gang). Quota refusals are split by their cause. MIG GPUs count as GPUs of
the cluster but their slices are not tracked here.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping
from itertools import chain
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.simulate import POLICIES, Result, simulate
from scheduler.types import Decisions, Reason, Snapshot
from scheduler.workload import Cluster, SimJob, parse_cluster, parse_jobs

ONLY_LARGER = "only larger jobs wait"
NOTHING = "nothing waits"
DAY = 86_400.0


def cause(reason: Reason) -> str:
    """A 1-GPU job's reason, with quota refusals split by what refused them."""
    if reason.code != "quota_exhausted":
        return reason.code
    details = dict(reason.details)
    if "non_preemptible_used" in details:
        return "quota: non-preemptible class at nominal"
    if "lendable_to_shorter_jobs" in details:
        return "quota: idle nominal lent only to shorter jobs"
    return "quota: nothing lendable"


class IdleLog:
    """Per schedule() call: the idle whole GPUs it left and why 1-GPU jobs still wait."""

    def __init__(self, cluster: Cluster) -> None:
        self.whole = sum(n.gpus for n in cluster.nodes if not n.mig and n.state == "up")
        self.calls: list[tuple[float, int, str]] = []
        self.size = {n.name: n.gpus for n in cluster.nodes}
        # Per call: (time, waiting jobs of less than a node, GPUs idle on idle nodes, GPUs
        # idle on partly used nodes).
        self.shape: list[tuple[float, int, int, int]] = []
        # Per call: (time, jobs left waiting by shape, "NxG" or "MIG", and for jobs of whole
        # nodes also by shape and reason, "NxG: reason").
        self.backlog: list[tuple[float, dict[str, int]]] = []
        # Per preempted job: (when decided, "reclaim" | "priority, same team" | ...).
        self.preempted: dict[str, list[tuple[float, str]]] = {}

    def __call__(self, snapshot: Snapshot, decisions: Decisions, now: float) -> None:
        if decisions.preemptions:
            team = {j.request.id: j.request.team for j in snapshot.running}
            team.update((p.request.id, p.request.team) for p in snapshot.pending)
            for p in decisions.preemptions:
                kind = p.kind
                if kind == "priority":
                    same = team.get(p.by_job_id) == team.get(p.job_id)
                    kind += ", same team" if same else ", other team"
                self.preempted.setdefault(p.job_id, []).append((now, kind))
        used = sum(len(a.gpus) for j in snapshot.running for a in j.placement.allocs)
        used += sum(len(a.gpus) for s in decisions.starts for a in s.placement.allocs)
        idle = self.whole - used
        category = ""
        if idle > 0:
            one_gpu = {
                p.request.id
                for p in snapshot.pending
                if p.request.nodes * p.request.gpus_per_node == 1 and not p.request.mig_profile
            }
            causes = sorted({cause(w.reason) for w in decisions.waits if w.job_id in one_gpu})
            category = " + ".join(causes) if causes else ONLY_LARGER if decisions.waits else NOTHING
        self.calls.append((now, idle, category))
        # What waits, and where the idle GPUs are: jobs of less than a whole node left
        # waiting (the jobs that could refill a hole), and idle GPUs on idle nodes against
        # holes on partly used ones.
        free = {n.name: n.gpus for n in snapshot.nodes if not n.mig and n.state == "up"}
        for allocs in chain(
            (j.placement.allocs for j in snapshot.running),
            (st.placement.allocs for st in decisions.starts),
        ):
            for a in allocs:
                if a.node in free:
                    free[a.node] -= len(a.gpus)
        width = max((n.gpus for n in snapshot.nodes), default=0)
        started = {st.job_id for st in decisions.starts}
        reason = {w.job_id: w.reason for w in decisions.waits}
        small = 0
        waiting: dict[str, int] = {}
        for p in snapshot.pending:
            r = p.request
            if r.id in started:
                continue
            small += r.nodes == 1 and r.gpus_per_node < width
            k = "MIG" if r.mig_profile else f"{r.nodes}x{r.gpus_per_node}"
            waiting[k] = waiting.get(k, 0) + 1
            if r.gpus_per_node == width and r.id in reason:
                why = f"{k}: {cause(reason[r.id])}"
                waiting[why] = waiting.get(why, 0) + 1
        idle_nodes = sum(f for name, f in free.items() if f == self.size[name])
        self.shape.append((now, small, idle_nodes, sum(free.values()) - idle_nodes))
        self.backlog.append((now, waiting))

    def shape_before(self, start: float, until: float) -> tuple[float, float, float]:
        """Time averages before `until`: waiting jobs of less than a node, and GPUs idle on
        idle nodes and on partly used ones (as a share of the whole GPUs)."""
        small = whole = holes = 0.0
        for (at, n, w, h), (nxt, *_) in zip(self.shape, self.shape[1:], strict=False):
            span = min(nxt, until) - at
            if span > 0:
                small, whole, holes = small + n * span, whole + w * span, holes + h * span
        span = max(until - start, 1e-9)
        return small / span, whole / span / self.whole, holes / span / self.whole

    def backlog_before(self, start: float, until: float) -> dict[str, float]:
        """Jobs left waiting before `until`, by shape, as time averages."""
        out: dict[str, float] = {}
        for (at, waiting), (nxt, _) in zip(self.backlog, self.backlog[1:], strict=False):
            span = min(nxt, until) - at
            if span > 0:
                for k, n in waiting.items():
                    out[k] = out.get(k, 0.0) + n * span
        span = max(until - start, 1e-9)
        return {k: v / span for k, v in out.items()}

    def idle_before(self, until: float) -> dict[str, float]:
        """GPU-seconds idle before `until`, per category: a call's idle GPUs stay idle until
        the next call (the simulator calls after every end, and skips a call only when no
        whole GPU is idle or nothing is pending)."""
        out: dict[str, float] = {}
        for (at, idle, category), (nxt, _, _) in zip(self.calls, self.calls[1:], strict=False):
            span = min(nxt, until) - at
            if idle > 0 and span > 0:
                out[category] = out.get(category, 0.0) + idle * span
        return out


def busy(
    result: Result,
    jobs: list[SimJob],
    split: float,
    preempted: Mapping[str, list[tuple[float, str]]],
) -> tuple[float, float, float, float, dict[str, float]]:
    """GPU-seconds held before and after `split`, of those the work preemption threw away
    (a preempted run keeps what it ran up to its last checkpoint), and that lost work by
    the kind of the preemption that ended the run (`preempted`: IdleLog.preempted; a run
    not found there counts as "unknown")."""
    checkpoint = {j.request.id: j.checkpoint_s for j in jobs}
    held_before = held_after = lost_before = lost_after = 0.0
    by_kind: dict[str, float] = {}
    for run in result.runs:
        held_before += run.gpus * max(0.0, min(run.end_s, split) - run.start_s)
        held_after += run.gpus * max(0.0, run.end_s - max(run.start_s, split))
        if run.ended_by == "preempted":
            ran = run.end_s - run.start_s
            c = checkpoint.get(run.job_id)
            kept = math.floor(ran / c) * c if c else 0.0
            lost_from = run.start_s + kept
            lost_before += run.gpus * max(0.0, min(run.end_s, split) - lost_from)
            lost_after += run.gpus * max(0.0, run.end_s - max(lost_from, split))
            decided = [k for at, k in preempted.get(run.job_id, ()) if at <= run.end_s]
            kind = decided[-1] if decided else "unknown"
            by_kind[kind] = by_kind.get(kind, 0.0) + run.gpus * (run.end_s - lost_from)
    return held_before, lost_before, held_after, lost_after, by_kind


def useful_by_day(result: Result, jobs: list[SimJob], start: float, day: float) -> list[float]:
    """GPU-seconds of useful work (held, minus what preemption later threw away) in each
    `day` since `start`, the first submit."""
    checkpoint = {j.request.id: j.checkpoint_s for j in jobs}
    out: list[float] = []

    def add(a: float, b: float, sign: float) -> None:
        # [a, b) spread over the days it spans.
        while b > a:
            i = int((a - start) // day)
            while len(out) <= i:
                out.append(0.0)
            edge = min(b, start + (i + 1) * day)
            out[i] += sign * (edge - a)
            a = edge

    for run in result.runs:
        add(run.start_s, run.end_s, run.gpus)
        if run.ended_by == "preempted":
            c = checkpoint.get(run.job_id)
            kept = math.floor((run.end_s - run.start_s) / c) * c if c else 0.0
            add(run.start_s + kept, run.end_s, -run.gpus)
    return out


def _shape_order(key: str) -> tuple[bool, list[int], str]:
    """ "NxG" keys by nodes and GPUs, each followed by its "NxG: reason" keys; "MIG" last."""
    shape, _, why = key.partition(": ")
    return shape == "MIG", [] if shape == "MIG" else [int(x) for x in shape.split("x")], why


def workload_args() -> tuple[Cluster, list[SimJob], list[str]]:
    """--cluster, --workload and --policy (repeatable; default gpuq and backfill), read."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--policy", action="append", choices=list(POLICIES))
    args = parser.parse_args()
    cluster = parse_cluster(Path(args.cluster).read_text(), args.cluster)
    jobs = parse_jobs(Path(args.workload).read_text(), args.workload, cluster.priority_classes)
    return cluster, jobs, args.policy or ["gpuq", "backfill"]


def main() -> None:
    cluster, jobs, policies = workload_args()
    total = float(sum(n.gpus for n in cluster.nodes))
    first_submit = min(j.request.submit_time for j in jobs)
    last_submit = max(j.request.submit_time for j in jobs)
    print(
        "| policy | utilization | busy before last submit | of it lost | busy after"
        " | of it lost | idle before |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    idles: dict[str, dict[str, float]] = {}
    shapes: dict[str, tuple[float, float, float]] = {}
    losses: dict[str, dict[str, float]] = {}
    backlogs: dict[str, dict[str, float]] = {}
    days: dict[str, list[float]] = {}
    span_before = total * max(last_submit - first_submit, 1e-9)
    for name in policies:
        log = IdleLog(cluster)
        result = simulate(cluster, jobs, name, observe=log)
        end = max((r.end_s for r in result.runs), default=last_submit)
        before, lost_before, after, lost_after, lost_by_kind = busy(
            result, jobs, last_submit, log.preempted
        )
        shapes[name] = log.shape_before(first_submit, last_submit)
        backlogs[name] = log.backlog_before(first_submit, last_submit)
        idles[name] = idle = log.idle_before(last_submit)
        # With nothing pending the simulator skips calls, so GPUs freed then are not seen
        # above: the exact idle, from the runs, puts the rest under "nothing waits".
        unseen = span_before - before - sum(idle.values())
        idle[NOTHING] = idle.get(NOTHING, 0.0) + max(0.0, unseen)
        losses[name] = lost_by_kind
        days[name] = useful_by_day(result, jobs, first_submit, DAY)
        span_after = total * max(end - last_submit, 1e-9)
        print(
            f"| {name} | {result.report['gpu_utilization']:.3f}"
            f" | {before / span_before:.3f} | {lost_before / span_before:.3f}"
            f" | {after / span_after:.3f} | {lost_after / span_after:.3f}"
            f" | {1.0 - before / span_before:.3f} |",
            flush=True,
        )
    print(
        "\nIdle before the last submit, share of the cluster, by what waiting 1-GPU jobs"
        " were told:\n"
    )
    for name, idle in idles.items():
        print(f"- {name}:")
        for category, gpu_s in sorted(idle.items(), key=lambda kv: -kv[1]):
            share = gpu_s / span_before
            if share >= 0.0005:
                print(f"  - {share:.3f} {category}")

    print(
        "\nBefore the last submit, time averages over the scheduler's calls: jobs of less than"
        " a node left waiting (what refills a hole), and GPUs idle while jobs wait, on idle"
        " nodes and in holes on partly used nodes (share of the cluster):\n"
    )
    print("| policy | waiting jobs < 1 node | idle on idle nodes | idle in holes |")
    print("|---|---:|---:|---:|")
    for name, (small, whole, holes) in shapes.items():
        print(f"| {name} | {small:.1f} | {whole:.3f} | {holes:.3f} |")
    print(
        "\nBefore the last submit, time averages over the scheduler's calls: jobs left waiting"
        " by shape (nodes x GPUs per node), and jobs of whole nodes by what they were told:\n"
    )
    print("| shape | " + " | ".join(backlogs) + " |")
    print("|---|" + "---:|" * len(backlogs))
    for k in sorted({k for b in backlogs.values() for k in b}, key=_shape_order):
        print(f"| {k} | " + " | ".join(f"{b.get(k, 0.0):.1f}" for b in backlogs.values()) + " |")
    print("\nWork lost to preemption, share of all lost work, by kind:\n")
    for name, lost in losses.items():
        total_lost = sum(lost.values())
        if total_lost > 0:
            print(f"- {name}:")
            for kind, gpu_s in sorted(lost.items(), key=lambda kv: -kv[1]):
                print(f"  - {gpu_s / total_lost:.3f} {kind} ({gpu_s:,.0f} GPU-s)")
    print(
        "\nUseful work by day since the first submit, share of the cluster (the last submit"
        f" falls in day {int((last_submit - first_submit) // DAY)}; a policy's last day is"
        " partly empty):\n"
    )
    print("| day | " + " | ".join(days) + " |")
    print("|---:|" + "---:|" * len(days))
    for i in range(max(len(d) for d in days.values())):
        cells = (f"{d[i] / (total * DAY):.3f}" if i < len(d) else "" for d in days.values())
        print(f"| {i} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
