"""A seeded generator of realistic workloads for the simulator.

Shapes follow what GPU clusters report: most jobs take one GPU, a few take whole nodes or
multi-node gangs; durations are log-normal (a heavy tail of multi-day runs); users ask for
time limits well above the run time; arrivals are Poisson with bursts (one team submitting a
sweep of identical jobs at once). Teams submit at equal rates, and the arrival rate is set
so that the offered load is `load` times the cluster (above 1: saturated).

The shape table is written for nodes of 8 GPUs; `shapes()` fits it to the cluster generated
(a whole node is `gpus_per_node` GPUs, a gang spans at most `nodes` nodes), so that every
job can run. On 8-GPU nodes and at least 4 of them the table is used as it is: the same seed
writes the same files as before that fitting (docs/BENCHMARKS.md records runs on them).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from .workload import MAX_NODE_GPUS, MAX_SECONDS

MODEL = "A100-SXM4-80GB"
COLUMNS = (
    "job_id",
    "team",
    "submit_s",
    "duration_s",
    "nodes",
    "gpus_per_node",
    "priority",
    "time_limit_s",
    "checkpoint_s",
)

# (nodes, gpus per node, weight), for nodes of WHOLE_NODE GPUs: see shapes()
WHOLE_NODE = 8
SHAPES: tuple[tuple[int, int, float], ...] = (
    (1, 1, 0.62),
    (1, 2, 0.14),
    (1, 4, 0.10),
    (1, 8, 0.08),
    (2, 8, 0.04),
    (4, 8, 0.02),
)
PRIORITIES: tuple[tuple[str, float], ...] = (("high", 0.05), ("normal", 0.80), ("low", 0.15))
MEDIAN_DURATION_S = 1800.0
DURATION_SIGMA = 1.4
MAX_DURATION_S = 3 * 24 * 3600.0
BURST_PROBABILITY = 0.03
BURST_SIZE = (10, 80)


@dataclass(frozen=True)
class Spec:
    jobs: int
    seed: int
    teams: int = 4
    nodes: int = 32
    gpus_per_node: int = 8
    load: float = 1.3

    def __post_init__(self) -> None:
        for name in ("teams", "nodes", "gpus_per_node"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.gpus_per_node > MAX_NODE_GPUS:  # simulate refuses bigger nodes
            raise ValueError(
                f"gpus_per_node must be at most {MAX_NODE_GPUS}, got {self.gpus_per_node}"
            )
        if self.jobs < 0:
            raise ValueError(f"jobs must be at least 0, got {self.jobs}")
        if not (self.load > 0 and math.isfinite(self.load)):
            raise ValueError(f"load must be a positive number, got {self.load}")
        gap = mean_gap(self)
        if not gap < MAX_SECONDS:
            raise ValueError(f"load {self.load} is too low: arrivals {gap:g} s apart on average")
        if not (gap > 0 and 1.0 / gap < math.inf):  # at the float's limits
            raise ValueError(f"load {self.load} is too high")


def shapes(spec: Spec) -> tuple[tuple[int, int, float], ...]:
    """SHAPES fitted to the generated cluster, one row for each, with the same weights: a
    whole node (WHOLE_NODE GPUs in the table) takes `gpus_per_node`, a smaller share at most
    that, and a gang at most `nodes` nodes."""
    g = spec.gpus_per_node
    return tuple(
        (min(n, spec.nodes), g if gpus == WHOLE_NODE else min(gpus, g), w) for n, gpus, w in SHAPES
    )


def _pick(rng: random.Random, table: tuple[tuple[Any, ...], ...]) -> tuple[Any, ...]:
    x = rng.random() * sum(row[-1] for row in table)
    for row in table:
        x -= row[-1]
        if x <= 0:
            return row
    return table[-1]


def _mean_gpu_seconds(table: tuple[tuple[int, int, float], ...]) -> float:
    mean_duration = MEDIAN_DURATION_S * math.exp(DURATION_SIGMA**2 / 2)
    total = sum(w for *_, w in table)
    return mean_duration * sum(n * g * w for n, g, w in table) / total


def mean_gap(spec: Spec) -> float:
    """The mean time between arrivals that offers `spec.load` times the cluster; bursts add
    jobs, so the gap is scaled up by the mean number of jobs per arrival."""
    per_arrival = 1 + BURST_PROBABILITY * (sum(BURST_SIZE) / 2 - 1)
    total = spec.nodes * spec.gpus_per_node
    return _mean_gpu_seconds(shapes(spec)) * per_arrival / (spec.load * total)


def cluster(spec: Spec) -> dict[str, Any]:
    total = spec.nodes * spec.gpus_per_node
    nominal = total // spec.teams
    return {
        "nodes": [
            {"name": f"a100-{i + 1:03d}", "gpu_model": MODEL, "gpus": spec.gpus_per_node}
            for i in range(spec.nodes)
        ],
        "teams": [
            {
                "name": f"team{t + 1:02d}",
                "weight": 1.0,
                "quota": {MODEL: {"nominal": nominal, "borrowing_limit": total - nominal}},
            }
            for t in range(spec.teams)
        ],
    }


def jobs(spec: Spec) -> list[dict[str, str]]:
    rng = random.Random(spec.seed)
    total = spec.nodes * spec.gpus_per_node
    table = shapes(spec)
    gap = mean_gap(spec)
    rows: list[dict[str, str]] = []
    t = 0.0
    while len(rows) < spec.jobs:
        t += rng.expovariate(1.0 / gap)
        if t > MAX_SECONDS:  # simulate refuses the file
            raise ValueError(
                f"load {spec.load} spaces {spec.jobs} jobs' arrivals beyond {MAX_SECONDS:g} s:"
                " raise --load or lower --jobs"
            )
        team = f"team{rng.randrange(spec.teams) + 1:02d}"
        count = rng.randint(*BURST_SIZE) if rng.random() < BURST_PROBABILITY else 1
        nodes, gpus, _ = _pick(rng, table)
        priority = _pick(rng, PRIORITIES)[0]
        if priority == "high" and nodes * gpus > total // spec.teams:
            priority = "normal"  # non-preemptible work runs within nominal quota: keep it possible
        for _ in range(min(count, spec.jobs - len(rows))):
            duration = min(
                MAX_DURATION_S,
                max(30.0, rng.lognormvariate(math.log(MEDIAN_DURATION_S), DURATION_SIGMA)),
            )
            limit = math.ceil(duration * rng.uniform(1.1, 3.0) / 600.0) * 600.0
            checkpoint = "1800" if duration > 3600 and rng.random() < 0.5 else ""
            rows.append(
                {
                    "job_id": f"j{len(rows) + 1:06d}",
                    "team": team,
                    "submit_s": f"{t:.1f}",
                    "duration_s": f"{duration:.1f}",
                    "nodes": str(nodes),
                    "gpus_per_node": str(gpus),
                    "priority": priority,
                    "time_limit_s": f"{limit:.0f}",
                    "checkpoint_s": checkpoint,
                }
            )
    return rows
