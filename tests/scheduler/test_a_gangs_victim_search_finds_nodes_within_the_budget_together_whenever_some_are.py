"""A gang's victim search (preempt.plan, n = 2..3 nodes) against every choice of n of the
nodes, each with the victims plan() prices it at (plan() for that node alone): it finds a
plan whenever some choice's victims together stay within the budget's rule (Kueue's: of each
quota all victims but one, the largest, within what it holds above its nominal,
preempt.within_budget); where the cheapest-first pass skips a node for that rule, it finds
the cheapest choice by plan()'s score (the reclaimer's own team's jobs, below a nominal,
the worst node, the highest class,
the GPU-seconds lost), as it does where the nodes that pass takes put a quota below its
nominal together; otherwise what that pass takes, as before.
Random nodes of two borrowing teams' jobs, some on two nodes, the reclaimer's own lower
class, a team at its nominal and jobs already leaving (hypothesis, derandomized)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.capacity import FreeIndex
from scheduler.preempt import Candidate, Preemptor, plan, price, within_budget
from scheduler.types import RunningJob

from .builders import NOW, nodes, running

RECLAIMER = "r"
GPUS = 4
# What a and d each hold above their nominal; 0: none, their jobs are no victims.
BUDGETS = [0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 4.0]
P = Preemptor(RECLAIMER, 2, reclaims=True, quotas=True, min_runtime_s=0.0, now=NOW)

Victims = list[tuple[Candidate, str]]


@dataclass(frozen=True)
class Case:
    count: int  # nodes n1..
    jobs: list[RunningJob]
    on_node: dict[str, list[Candidate]]
    budget: dict[tuple[str, str], float]
    g: int
    n: int


@st.composite
def cases(draw: st.DrawFn) -> Case:
    count = draw(st.integers(3, 6))
    names = [f"n{i + 1}" for i in range(count)]
    used = dict.fromkeys(names, 0)
    placed: list[dict[str, range]] = []
    for _ in range(draw(st.integers(0, 2))):  # jobs on two nodes
        i = draw(st.integers(0, count - 2))
        per = draw(st.integers(1, 2))
        pair = names[i : i + 2]
        if all(used[x] + per <= GPUS for x in pair):
            placed.append({x: range(used[x], used[x] + per) for x in pair})
            for x in pair:
                used[x] += per
    for x in names:
        while used[x] < GPUS and draw(st.integers(0, 9)):
            size = draw(st.integers(1, GPUS - used[x]))
            placed.append({x: range(used[x], used[x] + size)})
            used[x] += size
    budget = {(t, "*"): b for t in ("a", "d") if (b := draw(st.sampled_from(BUDGETS))) > 0}
    jobs: list[RunningJob] = []
    on_node: dict[str, list[Candidate]] = {x: [] for x in names}
    for on in placed:
        t = draw(st.sampled_from(["a", "a", "a", "d", "d", "d", RECLAIMER, "c"]))
        leaving = NOW - 5 if draw(st.integers(0, 19)) == 0 else None
        since = NOW - draw(st.integers(1, 3600))
        job = running(f"j{len(jobs)}", on, team=t, started=since, leaving_since=leaving)
        jobs.append(job)
        quota = (t, "*") if (t, "*") in budget and leaving is None else None
        # The reclaimer's own jobs are a lower class (priority victims); c runs within its
        # nominal (no victim); a's and d's are reclaimable while their quota is above it.
        value = 0 if t == RECLAIMER else draw(st.integers(0, 1))
        borrowed = quota is not None and draw(st.booleans())
        gpus = {x: len(r) for x, r in on.items()}
        c = Candidate(job, value, borrowed, leaving is not None, gpus, sum(gpus.values()))
        c.quota_key = quota
        c.reclaimable = quota is not None
        for x in on:
            on_node[x].append(c)
    for cands in on_node.values():
        cands.sort(key=lambda c: c.preference)
    g, n = draw(st.integers(2, GPUS)), draw(st.integers(2, 3))
    return Case(count, jobs, on_node, budget, g, n)


def below(case: Case, priced: Sequence[Victims]) -> int:
    """2: a victim is the reclaimer's own team's; 1: one takes a quota below its nominal."""
    union = list({c.id: (c, kind) for victims in priced for c, kind in victims}.values())
    if any(kind == "priority" and c.team == RECLAIMER for c, kind in union):
        return 2
    return int(not within_budget(case.budget, RECLAIMER, union, strict=True))


def score(case: Case, priced: Sequence[Victims]) -> tuple[int, int, float, float]:
    """plan()'s score of nodes with these priced victim sets."""
    union = list({c.id: (c, kind) for victims in priced for c, kind in victims}.values())
    new = [c for c, kind in union if kind != "leaving"]
    return (
        below(case, priced),
        max(price(victims, NOW)[0] for victims in priced),
        max((c.value for c in new), default=-math.inf),
        sum(c.size * max(1.0, NOW - c.start) for c in new),
    )


def within(case: Case, priced: Sequence[Victims]) -> bool:
    union = {c.id: (c, kind) for victims in priced for c, kind in victims}
    return within_budget(case.budget, RECLAIMER, union.values())


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(cases())
def test_a_gangs_victim_search_finds_nodes_within_the_budget_together_whenever_some_are(
    case: Case,
) -> None:
    index = FreeIndex(nodes(case.count, gpus=GPUS), case.jobs)
    groups = list(index.groups.values())
    names = [f"n{i + 1}" for i in range(case.count)]

    def alone(name: str) -> Victims | None:
        others = frozenset(names) - {name}
        found = plan(index, groups, case.g, 1, case.on_node, P, set(), others, budget=case.budget)
        return None if found is None else list(found.victims)

    # Of the nodes with room already, plan() takes n, best fit first: the others are alike.
    room = sorted(
        (len(index.nodes[x].free), x) for x in names if len(index.nodes[x].free) >= case.g
    )
    spare = {x for _, x in room[case.n :]}
    priced = {x: v for x in names if x not in spare and (v := alone(x)) is not None}
    # Each node's cost, as plan() sorts them: (below, worst, top, lost, not preferred,
    # GPUs to free), then its name.
    order = sorted(
        priced,
        key=lambda x: (
            below(case, [priced[x]]),
            *price(priced[x], NOW),
            True,
            max(0, case.g - len(index.nodes[x].free)),
            x,
        ),
    )
    first: list[str] = []
    skipped = False
    for x in order:
        if len(first) == case.n:
            break
        if within(case, [*(priced[y] for y in first), priced[x]]):
            first.append(x)
        else:
            skipped = True
    valid = [
        choice
        for choice in combinations(sorted(priced), case.n)
        if within(case, [priced[x] for x in choice])
    ]

    found = plan(index, groups, case.g, case.n, case.on_node, P, set(), budget=case.budget)

    if not valid:
        assert found is None
        return
    assert found is not None
    chosen = [priced[x] for x in found.nodes]
    assert {c.id for c, _ in found.victims} == {c.id for v in chosen for c, _ in v}
    assert within(case, chosen)
    if skipped or (len(first) == case.n and score(case, [priced[x] for x in first])[0]):
        best = min(score(case, [priced[x] for x in choice]) for choice in valid)
        assert score(case, chosen) <= best
    else:
        assert list(found.nodes) == first
