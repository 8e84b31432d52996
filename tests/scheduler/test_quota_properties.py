"""The quota ledger never lends more than there is (hypothesis, derandomized): after any
sequence of admitted borrowing, some assignment of every team's borrowed GPUs to other
teams' idle nominal (within lending limits, for the right model) and to capacity nobody
owns exists, unless one existed no more before. Checked against a max-flow oracle."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.quota import Ledger
from scheduler.types import ANY_MODEL, Quota, Team

from .builders import A100, H100, running

MODELS = (A100, H100)
Usage = dict[tuple[str, str], float]


def max_flow(edges: list[tuple[Hashable, Hashable, float]], source: str, sink: str) -> float:
    graph: dict[Hashable, dict[Hashable, float]] = {}
    for u, v, cap in edges:
        graph.setdefault(u, {})
        graph.setdefault(v, {})
        graph[u][v] = graph[u].get(v, 0.0) + cap
        graph[v].setdefault(u, 0.0)
    flow = 0.0
    while True:
        parent: dict[Hashable, Hashable | None] = {source: None}
        queue: list[Hashable] = [source]
        for u in queue:
            for v, cap in graph.get(u, {}).items():
                if cap > 1e-9 and v not in parent:
                    parent[v] = u
                    queue.append(v)
        if sink not in parent:
            return flow
        push, v = math.inf, sink
        while (u := parent[v]) is not None:
            push, v = min(push, graph[u][v]), u
        v = sink
        while (u := parent[v]) is not None:
            graph[u][v] -= push
            graph[v][u] += push
            v = u
        flow += push


def unplaced(ledger: Ledger, usage: Usage, capacity: Mapping[str, float]) -> float:
    """Borrowed GPUs that no assignment can place: each account's borrowing sits on its
    team's usage of some model, which other teams' idle nominal lent for good (of that
    model's quota or "*") or capacity of the model nobody owns may hold."""
    exact: dict[str, float] = {}
    star = 0.0
    for (_, model), acc in ledger.accounts.items():
        if model == ANY_MODEL:
            star += acc.quota.nominal
        else:
            exact[model] = exact.get(model, 0.0) + acc.quota.nominal
    unowned = {m: max(0.0, c - exact.get(m, 0.0)) for m, c in capacity.items()}
    edges: list[tuple[Hashable, Hashable, float]] = [
        ("unowned", "T", max(0.0, sum(unowned.values()) - star))
    ]
    edges += [(("unowned", m), "unowned", u) for m, u in unowned.items()]
    lenders = {k: a.lent for k, a in ledger.accounts.items() if a.loan is None and a.lent > 1e-9}
    edges += [(("lender", k), "T", lent) for k, lent in lenders.items()]
    need = 0.0
    for k, acc in ledger.accounts.items():
        borrowed = max(0.0, acc.used - acc.quota.nominal)
        if borrowed <= 1e-9:
            continue
        need += borrowed
        edges.append(("S", ("account", k), borrowed))
        for (team, model), gpus in usage.items():
            if team == k[0] and ledger.key(team, model) == k and gpus > 0:
                edges.append((("account", k), ("use", team, model), gpus))
    for team, model in usage:
        edges.append((("use", team, model), ("unowned", model), math.inf))
        for k in lenders:
            if k[0] != team and k[1] in (model, ANY_MODEL):
                edges.append((("use", team, model), ("lender", k), math.inf))
    return need - max_flow(edges, "S", "T")


quotas = st.builds(
    Quota,
    st.sampled_from([ANY_MODEL, A100, H100]),
    st.integers(0, 6),
    st.sampled_from([0.0, 2.0, None, None]),
    st.sampled_from([None, None, 1.0, 3.0]),
)


@st.composite
def teams(draw: st.DrawFn) -> tuple[Team, ...]:
    out = []
    for name in ["a", "b", "c", "d"][: draw(st.integers(2, 4))]:
        qs = draw(st.lists(quotas, min_size=1, max_size=2, unique_by=lambda q: q.gpu_model))
        out.append(Team(name, 1.0, tuple(qs)))
    return tuple(out)


asks = st.tuples(st.sampled_from("abcd"), st.sampled_from(MODELS), st.integers(1, 5))


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    teams(),
    st.fixed_dictionaries({m: st.sampled_from([0, 4, 8, 16]) for m in MODELS}),
    st.lists(asks, max_size=4),
    st.lists(asks, min_size=1, max_size=6),
)
def test_a_team_admitted_to_borrow_never_takes_more_than_other_teams_lend(
    teams: tuple[Team, ...],
    capacity: dict[str, int],
    runs: list[tuple[str, str, int]],
    checks: list[tuple[str, str, int]],
) -> None:
    names = {t.name for t in teams}
    jobs = [
        (running(f"r{i}", {"n": range(g)}, team=t, model=m), float(g), True)
        for i, (t, m, g) in enumerate(runs)
        if t in names
    ]
    cap = {m: float(c) for m, c in capacity.items()}
    ledger = Ledger(teams, jobs, (), True, cap)
    usage: Usage = {}
    for job, gpus, _ in jobs:
        key = (job.request.team, job.gpu_model)
        usage[key] = usage.get(key, 0.0) + gpus
    for team, model, gpus in checks:
        acc = ledger.account(team, model)
        if acc is None or not ledger.check(team, model, gpus, True).ok:
            continue
        # Taking up to its nominal is the team's right even where others overdrew: only
        # what it borrows beyond that must find a lender.
        before = unplaced(ledger, usage, cap)
        within = max(0.0, min(gpus, acc.quota.nominal - acc.used))
        if within > 0:
            on_nominal = ledger.fork()
            on_nominal.commit(team, model, within, True)
            after_nominal = {**usage, (team, model): usage.get((team, model), 0.0) + within}
            before = max(before, unplaced(on_nominal, after_nominal, cap))
        ledger.commit(team, model, gpus, True)
        usage[(team, model)] = usage.get((team, model), 0.0) + gpus
        assert unplaced(ledger, usage, cap) <= before + 1e-6, (team, model, gpus)
