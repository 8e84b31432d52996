"""Time: when running jobs end, EASY reservations, and estimated starts.

Ends come from time limits (a job without one never ends as far as planning knows) and
from preemption grace periods. A reservation is the earliest instant the first blocked job
fits, with the nodes it will use; the GPUs it needs that are free now are held so that a
later job may take them only if its time limit ends before the reservation starts.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter

from .capacity import FreeIndex, Group, GroupKey
from .types import NodeAlloc, RunningJob


def end_time(job: RunningJob, now: float, grace_s: float) -> float | None:
    limit, since = job.request.time_limit_s, job.preempting_since
    if limit is not None:
        end = job.start_time + limit
        if since is not None:
            end = min(end, since + grace_s)
    elif since is not None:
        end = since + grace_s
    else:
        return None
    # An overdue job is about to be stopped by its backend: it ends "now" for planning.
    return max(now, end)


# (at, node, GPUs): a plain tuple, one per running allocation every cycle (a NamedTuple's
# constructor is a Python call).
Release = tuple[float, str, tuple[int, ...]]


def releases(allocations: Iterable[tuple[float | None, Sequence[NodeAlloc]]]) -> list[Release]:
    out = [(at, a.node, a.gpus) for at, allocs in allocations if at is not None for a in allocs]
    out.sort(key=itemgetter(0, 1))
    return out


@dataclass(frozen=True)
class Reservation:
    job_id: str
    start: float
    models: frozenset[str]
    nodes: tuple[str, ...]
    group: GroupKey  # the (model, pool, cluster) of its nodes


def reserve(
    index: FreeIndex,
    groups: Sequence[Group],
    g: int,
    n: int,
    events: Sequence[Release],
    job_id: str,
) -> Reservation | None:
    """The earliest start of an n x g job given the release events, holding the free GPUs
    it will need on the nodes it will use; None when no known release makes it fit."""
    found = _scan(index, groups, g, n, events)
    if found is None:
        return None
    at, group, avail, released = found
    return _hold(index, group, g, n, avail, released, at, job_id)


def earliest_start(
    index: FreeIndex, groups: Sequence[Group], g: int, n: int, events: Sequence[Release]
) -> float | None:
    """When an n x g job that does not fit now first would, as running jobs end by their
    time limits (holding nothing); None when no known release makes it fit."""
    found = _scan(index, groups, g, n, events)
    return None if found is None else found[0]


def _scan(
    index: FreeIndex, groups: Sequence[Group], g: int, n: int, events: Sequence[Release]
) -> tuple[float, Group, dict[str, int], dict[str, list[int]]] | None:
    keys = {grp.key: grp for grp in groups}
    avail: dict[str, int] = {}
    released: dict[str, list[int]] = {}
    fitting = {key: grp.count_at_least(g) for key, grp in keys.items()}
    i = 0
    while i < len(events):
        at = events[i][0]
        while i < len(events) and events[i][0] == at:
            _, node, gpus = events[i]
            i += 1
            st = index.nodes.get(node)
            if st is None or st.group not in keys:
                continue
            before = avail.get(node, len(st.free))
            avail[node] = before + len(gpus)
            released.setdefault(node, []).extend(gpus)
            if before < g <= avail[node]:
                fitting[st.group] += 1
        for key, grp in keys.items():
            if fitting[key] >= n:
                return at, grp, avail, released
    return None


def _hold(
    index: FreeIndex,
    group: Group,
    g: int,
    n: int,
    avail: dict[str, int],
    released: dict[str, list[int]],
    at: float,
    job_id: str,
) -> Reservation:
    candidates = [
        (avail.get(name, len(st.free)), name)
        for name, st in index.nodes.items()
        if st.group == group.key and avail.get(name, len(st.free)) >= g
    ]
    candidates.sort()
    chosen = tuple(name for _, name in candidates[:n])
    for name in chosen:
        # Use GPUs that will be released first: those are not free now anyway.
        need = g - len(released.get(name, ()))
        if need > 0:
            index.hold(name, index.nodes[name].free[:need])
    return Reservation(job_id, at, frozenset({group.key[0]}), chosen, group.key)


# Sums of MIG fractions (1/7 ...) are not exact: a fluid compares within this.
EPS = 1e-9


class Fluid:
    """A capacity group's GPUs as a fluid for estimated starts: waiting jobs take GPUs in
    order as running jobs release them (a negative release cancels one moved to another
    time). It ignores node boundaries, so it is an estimate."""

    def __init__(self, free: float, releases: Iterable[tuple[float, float]], now: float) -> None:
        self.free = free
        self.clock = now
        self.heap = list(releases)
        heapq.heapify(self.heap)
        self._undo: list[tuple[float, float]] = []
        self._saved = (free, now)

    def earliest(self, gpus: float) -> float | None:
        """Advance to the first instant with `gpus` free; undo() puts it back."""
        self._saved = (self.free, self.clock)
        self._undo = []
        while self.free < gpus - EPS and self.heap:
            at, count = heapq.heappop(self.heap)
            self._undo.append((at, count))
            self.free += count
            self.clock = max(self.clock, at)
        return self.clock if self.free >= gpus - EPS else None

    def start(self, gpus: float, limit_s: float | None) -> float | None:
        """earliest() and, when the GPUs come free, take() there; nothing to undo."""
        heap, free, clock = self.heap, self.free, self.clock
        while free < gpus - EPS and heap:
            at, count = heap[0]
            free += count
            if at > clock:
                clock = at
            if free >= gpus - EPS and limit_s is not None:
                # The last release it needs makes way for its own: one sift, not two.
                heapq.heapreplace(heap, (clock + limit_s, gpus))
                self.free, self.clock = free - gpus, clock
                return clock
            heapq.heappop(heap)
        self.clock = clock
        if free < gpus - EPS:
            self.free = free
            return None
        self.free = free - gpus
        if limit_s is not None:
            heapq.heappush(heap, (clock + limit_s, gpus))
        return clock

    def undo(self) -> None:
        for item in self._undo:
            heapq.heappush(self.heap, item)
        self.free, self.clock = self._saved
        self._undo = []

    def take(self, gpus: float, limit_s: float | None, at: float | None = None) -> None:
        """Hold `gpus` from the clock (or from `at`, for a job that starts now) for limit_s."""
        self.free -= gpus
        self._undo = []
        if limit_s is not None:
            heapq.heappush(self.heap, ((self.clock if at is None else at) + limit_s, gpus))
