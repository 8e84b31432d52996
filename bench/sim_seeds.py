"""Issue 3's acceptance comparison on several generated workloads instead of one: each seed's
saturated workload under `gpuq`, `backfill` and `fifo`, then per seed whether `gpuq` has
utilization >= `backfill`, mean wait < `fifo` and Jain's index >= 0.9.

    python3 bench/sim_seeds.py [--seeds 3 5 7 11] [--jobs 20000] [--nodes 32] [--teams 4]
                               [--load 1.3] [--workers 2] [--also VARIANT ...] [--only-also]

Plain standard-library script (run from the repository root). Each workload is what
`python -m scheduler generate --jobs J --seed S --nodes N --teams T --load L` writes, parsed
by the simulator's own readers; the runs are spread over `--workers` processes. One run's
utilization turns on when the last few long jobs start (a tie-break can move it by
several points), so a policy is judged here by all seeds together. Hence also, per run,
the share of the GPUs doing useful work before the last submit (held minus what preemption
later threw away), which a policy sustains while the queue stays full, and the share busy
after it, in the drain (bench/sim_idle.py breaks both down further). `--also` adds policy
variants of bench/sim_ablation.py to the table, each with a line saying on how many seeds
gpuq's utilization is at least its; `--only-also` runs those variants alone (the three
compared policies' runs are deterministic and often already known).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim_ablation import VARIANTS
from sim_idle import busy

from scheduler import generate
from scheduler.simulate import simulate
from scheduler.workload import csv_text, parse_cluster, parse_jobs

COMPARED = ("gpuq", "backfill", "fifo")


def workload_texts(spec: generate.Spec) -> tuple[str, str]:
    """CLUSTER.json and JOBS.csv as `python -m scheduler generate` writes them."""
    rows = ([r[c] for c in generate.COLUMNS] for r in generate.jobs(spec))
    return json.dumps(generate.cluster(spec)), csv_text(generate.COLUMNS, rows)


def run(spec: generate.Spec, policy: str) -> dict[str, Any]:
    cluster_text, jobs_text = workload_texts(spec)
    cluster = parse_cluster(cluster_text, f"seed {spec.seed} cluster")
    jobs = parse_jobs(jobs_text, f"seed {spec.seed} jobs", cluster.priority_classes)
    t0 = time.process_time()
    result = simulate(cluster, jobs, policy, policy=VARIANTS[policy])
    cpu_s = time.process_time() - t0
    report = result.report
    gpus = float(sum(n.gpus for n in cluster.nodes))
    first_submit = min(j.request.submit_time for j in jobs)
    last_submit = max(j.request.submit_time for j in jobs)
    end = max((r.end_s for r in result.runs), default=last_submit)
    before, lost_before, after, _, _ = busy(result, jobs, last_submit, {})
    return {
        "seed": spec.seed,
        "policy": policy,
        "utilization": report["gpu_utilization"],
        "makespan_s": report["makespan_s"],
        "mean_wait_s": report["wait_s"]["mean"],
        "jain": report["jain_fairness"],
        "preemptions": report["preemptions"],
        "lost_gpu_seconds": report["lost_gpu_seconds"],
        "useful_before": (before - lost_before) / (gpus * max(last_submit - first_submit, 1e-9)),
        "busy_after": after / (gpus * max(end - last_submit, 1e-9)),
        "cpu_s": cpu_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[3, 5, 7, 11])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--teams", type=int, default=4)
    parser.add_argument("--load", type=float, default=1.3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--also", nargs="+", default=[], choices=sorted(set(VARIANTS) - {*COMPARED})
    )
    parser.add_argument("--only-also", action="store_true")
    args = parser.parse_args()
    if args.only_also and not args.also:
        parser.error("--only-also needs --also")
    specs = {
        s: generate.Spec(args.jobs, s, args.teams, args.nodes, load=args.load) for s in args.seeds
    }
    policies = [] if args.only_also else list(COMPARED)
    policies += args.also
    tasks = [(specs[s], p) for s in args.seeds for p in policies]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        rows = list(pool.map(run, *zip(*tasks, strict=True)))
    by = {(r["seed"], r["policy"]): r for r in rows}
    print(
        "| seed | policy | utilization | useful before last submit | busy after"
        " | makespan s | mean wait s | Jain | preemptions | lost GPU-s | CPU s |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        jain = "-" if r["jain"] is None else f"{r['jain']:.4f}"
        print(
            f"| {r['seed']} | {r['policy']} | {r['utilization']:.4f}"
            f" | {r['useful_before']:.3f} | {r['busy_after']:.3f} | {r['makespan_s']:,.0f}"
            f" | {r['mean_wait_s']:,.0f} | {jain} | {r['preemptions']:,}"
            f" | {r['lost_gpu_seconds']:,.0f} | {r['cpu_s']:.0f} |"
        )
    print("\n| policy | mean utilization | mean of mean waits s |")
    print("|---|---:|---:|")
    for p in policies:
        utils = [by[(s, p)]["utilization"] for s in args.seeds]
        waits = [by[(s, p)]["mean_wait_s"] for s in args.seeds]
        print(f"| {p} | {statistics.mean(utils):.4f} | {statistics.mean(waits):,.0f} |")
    if args.only_also:
        return
    checks = {
        "gpuq utilization >= backfill": lambda s: (
            by[(s, "gpuq")]["utilization"] >= by[(s, "backfill")]["utilization"]
        ),
        "gpuq mean wait < fifo": lambda s: (
            by[(s, "gpuq")]["mean_wait_s"] < by[(s, "fifo")]["mean_wait_s"]
        ),
        # None: no interval in which every team had work waiting, so nothing to measure.
        "gpuq Jain >= 0.9": lambda s: (
            None if by[(s, "gpuq")]["jain"] is None else by[(s, "gpuq")]["jain"] >= 0.9
        ),
    }
    for v in args.also:
        checks[f"gpuq utilization >= {v}"] = lambda s, v=v: (
            by[(s, "gpuq")]["utilization"] >= by[(s, v)]["utilization"]
        )
    print()
    for name, holds in checks.items():
        verdicts = {s: holds(s) for s in args.seeds}
        ok = [s for s, v in verdicts.items() if v]
        failed = [s for s, v in verdicts.items() if v is False]
        unmeasured = [s for s, v in verdicts.items() if v is None]
        line = f"{name}: holds on {len(ok)} of {len(args.seeds)} seeds; fails on {failed or 'none'}"
        if unmeasured:
            line += f"; not measurable on {unmeasured}"
        print(line)


if __name__ == "__main__":
    main()
