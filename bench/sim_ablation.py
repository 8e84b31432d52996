"""Where the production policy loses utilization: the simulator on one workload under
`gpuq`, `backfill`, and `gpuq` with one part turned off at a time.

    python3 bench/sim_ablation.py --cluster C.json --workload J.csv [--variants ...]

Plain standard-library script (run from the repository root). Every variant runs the same
schedule() code; only the Policy flags differ. Prints one Markdown row per variant.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.simulate import POLICIES, simulate
from scheduler.workload import parse_cluster, parse_jobs

GPUQ = POLICIES["gpuq"]
VARIANTS = {
    "gpuq": GPUQ,
    "backfill": POLICIES["backfill"],
    "fifo": POLICIES["fifo"],
    "gpuq-no-quotas": replace(GPUQ, quotas=False),
    "gpuq-no-preemption": replace(GPUQ, preemption=False),
    # Every higher class preempts lower ones, not only the non-preemptible classes.
    "gpuq-preemptible-classes-preempt": replace(GPUQ, preemptible_classes_preempt=True),
    "gpuq-no-fair-share": replace(GPUQ, fair_share=False),
    "gpuq-no-priorities": replace(GPUQ, priorities=False),
    "gpuq-no-quotas-no-preemption": replace(GPUQ, quotas=False, preemption=False),
    # backfill plus fair share: the order alone differs from the baseline.
    "backfill+fair-share": replace(POLICIES["backfill"], fair_share=True),
    # EASY backfill in the order the issue asks for (class, then fair share, then FIFO within
    # a team), without quotas or preemption: what gpuq's other parts add or cost.
    "backfill+priorities+fair-share": replace(
        POLICIES["backfill"], fair_share=True, priorities=True
    ),
    # The same with gpuq's priority preemption (no quotas: any lower class is a victim).
    "backfill+priorities+fair-share+preemption": replace(
        POLICIES["backfill"], fair_share=True, priorities=True, preemption=True
    ),
    # Placement: gpuq with plain best fit, and the baseline with gpuq's end-time choice.
    "gpuq-best-fit": replace(GPUQ, pack_by_end=False),
    "backfill+pack-by-end": replace(POLICIES["backfill"], pack_by_end=True),
    # A job refused quota holds its team's nominal at once (the FIFO within a team,
    # taken literally), or once it has waited 1 or 3 days.
    "gpuq-quota-hold-0": replace(GPUQ, quota_hold_after_s=0.0),
    "gpuq-quota-hold-1d": replace(GPUQ, quota_hold_after_s=86400.0),
    "gpuq-quota-hold-3d": replace(GPUQ, quota_hold_after_s=3 * 86400.0),
    # A priority preemption may throw away a quarter, not half, of what its job would wait.
    "gpuq-loss-ratio-0.25": replace(GPUQ, preemption_loss_ratio=0.25),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args()
    cluster = parse_cluster(Path(args.cluster).read_text(), args.cluster)
    jobs = parse_jobs(Path(args.workload).read_text(), args.workload, cluster.priority_classes)
    print(
        "| variant | utilization | makespan s | mean wait s | Jain | preemptions"
        " | lost GPU-s | CPU s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.variants:
        t0 = time.process_time()
        rep = simulate(cluster, jobs, name, policy=VARIANTS[name]).report
        cpu = time.process_time() - t0
        jain = rep["jain_fairness"]
        print(
            f"| {name} | {rep['gpu_utilization']:.3f} | {rep['makespan_s']:,.0f}"
            f" | {rep['wait_s']['mean']:,.0f} | {'-' if jain is None else f'{jain:.4f}'}"
            f" | {rep['preemptions']:,} | {rep['lost_gpu_seconds']:,.0f} | {cpu:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
