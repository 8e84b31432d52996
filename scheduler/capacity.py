"""Free whole-GPU capacity, indexed by (model, pool, cluster) and by free count.

One FreeIndex is built per cycle from the nodes and the running jobs, then mutated as the
cycle starts jobs, holds GPUs for reservations and keeps them for preemptors. Each group
keeps one bucket per free count, so best fit ("the node with the fewest free GPUs that
still fits") is a scan of at most gpus-per-node buckets instead of all nodes. A MIG node is
there too, with no whole GPU (its slices are mig.py's): a job of no GPU may run on it,
taking neither GPU nor slice.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from .types import Node, NodeAlloc, RunningJob

_name = attrgetter("name")

# (gpu model, pool or "", cluster or ""): a gang never spans pools or clusters.
GroupKey = tuple[str, str, str]


@dataclass(slots=True)
class NodeState:
    name: str
    group: GroupKey
    total: int
    free: list[int]  # free GPU indices, ascending
    held: list[int]  # free GPUs held for a reservation: a job ending before it may use them
    # Free GPUs kept for a job this cycle preempts for, beside its victims': no job takes
    # them (backfill would, judged by a reservation's start, and be preempted by it next).
    kept: list[int] = field(default_factory=list)


class Group:
    """The up nodes of one (model, pool, cluster)."""

    def __init__(self, key: GroupKey, width: int, whole: bool = True) -> None:
        self.key = key
        self.width = width  # the largest node's GPU count
        # It has a whole-GPU node; else only MIG nodes, which serve only jobs of no GPU.
        self.whole = whole
        self.sizes: dict[int, int] = {}  # node size -> how many nodes have it
        # buckets[k] = nodes with exactly k free GPUs (dict as an insertion-ordered set).
        self.buckets: list[dict[str, None]] = [{} for _ in range(width + 1)]

    def count_at_least(self, g: int) -> int:
        return sum(len(b) for b in self.buckets[g:])

    def max_fitting_nodes(self, g: int) -> int:
        """How many nodes could ever hold g GPUs (idle capacity, ignoring what runs)."""
        return sum(n for size, n in self.sizes.items() if size >= g)


class FreeIndex:
    def __init__(self, nodes: Iterable[Node], running: Iterable[RunningJob]) -> None:
        self.nodes: dict[str, NodeState] = {}
        self.groups: dict[GroupKey, Group] = {}
        width: dict[GroupKey, int] = {}
        whole: set[GroupKey] = set()
        ups = sorted((n for n in nodes if n.state == "up"), key=_name)
        for n in ups:
            key = (n.gpu_model, n.pool or "", n.cluster or "")
            size = 0 if n.mig else n.gpus
            if not n.mig:
                whole.add(key)
            width[key] = max(width.get(key, 0), size)
            self.nodes[n.name] = NodeState(n.name, key, size, list(range(size)), [])
        for key in sorted(width):
            self.groups[key] = Group(key, width[key], key in whole)
        used: dict[str, set[int]] = {}
        for job in running:
            for alloc in job.placement.allocs:
                if alloc.gpus and alloc.node in self.nodes:
                    taken = used.get(alloc.node)
                    if taken is None:
                        used[alloc.node] = set(alloc.gpus)
                    else:
                        taken.update(alloc.gpus)
        for name, gpus in used.items():
            st = self.nodes[name]
            st.free = [g for g in st.free if g not in gpus]
        for st in self.nodes.values():
            group = self.groups[st.group]
            group.sizes[st.total] = group.sizes.get(st.total, 0) + 1
            group.buckets[len(st.free)][st.name] = None

    def models(self, no_gpu: bool = False) -> list[str]:
        """The models of whole-GPU nodes; `no_gpu`: of MIG nodes too (for jobs of no GPU)."""
        return sorted({k[0] for k, g in self.groups.items() if no_gpu or g.whole})

    def groups_for(
        self,
        model: str | None,
        pool: str | None,
        cluster: str | None = None,
        no_gpu: bool = False,
    ) -> list[Group]:
        """The groups of whole-GPU nodes (`no_gpu`: and of MIG nodes only) that match."""
        return [
            g
            for k, g in self.groups.items()
            if (model is None or k[0] == model)
            and (pool is None or k[1] == pool)
            and (cluster is None or k[2] == cluster)
            and (no_gpu or g.whole)
        ]

    def _move(self, st: NodeState, before: int) -> None:
        buckets = self.groups[st.group].buckets
        del buckets[before][st.name]
        buckets[len(st.free)][st.name] = None

    def take(self, name: str, count: int, from_held: bool = False) -> tuple[int, ...]:
        """Allocate `count` GPUs on a node: free ones first, then (if allowed) held ones."""
        st = self.nodes[name]
        before = len(st.free)
        got = st.free[:count]
        del st.free[:count]
        if from_held and len(got) < count:
            extra = st.held[: count - len(got)]
            del st.held[: len(extra)]
            got = sorted(got + extra)
        self._move(st, before)
        return tuple(got)

    def hold(self, name: str, gpus: Sequence[int]) -> None:
        """Hold these free GPUs for a reservation (NodeState.held)."""
        self._set_aside(self.nodes[name], gpus, self.nodes[name].held)

    def keep(self, name: str, gpus: Sequence[int]) -> None:
        """Take these free GPUs out of reach of every job this cycle (NodeState.kept)."""
        self._set_aside(self.nodes[name], gpus, self.nodes[name].kept)

    def _set_aside(self, st: NodeState, gpus: Sequence[int], into: list[int]) -> None:
        before = len(st.free)
        wanted = set(gpus)
        into.extend(g for g in st.free if g in wanted)
        st.free = [g for g in st.free if g not in wanted]
        self._move(st, before)

    def held_counts(self, names: Iterable[str]) -> dict[str, int]:
        return {n: len(self.nodes[n].held) for n in names if self.nodes[n].held}


def pick_nodes(
    index: FreeIndex, group: Group, g: int, n: int, extra: Mapping[str, int]
) -> list[str] | None:
    """Best fit: the n nodes of a group with the fewest available GPUs that still hold g.

    `extra` adds GPUs some nodes would have available beyond their free ones (held GPUs a
    short job may borrow, or GPUs that victims would release).
    """
    boosted: list[tuple[int, str]] = []
    for name, more in extra.items():
        st = index.nodes.get(name)
        if st is not None and st.group == group.key and len(st.free) + more >= g:
            boosted.append((len(st.free) + more, name))
    if group.count_at_least(g) + len(boosted) < n:
        return None
    # Past the largest boosted count, more bucket nodes cannot displace the ones picked.
    enough_at = max((b[0] for b in boosted), default=0)
    picked: list[tuple[int, str]] = []
    for count in range(g, group.width + 1):
        if len(picked) >= n and count > enough_at:
            break
        for name in group.buckets[count]:
            if name not in extra:
                picked.append((count, name))
                if len(picked) >= n and count >= enough_at:
                    break
    picked.extend(boosted)
    picked.sort(key=lambda p: p[0])
    return [p[1] for p in picked[:n]] if len(picked) >= n else None


@dataclass(frozen=True)
class Fit:
    group: Group
    nodes: list[str]
    leftover: int


def best_fit(
    index: FreeIndex, groups: Sequence[Group], g: int, n: int, extra: Mapping[str, int]
) -> Fit | None:
    """The group whose best-fit nodes leave the fewest GPUs idle; ties go to group order."""
    best: Fit | None = None
    for group in groups:
        if g > group.width:
            continue
        names = pick_nodes(index, group, g, n, extra)
        if names is None:
            continue
        leftover = sum(len(index.nodes[m].free) + extra.get(m, 0) - g for m in names)
        if best is None or leftover < best.leftover:
            best = Fit(group, names, leftover)
            if leftover == 0:
                break
    return best


def fit_by_end(
    index: FreeIndex,
    groups: Sequence[Group],
    g: int,
    ends: float,
    horizon: Mapping[str, float],
) -> Fit | None:
    """One node for a single-node job of g GPUs that ends at `ends` (inf: no limit), chosen
    so that nodes empty whole: a job that holds a node back from emptying is what keeps a
    gang's nodes from ever coming free, and saturated queues then idle on scattered GPUs.

    `horizon` is when each node's running jobs end (the latest planned end; inf: one has no
    limit). First a partly used node the job does not keep busy longer (its end is at or
    before the horizon), fewest free GPUs first, then the earliest horizon; else the partly
    used node it extends least; an idle node last (best fit, as best_fit would choose).
    It may read every partly used node (best_fit stops at the first that fits); it stops at
    the first bucket that holds a node the job does not outlast.
    """
    # (0, free GPUs, horizon, name) for a node it does not extend; (1, extension, free GPUs,
    # name) for one it does: the smallest key wins.
    best_key: tuple[int, float, float, str] | None = None
    best: tuple[Group, str, int] | None = None
    for group in groups:
        if g > group.width:
            continue
        for count in range(g, group.width + 1):
            within = False
            for name in group.buckets[count]:
                if count == index.nodes[name].total:
                    continue  # idle: the last resort
                h = horizon.get(name, -math.inf)
                if ends <= h:
                    key = (0, float(count), h, name)
                    within = True
                else:
                    key = (1, ends - h, float(count), name)
                if best_key is None or key < best_key:
                    best_key, best = key, (group, name, count)
            if within:
                break  # later buckets have more free GPUs: none of theirs can do better
    if best is None:
        return best_fit(index, groups, g, 1, {})
    group, name, count = best
    return Fit(group, [name], count - g)


def fit_on(
    index: FreeIndex, groups: Sequence[Group], g: int, n: int, names: Sequence[str]
) -> Fit | None:
    """n of `names` in one group with g free GPUs each, fewest free first; None if they
    cannot hold the job (it is then placed as any other)."""
    for group in groups:
        here = sorted(
            (len(st.free), st.name)
            for st in (index.nodes.get(name) for name in names)
            if st is not None and st.group == group.key and len(st.free) >= g
        )
        if len(here) >= n:
            picked = here[:n]
            return Fit(group, [name for _, name in picked], sum(c - g for c, _ in picked))
    return None


def allocate(index: FreeIndex, fit: Fit, g: int, from_held: bool) -> tuple[NodeAlloc, ...]:
    return tuple(NodeAlloc(name, index.take(name, g, from_held)) for name in fit.nodes)
