"""How steady EASY reservations are in a simulated run: a job that holds the reservation and
neither holds it nor starts at the next schedule() call has lost it, and the GPUs held for it
are free for other jobs again. Per policy: the calls with a reservation, the reservations
lost and why (the loser's reason at that call, and whether the next holder is of the same
class), and the time from a job's first reservation to its start, by shape.

    python3 bench/sim_reservations.py --cluster C.json --workload J.csv
                                      [--policy gpuq --policy backfill]

Plain standard-library script (run from the repository root), on the simulator's observe
hook. "reserved elsewhere" means the loser now waits behind another job's reservation.
"""

from __future__ import annotations

import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim_idle import workload_args

from scheduler.simulate import simulate
from scheduler.types import Decisions, Snapshot


class ReservationLog:
    def __init__(self) -> None:
        self.calls = 0
        self.with_reservation = 0
        self.holders: frozenset[str] = frozenset()
        self.first: dict[str, float] = {}  # job -> when it first held a reservation
        self.waited: dict[str, float] = {}  # job -> first reservation to start, seconds
        self.lost: Counter[tuple[str, str]] = Counter()  # (loser's reason, next holder)
        self.shape: dict[str, str] = {}
        self.priority: dict[str, str] = {}

    def __call__(self, snapshot: Snapshot, decisions: Decisions, now: float) -> None:
        self.calls += 1
        for p in snapshot.pending:
            r = p.request
            self.shape.setdefault(r.id, r.mig_profile or f"{r.nodes}x{r.gpus_per_node}")
            self.priority.setdefault(r.id, r.priority)
        holders = frozenset(w.job_id for w in decisions.waits if w.reserved)
        started = {s.job_id for s in decisions.starts}
        if holders:
            self.with_reservation += 1
        waits = {w.job_id: w for w in decisions.waits}
        for job_id in self.holders - holders - started:
            w = waits.get(job_id)
            why = "gone" if w is None else w.reason.code
            if w is not None and dict(w.reason.details).get("reserved_for"):
                why = "reserved elsewhere"
            classes = {self.priority[h] for h in holders}
            if not classes:
                after = "no holder"
            elif classes == {self.priority[job_id]}:
                after = "same class"
            else:
                after = f"{self.priority[job_id]} -> {'/'.join(sorted(classes))}"
            self.lost[(why, after)] += 1
        for job_id in holders:
            self.first.setdefault(job_id, now)
        for job_id in started & self.first.keys():
            self.waited.setdefault(job_id, now - self.first[job_id])
        self.holders = holders


def main() -> None:
    cluster, jobs, policies = workload_args()
    for name in policies:
        log = ReservationLog()
        report = simulate(cluster, jobs, name, observe=log).report
        print(f"## {name}: utilization {report['gpu_utilization']:.4f}\n")
        print(
            f"- {log.calls:,} schedule() calls, {log.with_reservation:,} with a reservation;"
            f" {len(log.first):,} jobs held one; {sum(log.lost.values()):,} reservations"
            " lost before their job started"
        )
        for (why, after), count in log.lost.most_common():
            print(f"  - {count:,}: {why}; next holder {after}")
        print("\n| shape | jobs reserved, then started | median s to start | mean s |")
        print("|---|---:|---:|---:|")
        by_shape: dict[str, list[float]] = {}
        for job_id, waited in log.waited.items():
            by_shape.setdefault(log.shape[job_id], []).append(waited)
        for shape, values in sorted(by_shape.items()):
            print(
                f"| {shape} | {len(values):,} | {statistics.median(values):,.0f}"
                f" | {statistics.fmean(values):,.0f} |"
            )
        print(flush=True)


if __name__ == "__main__":
    main()
