"""How close the MIG allocator + planner come to an exhaustive optimum, on seeded streams.

A stream is a sequence of rounds on one node of 1-8 MIG GPUs: jobs whose time is up release
their slice, then a batch of slice requests arrives. The policy under test does what the
scheduler does each cycle: build a MigIndex from the node state, then `plan` + `take` (two
orders, see run_stream). A request not served in its round is lost.

The optimum is computed from the same state at every round: free instances on busy GPUs are a
fixed supply, and each idle GPU may hold ANY realisable multiset of instances. It maximises
the number served (lexicographically by priority class first when classes differ), by dynamic
programming over the idle GPUs with the remaining demand vector as state: exhaustive, exact.

The layout oracle (every valid placed layout of a model, by brute force from the physical
rules alone) lives here too; the exhaustive tests use it.

    .venv/bin/python bench/mig_quality.py [--streams N] [--rounds R] [--seed S]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.mig import MigIndex, MigRequest, ModelTable, ProfileSpec, geometry, validate_layout
from scheduler.types import Gpu, MigInstance, Node

Placed = tuple[tuple[str, int], ...]  # (profile name, start), sorted


# --- the oracle ------------------------------------------------------------------------------


def table_of(model: str) -> ModelTable:
    table = geometry(model)
    if table is None:
        raise ValueError(f"no MIG table for {model}")
    return table


def oracle_valid(table: ModelTable, placed: Sequence[tuple[ProfileSpec, int]]) -> bool:
    """The physical rules, nothing else: valid start, no shared memory slice, compute within
    the GPU, per-profile instance limit, at most one +me."""
    used: set[int] = set()
    for spec, start in placed:
        memory = set(range(start, start + spec.size))
        if start not in spec.starts or memory & used:
            return False
        used |= memory
    counts = Counter(spec for spec, _ in placed)
    return (
        sum(spec.compute_slices for spec, _ in placed) <= table.compute_slices
        and all(n <= spec.max_instances for spec, n in counts.items())
        and sum(n for spec, n in counts.items() if spec.media_extensions) <= 1
    )


@cache
def all_layouts(model: str) -> frozenset[Placed]:
    """Every valid placed layout of the model, by depth-first extension."""
    table = table_of(model)
    options = [(spec, start) for spec in table.profiles for start in spec.starts]
    found: set[Placed] = set()

    def extend(current: tuple[tuple[ProfileSpec, int], ...], first: int) -> None:
        found.add(tuple(sorted((s.name, start) for s, start in current)))
        for i in range(first, len(options)):
            candidate = (*current, options[i])
            if oracle_valid(table, candidate):
                extend(candidate, i + 1)

    extend((), 0)
    return frozenset(found)


@cache
def realisable_multisets(model: str) -> frozenset[tuple[str, ...]]:
    return frozenset(tuple(sorted(name for name, _ in layout)) for layout in all_layouts(model))


# --- the optimum -----------------------------------------------------------------------------

Demand = tuple[int, ...]


def optimal_served(
    model: str,
    idle_gpus: int,
    fixed_supply: Counter[str],
    demand: Sequence[tuple[int, str]],
) -> tuple[int, ...]:
    """Most requests servable, per priority class (highest first), lexicographically.

    demand: (priority, profile) per request. fixed_supply: free instances on busy GPUs."""
    classes = sorted({p for p, _ in demand}, reverse=True)
    keys = sorted({(p, name) for p, name in demand}, key=lambda k: (-k[0], k[1]))
    counts = Counter(demand)
    profiles = sorted({name for _, name in keys})

    def allocate(supply: Counter[str], left: Demand) -> tuple[Demand, tuple[int, ...]]:
        """Serve higher classes first from a supply; returns (demand left, served per class)."""
        remaining = list(left)
        served = dict.fromkeys(classes, 0)
        stock = Counter(supply)
        for i, (priority, name) in enumerate(keys):
            used = min(stock[name], remaining[i])
            stock[name] -= used
            remaining[i] -= used
            served[priority] += used
        return tuple(remaining), tuple(served[c] for c in classes)

    start, fixed_served = allocate(fixed_supply, tuple(counts[k] for k in keys))
    # Only the requested profiles matter; cap each multiset at the demand to dedupe options.
    total = Counter(name for _, name in demand)
    options = {
        tuple(min(Counter(m)[name], total[name]) for name in profiles)
        for m in realisable_multisets(model)
    }
    supplies = [Counter(dict(zip(profiles, o, strict=True))) for o in options]

    @cache
    def best(gpus: int, left: Demand) -> tuple[int, ...]:
        zero = tuple(0 for _ in classes)
        if gpus == 0 or not any(left):
            return zero
        result = zero
        for supply in supplies:
            after, served = allocate(supply, left)
            if after == left:
                continue
            rest = best(gpus - 1, after)
            result = max(result, tuple(a + b for a, b in zip(served, rest, strict=True)))
        return result

    return tuple(a + b for a, b in zip(fixed_served, best(idle_gpus, start), strict=True))


# --- streams ---------------------------------------------------------------------------------

# Agent-heavy mix by profile class; a model without a class draws again.
MIX = (("1g", 40), ("1g.2x", 8), ("2g", 20), ("3g", 15), ("4g", 5), ("7g", 12))
MODELS = ("H100-80GB", "A100-SXM4-40GB", "H200-141GB", "A30-24GB")


def class_profiles(table: ModelTable) -> dict[str, str]:
    result = {}
    for spec in table.profiles:
        if spec.media_extensions:
            continue
        double = spec.compute_slices == 1 and spec.memory_slices == 2
        result["1g.2x" if double else f"{spec.compute_slices}g"] = spec.name
    return result


@dataclass(frozen=True)
class Arrival:
    job_id: str
    profile: str
    lifetime: int  # rounds
    priority: int = 0


@dataclass(frozen=True)
class Stream:
    model: str
    gpus: int
    rounds: tuple[tuple[Arrival, ...], ...]


def make_stream(
    seed: int,
    rounds: int,
    *,
    gpus: int | None = None,
    model: str | None = None,
    priorities: Sequence[int] = (0,),
    random_mix: bool = False,
) -> Stream:
    """random_mix: each stream draws its own class weights (0-9 each) instead of MIX."""
    rng = random.Random(seed)
    model = model or rng.choice(MODELS)
    gpus = gpus or rng.randint(1, 8)
    names = class_profiles(table_of(model))
    weighted = [(c, rng.randint(0, 9) if random_mix else w) for c, w in MIX]
    mix = [(names[c], w) for c, w in weighted if c in names and w] or [(names["1g"], 1)]
    profiles, weights = zip(*mix, strict=True)
    batches = []
    for r in range(rounds):
        # About one arrival per GPU per round at ~4 rounds each: offered load above capacity.
        batch = tuple(
            Arrival(
                f"s{seed}r{r}j{j}",
                rng.choices(profiles, weights)[0],
                rng.randint(1, 7),
                rng.choice(priorities),
            )
            for j in range(rng.randint(0, 2 * gpus))
        )
        batches.append(batch)
    return Stream(model, gpus, tuple(batches))


@dataclass
class Result:
    requests: int = 0
    served: int = 0
    optimal: int = 0
    served_by_class: Counter[int] = field(default_factory=Counter)
    optimal_by_class: Counter[int] = field(default_factory=Counter)
    relayouts: int = 0
    violations: list[str] = field(default_factory=list)
    # Rounds where the policy served less (or, impossibly, more) than the optimum, comparing
    # the served counts per priority class, highest class first.
    rounds_short: int = 0
    rounds_beyond: int = 0


def _node(stream: Stream, gpus: Sequence[tuple[MigInstance, ...]]) -> Node:
    return Node(
        "n",
        stream.model,
        stream.gpus,
        mig=True,
        mig_gpus=tuple(Gpu(i, layout) for i, layout in enumerate(gpus)),
    )


FLOWS = ("plan-first", "take-first")


def run_stream(stream: Stream, *, flow: str = "plan-first", with_optimum: bool = True) -> Result:
    """Play the stream through MigIndex; compare every round with the optimum from the same
    state, and check every layout and that no GPU in use was re-laid out.

    plan-first: plan() with the whole batch, then take() each. take-first: take() each,
    plan() the failures, take() them again. Both count relayouts as applied at once, as the
    simulator does (it applies them and schedules again at the same instant)."""
    result = Result()
    layouts: list[tuple[MigInstance, ...]] = [() for _ in range(stream.gpus)]
    ends: dict[str, int] = {}
    for r, batch in enumerate(stream.rounds):
        done = {job for job, end in ends.items() if end <= r}
        layouts = [
            tuple(
                MigInstance(i.profile, i.start, i.size, None) if i.job_id in done else i
                for i in layout
            )
            for layout in layouts
        ]
        for job in done:
            del ends[job]
        busy = [any(i.job_id for i in layout) for layout in layouts]
        if with_optimum:
            supply = Counter(
                i.profile
                for layout, used in zip(layouts, busy, strict=True)
                if used
                for i in layout
                if i.job_id is None
            )
            optimum = optimal_served(
                stream.model,
                busy.count(False),
                supply,
                [(a.priority, a.profile) for a in batch],
            )
            classes = sorted({a.priority for a in batch}, reverse=True)
            result.optimal += sum(optimum)
            result.optimal_by_class.update(dict(zip(classes, optimum, strict=True)))

        index = MigIndex([_node(stream, layouts)])
        ordered = sorted(batch, key=lambda a: -a.priority)  # the scheduler's order
        requests = [MigRequest(a.job_id, a.profile, priority=a.priority) for a in ordered]
        if flow == "plan-first":
            result.relayouts += len(index.plan(requests))
            failed = [a for a in ordered if index.take(a.profile, None, None, a.job_id) is None]
        else:
            failed = [a for a in ordered if index.take(a.profile, None, None, a.job_id) is None]
            if failed:
                left = {a.job_id for a in failed}
                result.relayouts += len(index.plan([q for q in requests if q.job_id in left]))
                failed = [a for a in failed if index.take(a.profile, None, None, a.job_id) is None]
        lost = {a.job_id for a in failed}
        served = [a for a in batch if a.job_id not in lost]
        result.requests += len(batch)
        result.served += len(served)
        result.served_by_class.update(a.priority for a in served)
        if with_optimum:
            # Per class, highest first: the order the optimum maximises in.
            mine = tuple(sum(1 for a in served if a.priority == c) for c in classes)
            result.rounds_short += mine < optimum
            result.rounds_beyond += mine > optimum
        for a in served:
            ends[a.job_id] = r + a.lifetime

        new = [index.layout("n", g) for g in range(stream.gpus)]
        for g, (old, now) in enumerate(zip(layouts, new, strict=True)):
            problems = validate_layout(stream.model, now)
            if problems:
                result.violations.append(f"round {r} GPU {g}: {problems}")
            if busy[g] and [(i.profile, i.start) for i in old] != [
                (i.profile, i.start) for i in now
            ]:
                result.violations.append(f"round {r} GPU {g}: re-laid out while in use")
        layouts = new
    return result


# --- the benchmark ---------------------------------------------------------------------------


def _ratio(a: int, b: int) -> float:
    return a / b if b else 1.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--by-size", action="store_true", help="also one row per GPU count")
    parser.add_argument("--scale", action="store_true", help="time plan/take on large clusters")
    args = parser.parse_args(argv)
    if args.scale:
        return scale(args.seed)

    print(f"streams={args.streams} rounds={args.rounds} seed={args.seed}\n")
    workloads = (
        ("one class", (0,), False),
        ("two classes", (10, 1000), False),
        ("one class, random mix", (0,), True),
    )
    streams = {
        workload: [
            make_stream(args.seed * 100_003 + k, args.rounds, priorities=p, random_mix=mixed)
            for k in range(args.streams)
        ]
        for workload, p, mixed in workloads
    }
    print(
        "| flow | workload | requests | optimum | served | served/optimum | high class "
        "served/optimum | rounds short | relayouts | violations | median ms/round |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for flow in FLOWS:
        for workload, *_ in workloads:
            results, timings = [], []
            for stream in streams[workload]:
                began = time.perf_counter()
                run_stream(stream, flow=flow, with_optimum=False)
                timings.append((time.perf_counter() - began) / args.rounds * 1e3)
                results.append(run_stream(stream, flow=flow))
            _row(flow, workload, results, timings)
            if args.by_size:
                groups: dict[int, list[Result]] = {}
                for stream, result in zip(streams[workload], results, strict=True):
                    groups.setdefault(stream.gpus, []).append(result)
                for gpus, group in sorted(groups.items()):
                    _row(flow, f"{workload}, {gpus} GPU(s)", group, [])
    return 0


def scale(seed: int, repeats: int = 7) -> int:
    """Median wall time of building the index, plan() over all requests, and one take() per
    request, on one cluster of 8-GPU H100 nodes where half the GPUs run a 3g job."""
    print("| MIG GPUs | requests | MigIndex() ms | plan() ms | all take() ms | relayouts |")
    print("|---|---|---|---|---|---|")
    for nodes, count in ((10, 50), (50, 200), (100, 500), (100, 2000)):
        rng = random.Random(seed)
        busy = (MigInstance("3g.40gb", 4, 4, "x"), MigInstance("1g.10gb", 0, 1))
        cluster = [
            Node(
                f"n{n}",
                "H100-80GB",
                8,
                mig=True,
                mig_gpus=tuple(Gpu(g, busy if rng.random() < 0.5 else ()) for g in range(8)),
            )
            for n in range(nodes)
        ]
        names = class_profiles(table_of("H100-80GB"))
        profiles, weights = zip(*((names[c], w) for c, w in MIX), strict=True)
        requests = [
            MigRequest(f"j{i}", rng.choices(profiles, weights)[0], priority=rng.choice((1, 2, 3)))
            for i in range(count)
        ]
        build, planning, taking = [], [], []
        relayouts = 0
        for _ in range(repeats):
            t0 = time.perf_counter()
            index = MigIndex(cluster)
            t1 = time.perf_counter()
            relayouts = len(index.plan(requests))
            t2 = time.perf_counter()
            for q in requests:
                index.take(q.profile, None, None, q.job_id)
            t3 = time.perf_counter()
            build.append(t1 - t0)
            planning.append(t2 - t1)
            taking.append(t3 - t2)
        ms = [f"{statistics.median(x) * 1e3:.1f}" for x in (build, planning, taking)]
        print(f"| {nodes * 8} | {count} | {' | '.join(ms)} | {relayouts} |")
    return 0


def _row(flow: str, workload: str, results: Sequence[Result], timings: Sequence[float]) -> None:
    requests = sum(r.requests for r in results)
    optimum = sum(r.optimal for r in results)
    served = sum(r.served for r in results)
    high = "-"
    if any(r.optimal_by_class[1000] for r in results):
        hi_served = sum(r.served_by_class[1000] for r in results)
        hi_optimum = sum(r.optimal_by_class[1000] for r in results)
        high = f"{hi_served}/{hi_optimum} = {_ratio(hi_served, hi_optimum):.2%}"
    median = f"{statistics.median(timings):.3f}" if timings else "-"
    print(
        f"| {flow} | {workload} | {requests} | {optimum} | {served} "
        f"| {_ratio(served, optimum):.2%} | {high} | {sum(r.rounds_short for r in results)} "
        f"| {sum(r.relayouts for r in results)} | {sum(len(r.violations) for r in results)} "
        f"| {median} |"
    )


if __name__ == "__main__":
    raise SystemExit(main())
