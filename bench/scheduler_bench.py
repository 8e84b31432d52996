"""One schedule() call on a large snapshot: 1,000 nodes x 8 GPUs, 90% busy, 50 teams, and
1k / 10k / 100k pending jobs. Prints median and p99 wall ms per size and the 100k/10k ratio,
with the garbage collector on and paused (as the service's cycle makes the call).

    python3 bench/scheduler_bench.py [--sizes 1000 10000 100000] [--repeats 15]

Plain standard-library script (run from the repository root); the snapshots are seeded, so
every run measures the same input.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler import schedule
from scheduler.types import (
    JobRequest,
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

MODEL = "A100-SXM4-80GB"
NODES, GPUS, TEAMS, BUSY = 1000, 8, 50, 0.9
SHAPES = [(1, 1)] * 12 + [(1, 2)] * 3 + [(1, 4)] * 2 + [(1, 8)] * 2 + [(2, 8), (4, 8)]
CLASSES = ["normal"] * 8 + ["low", "high"]


def snapshot(pending: int, seed: int = 1) -> Snapshot:
    rng = random.Random(seed)
    nodes = tuple(Node(f"gpu-{i:04d}", MODEL, GPUS) for i in range(NODES))
    nominal = NODES * GPUS / TEAMS
    teams = tuple(Team(f"team{t:02d}", 1.0, (Quota("*", nominal, nominal),)) for t in range(TEAMS))
    running: list[RunningJob] = []
    now = 0.0
    # Fill 90% of the GPUs with jobs of the usual shapes, node by node.
    target = int(NODES * GPUS * BUSY)
    used = 0
    for node in nodes:
        gpu = 0
        while gpu < GPUS and used < target:
            width = min(rng.choice([1, 1, 1, 2, 4, 8]), GPUS - gpu, target - used)
            r = JobRequest(
                f"run-{len(running)}",
                f"team{rng.randrange(TEAMS):02d}",
                rng.choice(CLASSES),
                now - 10_000,
                1,
                width,
                time_limit_s=rng.choice([3600.0, 4 * 3600.0, 24 * 3600.0]),
            )
            placement = Placement((NodeAlloc(node.name, tuple(range(gpu, gpu + width))),))
            running.append(RunningJob(r, now - rng.uniform(0, 3000), placement, MODEL))
            gpu += width
            used += width
    jobs = []
    for i in range(pending):
        n, g = rng.choice(SHAPES)
        jobs.append(
            PendingJob(
                JobRequest(
                    f"job-{i}",
                    f"team{rng.randrange(TEAMS):02d}",
                    rng.choice(CLASSES),
                    now - rng.uniform(0, 86_400),
                    n,
                    g,
                    time_limit_s=rng.choice([600.0, 3600.0, 4 * 3600.0]),
                )
            )
        )
    return Snapshot(nodes, teams, tuple(jobs), tuple(running))


def measure(s: Snapshot, repeats: int) -> tuple[list[float], list[float]]:
    """Wall ms per call with the garbage collector on, and paused as the service's cycle
    calls it (queue_service/jobs/snapshot.py, decide()), alternating so both see the same
    host."""
    on: list[float] = []
    paused: list[float] = []
    for _ in range(repeats):
        for times in (on, paused):
            gc.collect()
            if times is paused:
                gc.disable()
            t0 = time.perf_counter()
            schedule(s, Policy(), 0.0)
            times.append((time.perf_counter() - t0) * 1000.0)
            gc.enable()
    return on, paused


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    medians: dict[int, tuple[float, float]] = {}
    print(
        "| pending | median ms | p99 ms | median ms, collector paused | p99 ms, collector paused"
        " | starts | preemptions | repeats |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in args.sizes:
        s = snapshot(size)
        d = schedule(s, Policy(), 0.0)  # warm-up, and the decisions the row describes
        on, paused = measure(s, args.repeats)
        medians[size] = (statistics.median(on), statistics.median(paused))
        row = (size, medians[size][0], p99(on), medians[size][1], p99(paused))
        print(
            "| {:,} | {:.1f} | {:.1f} | {:.1f} | {:.1f}".format(*row)
            + f" | {len(d.starts)} | {len(d.preemptions)} | {args.repeats} |"
        )
    if 10_000 in medians and 100_000 in medians:
        big, small = medians[100_000], medians[10_000]
        print(
            f"\nratio 100k/10k (medians): {big[0] / small[0]:.1f} with the collector on,"
            f" {big[1] / small[1]:.1f} paused"
        )


if __name__ == "__main__":
    main()
