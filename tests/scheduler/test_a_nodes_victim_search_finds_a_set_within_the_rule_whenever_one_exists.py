"""One node's victim search (preempt.plan) against every subset of its candidates: it makes
room whenever some set of victims frees enough under the budget's rule (Kueue's: of each
quota all victims but one, the largest, within what it holds above its nominal,
preempt.within_budget); within the budget whenever such a set exists; and keeps no victim
the job fits without. Random nodes of a reclaimer's own team's jobs, jobs of two borrowing
teams and jobs already leaving (hypothesis, derandomized)."""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.capacity import FreeIndex
from scheduler.preempt import Candidate, Preemptor, plan, within_budget
from scheduler.types import RunningJob

from .builders import NOW, nodes, running

RECLAIMER = "r"
BUDGETS = [0.0, 0.5, 1.0, 2.0, 2.5, 3.0, 4.0, 6.0]


@st.composite
def node_cases(
    draw: st.DrawFn,
) -> tuple[list[RunningJob], list[Candidate], dict[tuple[str, str], float], int]:
    jobs: list[RunningJob] = []
    gpu = 0
    while gpu < 8 and draw(st.integers(0, 5)):
        size = draw(st.integers(1, min(5, 8 - gpu)))
        team = draw(st.sampled_from(["a", "a", "b", RECLAIMER]))
        leaving = NOW - 5 if draw(st.integers(0, 9)) == 0 else None
        since = NOW - draw(st.integers(1, 3600))
        on = {"n1": range(gpu, gpu + size)}
        jobs.append(running(f"j{len(jobs)}", on, team=team, started=since, leaving_since=leaving))
        gpu += size
    budget = {(t, "*"): draw(st.sampled_from(BUDGETS)) for t in ("a", "b")}
    cands = []
    for job in jobs:
        size = len(job.placement.allocs[0].gpus)
        leaving = job.preempting_since is not None
        c = Candidate(job, 0, job.request.team != RECLAIMER, leaving, {"n1": size}, size)
        if job.request.team != RECLAIMER and not leaving:
            c.quota_key = (job.request.team, "*")
        cands.append(c)
    cands.sort(key=lambda c: c.preference)
    return jobs, cands, budget, draw(st.integers(1, 8))


def frees(cands: tuple[Candidate, ...]) -> int:
    return sum(c.size for c in cands)


def within(
    budget: dict[tuple[str, str], float], cands: tuple[Candidate, ...], strict: bool
) -> bool:
    return within_budget(budget, RECLAIMER, [(c, "reclaim") for c in cands], strict=strict)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(node_cases())
def test_a_nodes_victim_search_finds_a_set_within_the_rule_whenever_one_exists(
    case: tuple[list[RunningJob], list[Candidate], dict[tuple[str, str], float], int],
) -> None:
    jobs, cands, budget, g = case
    index = FreeIndex(nodes(1), jobs)
    free = len(index.nodes["n1"].free)
    # The reclaimer's own jobs are lower classes it may take; the others' are reclaimed.
    p = Preemptor(RECLAIMER, 1, reclaims=True, quotas=True, min_runtime_s=0.0, now=NOW)
    subsets = [s for m in range(len(cands) + 1) for s in combinations(cands, m)]
    fitting = [s for s in subsets if free + frees(s) >= g]

    found = plan(index, list(index.groups.values()), g, 1, {"n1": cands}, p, set(), budget=budget)

    if not any(within(budget, s, strict=False) for s in fitting):
        assert found is None
        return
    assert found is not None
    victims = tuple(c for c, _ in found.victims)
    assert free + frees(victims) >= g
    assert within(budget, victims, strict=False)
    if any(within(budget, s, strict=True) for s in fitting):
        assert within(budget, victims, strict=True)
    spared = [c for c in victims if not c.leaving and free + frees(victims) - c.size >= g]
    assert not spared
