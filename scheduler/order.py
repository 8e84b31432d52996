"""Scheduling order: quota tier, priority class, then fair share by progressive filling,
then FIFO. (Tier 0, first, holds the jobs that fit their team's nominal quota: see order().)

Within a class, the next job comes from the team furthest below its fair share (Armada's
progressive filling). A team's standing is

    standing = dominant_share / S + (1 - 2^(-U/S))

where S is the team's normalized weight, dominant_share the largest fraction of any GPU
model the team runs now, and U its share of all decayed past usage (Slurm's fair-share
factor 2^(-U/S), half-life from the policy). Taking a job advances the team's standing by the
job's share of its model divided by S, so the merge of the teams' FIFO queues by "standing
before this job" is one sort: equal teams alternate whatever their submit order.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby

from .types import RunningJob, Team


@dataclass(frozen=True)
class Standing:
    base: float  # the standing before any pending job is taken
    share: float  # normalized weight S


def decayed_usage(team: Team, now: float, half_life_s: float) -> float:
    total = 0.0
    for b in team.usage:
        age = max(0.0, now - b.at)  # a bucket from the future (clock skew) is not grown
        total += b.gpu_seconds * 2.0 ** (-age / half_life_s)
    return total


def standings(
    teams: Sequence[Team],
    extra_teams: Iterable[str],
    running: Iterable[tuple[RunningJob, float]],
    capacity: Mapping[str, int],
    now: float,
    half_life_s: float,
) -> dict[str, Standing]:
    """Standing per team; teams seen only in the queue count with weight 1 and no usage."""
    weights = {t.name: max(t.weight, 0.0) for t in teams}
    for name in extra_teams:
        weights.setdefault(name, 1.0)
    total_w = sum(weights.values()) or 1.0
    usage = {t.name: decayed_usage(t, now, half_life_s) for t in teams}
    total_u = sum(usage.values())
    used: dict[tuple[str, str], float] = {}
    for job, gpus in running:
        k = (job.request.team, job.gpu_model)
        used[k] = used.get(k, 0.0) + gpus
    dominant: dict[str, float] = {}
    for (team, model), gpus in used.items():
        cap = capacity.get(model, 0)
        if cap > 0:
            dominant[team] = max(dominant.get(team, 0.0), gpus / cap)
    result: dict[str, Standing] = {}
    for name, w in weights.items():
        # A zero weight still gets a (tiny) share so its jobs are ordered, last.
        s = max(w / total_w, 1e-9)
        u = usage.get(name, 0.0) / total_u if total_u > 0 else 0.0
        result[name] = Standing(dominant.get(name, 0.0) / s + 1.0 - 2.0 ** (-u / s), s)
    return result


@dataclass(frozen=True)
class Room:
    """Nominal quota left per quota key, and each job's key and demand in GPUs (each kind's,
    for order_kinds); `nominal` per key, where known: a job larger than it must borrow
    whatever runs, so it is tier 1 and takes none of the room from the jobs behind it (as
    the quota Ledger ignores such a job's demand)."""

    left: Mapping[Hashable, float]
    keys: Sequence[Hashable]
    demands: Sequence[float]
    nominal: Mapping[Hashable, float] = field(default_factory=dict)


def order_keys(
    teams: Sequence[str],
    values: Sequence[int],
    submits: Sequence[float],
    ids: Sequence[str],
    increments: Sequence[float],
    standing: Mapping[str, Standing] | None,
    room: Room | None = None,
) -> tuple[list[int], list[int]]:
    """Indices of the jobs in scheduling order, and each job's quota tier.

    `values` are priority-class values (all 0 to ignore classes); `increments` each job's
    share of its GPU model; `standing` None orders by submit time alone (no fair share).
    With `room`, a job's tier is 0 when it fits its team's nominal quota with the team's jobs
    taken in the team's own order (class, then FIFO), else 1; tier 0 comes first, as in
    Kueue: otherwise a job a team reclaimed GPUs for would see a higher-class borrower
    restart on them, and the reclaim would repeat.
    """
    n = len(ids)
    keys: Sequence[Hashable] = room.keys if room is not None else [None] * n
    demands = room.demands if room is not None else [0.0] * n
    numbers: dict[tuple[str, int, float, Hashable, float], int] = {}
    kind_of = [
        numbers.setdefault(k, len(numbers))
        for k in zip(teams, values, increments or [0.0] * n, keys, demands, strict=True)
    ]
    kinds = list(numbers)
    kind_room = None
    if room is not None:
        kind_room = Room(room.left, [k[3] for k in kinds], [k[4] for k in kinds], room.nominal)
    order, first_tier = order_kinds(
        kind_of,
        submits,
        ids,
        [k[0] for k in kinds],
        [k[1] for k in kinds],
        [k[2] for k in kinds],
        standing,
        kind_room,
    )
    tiers = [0] * n
    for i in order[first_tier:]:
        tiers[i] = 1
    return order, tiers


def order_kinds(
    kind_of: Sequence[int],
    submits: Sequence[float],
    ids: Sequence[str],
    teams: Sequence[str],
    values: Sequence[int],
    increments: Sequence[float],
    standing: Mapping[str, Standing] | None,
    room: Room | None = None,
    leading: Sequence[int] = (),
) -> tuple[list[int], int]:
    """order_keys for jobs numbered by kind: `kind_of` gives each job's kind, and the teams,
    values, increments and the room's keys and demands are per kind. Returns the order and
    how many jobs lead it in tier 0 (tier 0 comes first). The jobs `leading` (indices) go
    first among those of their tier and class, in FIFO order: jobs that preempted in an
    earlier cycle, whose victims are leaving or have left (as Kubernetes' nominated pods go
    before others of their priority on the nodes preempted for them).

    Jobs of one kind differ only in submit time and id, so after the FIFO sort the work reads
    small per-kind tables, and it walks FIFO positions rather than job indices: in position
    order memory is read in order, where job indices in another order miss the cache at
    every step at 100k jobs.
    """
    n = len(ids)
    fifo = _fifo(submits, ids)
    kinds = list(map(kind_of.__getitem__, fifo))  # by FIFO position
    kind_neg = [-v for v in values]
    neg = list(map(kind_neg.__getitem__, kinds))
    by_class = sorted(range(n), key=neg.__getitem__)  # stable: FIFO within a class
    if standing is None and room is None and not leading:
        return list(map(fifo.__getitem__, by_class)), n
    # In by_class order, the jobs of one (team, class) come in FIFO order and those of one
    # quota key in the team's own order: one pass keeps a running total for each. Without
    # fair share every standing stays 0.0; without a room every key has room to spare.
    kind_group = [0] * len(values)
    totals = [0.0]
    steps = [0.0] * len(values)
    if standing is not None:
        groups: dict[tuple[str, int], int] = {}
        kind_group = [groups.setdefault(tv, len(groups)) for tv in zip(teams, values, strict=True)]
        totals = [standing[team].base for team, _ in groups]
        steps = [inc / standing[team].share for team, inc in zip(teams, increments, strict=True)]
    kind_key = [0] * len(values)
    rests = [math.inf]
    demands: Sequence[float] = [0.0] * len(values)
    oversized = [False] * len(values)
    if room is not None:
        key_numbers: dict[Hashable, int] = {}
        kind_key = [key_numbers.setdefault(key, len(key_numbers)) for key in room.keys]
        rests = [room.left.get(key, 0.0) for key in key_numbers]
        demands = room.demands
        oversized = [
            d > room.nominal.get(key, math.inf) + 1e-9
            for key, d in zip(room.keys, demands, strict=True)
        ]
    before = [0.0] * n
    first: list[int] = []  # tier 0, in by_class order
    second: list[int] = []
    for p, k in zip(by_class, map(kinds.__getitem__, by_class), strict=True):
        # A job's standing is its (team, class)'s total before it, from the team's base.
        g = kind_group[k]
        done = totals[g]
        before[p] = done
        totals[g] = done + steps[k]
        if oversized[k]:
            second.append(p)
            continue
        # The nominal quota its key has left once it and the jobs before it are taken.
        q = kind_key[k]
        rest = rests[q] - demands[k]
        rests[q] = rest
        (first if rest >= -1e-9 else second).append(p)
    if leading:
        wanted = set(leading)
        for p, i in enumerate(fifo):
            if i in wanted:
                before[p] = -math.inf
    # Sorting by_class stably by (tier, -value, before), as a few float sorts: one per
    # (tier, -value) pair, which C sorts fastest.
    result: list[int] = []
    for part in (first, second):
        for _, run in groupby(part, key=neg.__getitem__):
            result += sorted(run, key=before.__getitem__)
    return list(map(fifo.__getitem__, result)), len(first)


def _fifo(submits: Sequence[float], ids: Sequence[str]) -> list[int]:
    """Indices by (submit time, id, index). A float key sorts in C's fast path; the runs of
    equal submit times, if any, are then put in (id, index) order."""
    fifo = sorted(range(len(ids)), key=submits.__getitem__)
    if len(set(submits)) == len(fifo):
        return fifo
    start = 0
    for end in range(1, len(fifo) + 1):
        if end == len(fifo) or submits[fifo[end]] != submits[fifo[start]]:
            if end - start > 1:
                fifo[start:end] = sorted(fifo[start:end], key=lambda i: (ids[i], i))
            start = end
    return fifo
