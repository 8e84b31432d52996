"""Scheduling order: priority class, then fair share by progressive filling, then FIFO.

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

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import sub
from typing import TypeVar

from .types import RunningJob, Team

K = TypeVar("K", bound=Hashable)


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
    """Nominal quota left per quota key, and each job's key and demand in GPUs."""

    left: Mapping[Hashable, float]
    keys: Sequence[Hashable]
    demands: Sequence[float]


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
    fifo = _fifo(submits, ids)
    neg = [-v for v in values]
    by_class = sorted(fifo, key=neg.__getitem__)  # stable: FIFO within a class
    tiers = [0] * n
    if room is not None:
        keys, demands = room.keys, room.demands
        for key, members in _grouped(by_class, keys).items():
            # The same subtractions in the same order as one running total per key.
            rests = accumulate([demands[i] for i in members], sub, initial=room.left.get(key, 0.0))
            next(rests)
            for i, rest in zip(members, rests, strict=True):
                tiers[i] = 0 if rest >= -1e-9 else 1
    if standing is None and room is None:
        return by_class, tiers
    before = [0.0] * n
    if standing is not None:
        for (team, _), members in _grouped(fifo, list(zip(teams, values, strict=True))).items():
            st = standing[team]
            steps = [increments[i] / st.share for i in members]
            # A job's standing is the total before it: the last total is nobody's.
            for i, done in zip(members, accumulate(steps, initial=st.base), strict=False):
                before[i] = done
    # Sorting by_class stably by (tier, -value, before), as a few float sorts: one per
    # (tier, -value) pair, which C sorts fastest.
    parts = _grouped(by_class, list(zip(tiers, neg, strict=True)))
    result: list[int] = []
    for part in sorted(parts):
        result += sorted(parts[part], key=before.__getitem__)
    return result, tiers


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


def _grouped(indices: Iterable[int], keys: Sequence[K]) -> dict[K, list[int]]:
    """The indices per key, each list in the order given. Keys are numbered in one pass in
    index order: hashing them in a scattered order costs a cache miss each at 100k jobs."""
    number: dict[K, int] = {}
    ids = [number.setdefault(k, len(number)) for k in keys]
    lists: list[list[int]] = [[] for _ in number]
    for i in indices:
        lists[ids[i]].append(i)
    return {k: lists[j] for k, j in number.items() if lists[j]}
