"""Victim selection for reclaim and priority preemption.

Reclaim: a team whose job fits within its nominal quota takes GPUs back from other teams'
jobs that run on borrowed quota: any preemptible job of a team above its nominal, within the
GPUs it holds above it (the budget). As Kueue's minimal set, a victim may be taken while its
quota is still above its nominal before it (what the plan's earlier victims of that quota
took is less than the budget), so the last one may take the team below its nominal:
otherwise a job larger than what its team borrows is never reclaimed. That takes nothing of
the team's guarantee: what the reclaimer does not need stays free for it (the nominals add
up to at most the cluster), and the reclaimer, within its nominal, has no budget to be
reclaimed back from. A plan that keeps every team at its nominal or above still wins over
any that does not. The same budget, and rule, bound other teams' priority victims; only a
job within its team's nominal takes another team below its own (one that borrows could be
reclaimed back: ping-pong). Priority:
a job of a non-preemptible class (of any class with Policy.preemptible_classes_preempt)
preempts lower, preemptible classes of its own team, or of other teams where those run on
borrowed quota (while their quota is above its nominal, as for reclaim), unless the
victim ran less than the minimum run time or was already preempted
Policy.max_priority_preemptions times, and only when it is worth it (the engine's check):
the victims' GPU-seconds since they started at most Policy.preemption_loss_ratio times the
GPU-seconds the job would otherwise wait for room by running jobs' time limits. Reclaim is
never weighed so. Non-preemptible classes are never victims, nor are jobs protected after
their preemptions (Policy.protect_after_preemptions: the engine leaves them out of the
candidates). A job already in its grace
period is a free victim: its GPUs are coming back anyway.

Per node, the victims are taken in preference order (already leaving, borrowed, lowest
class, most recently started) until the job fits, then any the job fits without is spared (a
minimal set), first within the budget, and only where that fails past it. Where the budget
kept a victim out and the walk falls short, a search that looks ahead takes each in turn
unless no set would then remain (exact_victims): of 1, 1 and 4 with a budget of 2, for 5
GPUs, the first 1 and the 4; whenever a set exists, one is found. The cheapest nodes
win: those that take no team below its nominal, and, for a job within its team's nominal,
none of its own team's jobs (other teams' before the preemptor's own, as Kueue orders
candidates: its own team's victim would wait within that nominal and reclaim from them a
grace later), then those whose worst victim is borrowed
rather than guaranteed, then those whose highest victim class is lowest (Kueue and Slurm
take the lowest priority first), then those whose victims have run the fewest GPU-seconds
(the work a preemption may throw away: a gang that started an hour ago costs more than a
1-GPU job that started a minute ago, though each is one victim). A gang's n nodes are the
cheapest whose victims together stay under the rule: cheapest first, and where that leaves a
node out for the budget (a cheaper one spent it), the cheapest choice of n by a bounded
search (cheapest_combination), so that n nodes that stay under it together are not missed.
A job that displaces its own team's lower classes to fit its quota needs the quota they hold
too: a node is priced with the team's jobs elsewhere that must also go when its victims
there free too little of it."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

from .capacity import FreeIndex, Group
from .types import RunningJob


class Candidate:
    """A running job that may be a victim. A plain slotted class, not frozen: a cycle builds
    one per running job, and a dataclass's __init__ and __post_init__ cost twice the calls."""

    __slots__ = (
        "borrowed",
        "gpus",
        "id",
        "job",
        "leaving",
        "preference",
        "quota_key",
        "reclaimable",
        "size",
        "start",
        "team",
        "value",
    )

    def __init__(
        self,
        job: RunningJob,
        value: int,  # priority-class value
        borrowed: bool,
        leaving: bool,  # already in its grace period
        gpus: Mapping[str, int],  # GPUs it holds per node
        size: int,  # GPUs it holds on all its nodes
    ) -> None:
        r = job.request
        self.job = job
        self.value = value
        self.borrowed = borrowed
        self.leaving = leaving
        self.gpus = gpus
        # Copied out of the job: victim searches read them in their inner loop.
        self.id = r.id
        self.team = r.team
        self.start = job.start_time
        self.size = size
        # Set by the engine for a job of a team above its nominal: any of them may be
        # reclaimed, within the team's budget (the quota it names), borrowed label or not.
        self.quota_key: tuple[str, str] | None = None
        self.reclaimable = borrowed
        # The victim order on a node: leaving, borrowed, lowest class, most recently started.
        self.preference = (not leaving, not borrowed, value, -self.start, self.id)


@dataclass(frozen=True)
class Preemptor:
    team: str
    value: int
    reclaims: bool  # fits within its team's nominal quota
    quotas: bool  # False: no borrowing exists, any lower class is fair game
    min_runtime_s: float
    now: float
    own_team_only: bool = False  # making room in its own team's quota
    max_preemptions: float = math.inf  # a job preempted this often is no priority victim
    # May take lower classes for priority (Policy.preemptible_classes_preempt).
    priority: bool = True


@dataclass(frozen=True)
class Plan:
    group: Group
    nodes: tuple[str, ...]
    victims: tuple[tuple[Candidate, str], ...]  # (candidate, kind)


# A node priced for a plan: (below, worst, top, lost, not preferred, GPUs to free), its name,
# its victims. below: 0, 1 a victim takes another team below its nominal, 2 a reclaiming
# job takes its own team's.
Cost = tuple[tuple[int, int, float, float, bool, int], str, tuple[tuple[Candidate, str], ...]]
# A plan's: (below, worst, top, lost), as plan() compares them.
Score = tuple[int, int, float, float]
Found = tuple[Score, list[Cost], dict[str, tuple[Candidate, str]]]

# The combination search's bound, in nodes tried (each a look at its few victims): exact for
# small groups (every choice of 3 of 20 nodes is 1,329 tries), and on a 1,000-node group,
# whose pricing takes about as long as 2,000 tries (4 ms), a call costs at most about twice
# what it did without; past it, the cheapest choice found by then (cheapest first's, if any).
SEARCH_STEPS = 2_000


def plan(
    index: FreeIndex,
    groups: Sequence[Group],
    g: int,
    n: int,
    on_node: Mapping[str, Sequence[Candidate]],
    p: Preemptor,
    claimed: set[str],
    reserved: frozenset[str] = frozenset(),
    budget: Mapping[tuple[str, str], float] | None = None,
    prefer: frozenset[str] = frozenset(),
    quota: tuple[float, Sequence[Candidate]] | None = None,
) -> Plan | None:
    """The cheapest n nodes of one group on which victims make room for g GPUs each; of
    nodes that cost the same, those in `prefer` (where an earlier cycle preempted for the
    job) first.

    Nodes in `reserved` are left alone: their GPUs are promised to a job ahead. With a
    `budget`, a plan takes GPUs of other teams from each quota (Candidate.quota_key),
    reclaimed or preempted for priority, while the quota is still above its nominal
    (within_budget): at most one victim per quota takes it below, and a plan that takes none
    below costs less than any that does.

    With `quota` (a shortfall of GPUs and p's team's jobs that may make it up, in preference
    order), p also lacks quota: a plan takes as many of those as its victims of p's team do
    not free (quota_extras), and costs what they lose too, so that the nodes chosen are
    those whose victims free the most of it."""
    best: tuple[tuple[int, int, float, float], Plan] | None = None
    team, value, reclaims, quotas, priority = p.team, p.value, p.reclaims, p.quotas, p.priority
    now, min_runtime_s, own_team_only = p.now, p.min_runtime_s, p.own_team_only
    max_preemptions = p.max_preemptions
    for group in groups:
        if g > group.width:
            continue
        # Nodes that already have room cost nothing (but the quota p lacks); others need
        # victims.
        nobody: tuple[tuple[Candidate, str], ...] = ()
        worst0, top0, lost0 = 0, -math.inf, 0.0
        if quota is not None:
            extra = quota_extras(nobody, team, quota)
            if extra is None:
                continue  # p's team's jobs cannot free it, wherever p runs
            worst0, top0, lost0 = price(extra, now)
        costs: list[Cost] = [
            ((0, worst0, top0, lost0, name not in prefer, 0), name, nobody)
            for count in range(g, group.width + 1)
            for name in group.buckets[count]
            if name not in reserved
        ][:n]
        for name, cands in on_node.items():
            st = index.nodes.get(name)
            if st is None or st.group != group.key or st.total < g or len(st.free) >= g:
                continue
            if name in reserved:
                continue
            # First within the budget, in preference order.
            have, skipped = len(st.free), False
            taken: list[tuple[Candidate, str]] = []
            spent: dict[tuple[str, str], float] = {}  # of the budget, on this node
            for c in cands:
                if c.id in claimed:
                    continue
                if c.leaving:
                    taken.append((c, "leaving"))
                else:
                    # Which kind of victim c may be for p, if any (inline, as victims_on: this
                    # loop runs for every candidate of every search).
                    if own_team_only and c.team != team:
                        continue
                    if reclaims and c.reclaimable and c.team != team:
                        kind = "reclaim"
                    elif (
                        priority
                        and c.value < value
                        and now - c.start >= min_runtime_s
                        and c.job.preemptions < max_preemptions
                        and (not quotas or c.team == team or (c.borrowed and c.reclaimable))
                    ):
                        kind = "priority"
                    else:
                        continue
                    k = c.quota_key
                    if budget is not None and k is not None and c.team != team:
                        # Another team's job: within its quota's budget left.
                        left = budget.get(k, 0.0) - spent.get(k, 0.0)
                        if c.size > left + 1e-9:
                            skipped = True
                            continue
                        spent[k] = spent.get(k, 0.0) + c.size
                    taken.append((c, kind))
                have += c.gpus[name]
                if have >= g:
                    break
            over = False
            if have < g:
                if not skipped or budget is None:
                    continue
                # The walk took each victim the budget allowed: one it left out might have
                # been part of a set that frees enough (its budget spent on others). Search
                # exactly, still in preference order: within the budget, then, for a job
                # within its team's nominal only (it has no budget to be reclaimed back
                # from: no ping-pong), letting one victim per quota take it below.
                found = victims_on(cands, p, claimed)
                need = g - len(st.free)
                reached = exact_victims(name, found, need, budget, team)
                if reached is None and reclaims:
                    reached, over = exact_victims(name, found, need, budget, team, past=True), True
                if reached is None:
                    continue
                taken, have = reached[0], len(st.free) + reached[1]
            # Taken in preference order, an early small victim may prove unneeded once a
            # larger one is taken: spare, latest taken first, each the job fits without.
            for i in range(len(taken) - 1, -1, -1):
                c, kind = taken[i]
                if kind != "leaving" and have - c.gpus[name] >= g:
                    have -= c.gpus[name]
                    del taken[i]
            # 1: a victim takes a quota below its nominal (a node that does not is cheaper).
            # 2: a job that reclaims takes its own team's: displaced within the nominal the
            # job fits, it would wait there and reclaim from the borrowers a grace later
            # (two victims for one), so other teams' work goes first, as in Kueue.
            below = 0
            if over and budget is not None and not within_budget(budget, team, taken, strict=True):
                below = 1
            if reclaims and any(kind == "priority" and c.team == team for c, kind in taken):
                below = 2
            priced: Sequence[tuple[Candidate, str]] = taken
            if quota is not None:
                extra = quota_extras(taken, team, quota)
                if extra is None:
                    continue
                priced = [*taken, *extra]
            # price(priced, now), inline: this runs for every node of every search.
            worst = 0
            top: float = -math.inf
            lost = 0.0
            for c, kind in priced:
                if kind != "leaving":
                    lost += c.size * max(1.0, now - c.start)
                    worst = max(worst, 1 if c.borrowed or kind == "reclaim" else 2)
                    top = max(top, c.value)
            costs.append(
                (
                    (below, worst, top, lost, name not in prefer, g - len(st.free)),
                    name,
                    tuple(taken),
                )
            )
        if len(costs) < n:
            continue
        costs.sort(key=lambda c: (c[0], c[1]))
        # The cheapest n nodes whose victims, together, stay within the budget (at most one
        # victim per quota past its nominal): cheapest first, and where that skips a node (a
        # cheaper one taken first leaves too little of the budget for it), a search of the
        # combinations (each node with the victim set priced here, chosen against the whole
        # budget: another of its sets is not tried).
        chosen: list[Cost] = []
        victims: dict[str, tuple[Candidate, str]] = {}
        skipped = False
        for cost in costs:
            more = {c.id: (c, kind) for c, kind in cost[2] if c.id not in victims}
            if (
                budget is not None
                and more
                and not within_budget(budget, team, [*victims.values(), *more.values()])
            ):
                skipped = True
                continue
            chosen.append(cost)
            victims.update(more)
            if len(chosen) == n:
                break
        picked = combined(chosen, victims, team, budget, quota, now) if len(chosen) == n else None
        # Searched also when the nodes taken take a quota below its nominal together (each
        # alone did not): n others may keep every quota at it, and such a plan wins.
        if budget is not None and (skipped or (picked is not None and picked[0][0])):
            picked = cheapest_combination(costs, n, team, budget, quota, now, picked)
        if picked is None:
            continue
        score, chosen, victims = picked
        candidate_plan = Plan(group, tuple(c[1] for c in chosen), tuple(victims.values()))
        if best is None or score < best[0]:
            best = (score, candidate_plan)
    return None if best is None else best[1]


def combined(
    chosen: list[Cost],
    victims: dict[str, tuple[Candidate, str]],
    team: str,
    budget: Mapping[tuple[str, str], float] | None,
    quota: tuple[float, Sequence[Candidate]] | None,
    now: float,
) -> Found | None:
    """The score of the nodes `chosen` with their victims (`victims`, each once, in order;
    updated with the quota's extras), and both; None when the quota's extras fall short."""
    if quota is not None:
        extra = quota_extras(list(victims.values()), team, quota)
        if extra is None:
            return None
        victims.update((c.id, (c, kind)) for c, kind in extra)
    new = [c for c, _ in victims.values() if not c.leaving]
    below = max(c[0][0] for c in chosen)
    if len(chosen) > 1 and not below and budget is not None and new:
        below = int(not within_budget(budget, team, victims.values(), strict=True))
    score = (
        below,
        max(c[0][1] for c in chosen),
        max((c.value for c in new), default=-math.inf),
        sum(c.size * max(1.0, now - c.start) for c in new),
    )
    return score, chosen, victims


def cheapest_combination(
    costs: Sequence[Cost],
    n: int,
    team: str,
    budget: Mapping[tuple[str, str], float],
    quota: tuple[float, Sequence[Candidate]] | None,
    now: float,
    found: Found | None,
) -> Found | None:
    """Of the choices of n of `costs` (sorted, cheapest first) whose victims together stay
    within the budget (within_budget), the one of least score (combined), of those that tie
    the first in that order; `found` (cheapest first's, the first such choice) to beat. Depth
    first in that order, branch and bound: what a choice's nodes so far score (below, the
    worst node, the highest class and the GPU-seconds of their victims) bounds every choice
    that adds to them, and a choice past the budget stays past it. Within SEARCH_STEPS."""
    best = found
    m = len(costs)
    path: list[int] = []  # indices into costs, increasing
    union: dict[str, tuple[Candidate, str]] = {}  # the path's victims, each once, in order
    added: list[list[str]] = []  # per level, the ids it added to union
    spent: dict[tuple[str, str], float] = {}  # per quota, of the path's victims
    largest: dict[tuple[str, str], float] = {}
    undo: list[list[tuple[tuple[str, str], float, float]]] = []  # per level: spent, largest
    # Per level, the path's (below, worst, top, lost): no choice adding to it scores less.
    bounds: list[Score] = [(0, 0, -math.inf, 0.0)]
    steps = 0
    i = 0  # the next index to try after the path
    while True:
        below, worst, top, lost = bounds[-1]
        # Every node from i on is priced at least costs[i]'s below (sorted).
        if i > m - (n - len(path)) or (
            best is not None and (max(below, costs[i][0][0]), worst, top, lost) >= best[0]
        ):
            if not path:
                break
            i = path.pop() + 1
            for cid in added.pop():
                del union[cid]
            for k, s, big in undo.pop():
                spent[k], largest[k] = s, big
            bounds.pop()
            continue
        steps += 1
        if steps > SEARCH_STEPS:
            break
        cost = costs[i]
        more = [(c, kind) for c, kind in cost[2] if c.id not in union]
        touched: dict[tuple[str, str], tuple[float, float]] = {}
        top2, lost2 = top, lost
        for c, kind in more:
            if kind == "leaving":
                continue
            top2 = max(top2, c.value)
            lost2 += c.size * max(1.0, now - c.start)
            q = c.quota_key
            if q is not None and c.team != team:
                s, big = touched.get(q) or (spent.get(q, 0.0), largest.get(q, 0.0))
                touched[q] = (s + c.size, max(big, c.size))
        if any(s - big >= budget.get(k, 0.0) - 1e-9 for k, (s, big) in touched.items()):
            i += 1  # past the budget, as is every choice adding to it
            continue
        below2 = below or int(any(s > budget.get(k, 0.0) + 1e-9 for k, (s, _) in touched.items()))
        bound = (max(below2, cost[0][0]), max(worst, cost[0][1]), top2, lost2)
        if best is not None and bound >= best[0]:
            i += 1
            continue
        if len(path) + 1 == n:
            victims = {**union, **{c.id: (c, kind) for c, kind in more}}
            leaf = combined([*(costs[j] for j in path), cost], victims, team, budget, quota, now)
            if leaf is not None and (best is None or leaf[0] < best[0]):
                best = leaf
            i += 1
            continue
        path.append(i)
        added.append([c.id for c, _ in more])
        union.update((c.id, (c, kind)) for c, kind in more)
        undo.append([(k, spent.get(k, 0.0), largest.get(k, 0.0)) for k in touched])
        for k, (s, big) in touched.items():
            spent[k], largest[k] = s, big
        bounds.append(bound)
        i += 1
    return best


def victims_on(
    cands: Iterable[Candidate], p: Preemptor, claimed: set[str]
) -> list[tuple[Candidate, str]]:
    """The candidates that may be victims for p, with their kind ("leaving", "reclaim",
    "priority"), in their order, whatever the budget (plan's walk has this inline)."""
    found: list[tuple[Candidate, str]] = []
    for c in cands:
        if c.id in claimed:
            continue
        if c.leaving:
            found.append((c, "leaving"))
        elif p.own_team_only and c.team != p.team:
            continue
        elif p.reclaims and c.reclaimable and c.team != p.team:
            found.append((c, "reclaim"))
        elif (
            p.priority
            and c.value < p.value
            and p.now - c.start >= p.min_runtime_s
            and c.job.preemptions < p.max_preemptions
            and (not p.quotas or c.team == p.team or (c.borrowed and c.reclaimable))
        ):
            found.append((c, "priority"))
    return found


def exact_victims(
    name: str,
    found: Sequence[tuple[Candidate, str]],
    need: int,
    budget: Mapping[tuple[str, str], float],
    team: str,
    past: bool = False,
) -> tuple[list[tuple[Candidate, str]], int] | None:
    """Victims of `found` (on node `name`, in preference order) that free `need` of its
    GPUs and, of other teams than `team`, stay within each quota's budget (`past`: as
    within_budget(strict=False), all but one per quota within it), whenever any do, and
    the GPUs they free; None when none do. Each in turn is taken unless no such set would
    then remain: a look-ahead, exact, over what those after it can free per quota (the
    least budget they spend for each count of GPUs freed here, with one of them past it
    and without), so that e.g. of 1, 1 and 4 with a budget of 2, for 5 GPUs, the first 1
    and the 4 go. O(victims x need x quotas)."""
    # First a bound, in one pass, before the tables: a quota's victims free here at most
    # what they hold here, and no more than its budget (a victim holds here at most its
    # size), plus, `past`, one victim's GPUs here.
    most_here: dict[tuple[str, str], list[float]] = {}  # per quota: held here, largest
    bound = 0.0
    for c, kind in found:
        h = c.gpus[name]
        k = c.quota_key if kind != "leaving" and c.team != team else None
        if k is None:
            bound += h
        elif (m := most_here.get(k)) is None:
            most_here[k] = [h, h]
        else:
            m[0] += h
            m[1] = max(m[1], h)
    for k, (held, largest) in most_here.items():
        bound += min(held, budget.get(k, 0.0) + (largest if past else 1e-9))
    if bound < need - 1e-9:
        return None
    inf = math.inf
    levels = range(need + 1)
    start: tuple[list[float], list[float]] = ([0.0] + [inf] * need, [inf] * (need + 1))
    n = len(found)
    # Back to front: per quota, tables for the victims after each one (`after[i]`): [0] the
    # least budget spent to free at least each count of GPUs here, [1] the same with one
    # victim past the budget (not counted); and the GPUs those of no quota free (`free`).
    after: list[dict[tuple[str, str], tuple[list[float], list[float]]]] = [{}] * n
    free = [0] * (n + 1)
    tables: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    quota_of: list[tuple[str, str] | None] = [None] * n
    for i in range(n - 1, -1, -1):
        c, kind = found[i]
        after[i] = tables
        h = c.gpus[name]
        k = c.quota_key if kind != "leaving" and c.team != team else None
        free[i] = free[i + 1] + (h if k is None else 0)
        if k is None:
            continue
        quota_of[i] = k
        a0, a1 = tables.get(k, start)
        size = c.size
        b0 = [min(a0[x], a0[x - h if x > h else 0] + size) for x in levels]
        b1 = (
            [
                min(a1[x], a1[x - h if x > h else 0] + size, a0[x - h if x > h else 0])
                for x in levels
            ]
            if past
            else a1
        )
        tables = {**tables, k: (b0, b1)}

    def most(
        k: tuple[str, str], a: tuple[list[float], list[float]], spent: float, top: float
    ) -> int:
        """The most GPUs (up to need) that victims of quota k with their tables `a` free
        here, those taken already having spent `spent` (the largest `top`)."""
        b = budget.get(k, 0.0)
        a0, a1 = a
        for x in range(need, 0, -1):
            if past:
                if a0[x] < b - 1e-9 - (spent - top) or a1[x] < b - 1e-9 - spent:
                    return x
            elif a0[x] <= b + 1e-9 - spent:
                return x
        return 0

    taken: list[tuple[Candidate, str]] = []
    have = 0
    spent: dict[tuple[str, str], tuple[float, float]] = {}  # per quota: spent, the largest
    for i, (c, kind) in enumerate(found):
        h = c.gpus[name]
        k = quota_of[i]
        if k is not None:
            total, top = spent.get(k, (0.0, 0.0))
            total, top = total + c.size, max(top, c.size)
            b = budget.get(k, 0.0)
            if (total - top >= b - 1e-9) if past else (total > b + 1e-9):
                continue
            short = need - have - h - free[i + 1]
            for k2, a in after[i].items():
                if short <= 0:
                    break
                short -= (
                    most(k2, a, total, top) if k2 == k else most(k2, a, *spent.get(k2, (0.0, 0.0)))
                )
            if short > 0:
                continue  # no set would remain with c
            spent[k] = (total, top)
        taken.append((c, kind))
        have += h
        if have >= need:
            return taken, have
    return None


def price(victims: Iterable[tuple[Candidate, str]], now: float) -> tuple[int, float, float]:
    """What victims cost: the costliest (0 all leaving, 1 borrowed, 2 other), the highest
    class among the new ones, and the GPU-seconds they have run (the work at risk)."""
    worst, top, lost = 0, -math.inf, 0.0
    for c, kind in victims:
        if kind != "leaving":
            lost += c.size * max(1.0, now - c.start)
            worst = max(worst, 1 if c.borrowed or kind == "reclaim" else 2)
            top = max(top, c.value)
    return worst, top, lost


def quota_extras(
    victims: Sequence[tuple[Candidate, str]],
    team: str,
    quota: tuple[float, Sequence[Candidate]],
) -> list[tuple[Candidate, str]] | None:
    """The jobs of `team` to preempt besides `victims` to free its quota shortfall: the first
    of `quota`'s, in preference order, that the victims of `team` leave short; None when all
    of them fall short."""
    shortfall, own = quota
    freed = sum(c.size for c, _ in victims if c.team == team)
    extra: list[tuple[Candidate, str]] = []
    if freed >= shortfall - 1e-9:
        return extra
    ids = {c.id for c, _ in victims}
    for c in own:
        if c.id not in ids:
            extra.append((c, "leaving" if c.leaving else "priority"))
            freed += c.size
            if freed >= shortfall - 1e-9:
                return extra
    return None


def within_budget(
    budget: Mapping[tuple[str, str], float],
    team: str,
    victims: Iterable[tuple[Candidate, str]],
    gpus: Callable[[Candidate], float] = attrgetter("size"),
    strict: bool = False,
) -> bool:
    """Do the victims of other teams than `team` (reclaimed, or preempted for priority
    where they borrow) stay within each quota's budget, what it holds above its nominal? As
    Kueue's: a victim may be taken while its quota is still above its nominal before it, so
    at most one per quota (taken last, the largest) crosses below it: what the others take
    is less than the budget. `strict`: all of them within the budget, no quota taken below
    its nominal. `gpus`: what a victim holds (a slice holder's share of a GPU, where its
    size counts whole GPUs only)."""
    spent: dict[tuple[str, str], float] = {}
    largest: dict[tuple[str, str], float] = {}
    for c, kind in victims:
        if kind != "leaving" and c.quota_key is not None and c.team != team:
            k, size = c.quota_key, gpus(c)
            spent[k] = spent.get(k, 0.0) + size
            largest[k] = max(largest.get(k, 0.0), size)
    if strict:
        return all(v <= budget.get(k, 0.0) + 1e-9 for k, v in spent.items())
    return all(v - largest[k] < budget.get(k, 0.0) - 1e-9 for k, v in spent.items())
