"""Properties of schedule() over many cycles (hypothesis, derandomized): random small
workloads run on the fake-clock driver, with jobs arriving over time and each victim leaving
at its own moment within its grace period, as real ones do when they finish checkpointing.
Single-cycle properties (test_properties.py) cannot see a race between cycles; these can."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.types import (
    DEFAULT_PRIORITY_CLASSES,
    Decisions,
    JobRequest,
    Node,
    Policy,
    Quota,
    Team,
)

from .builders import A100, NOW
from .driver import Driver

PREEMPTIBLE = {c.name: c.preemptible for c in DEFAULT_PRIORITY_CLASSES}
STEP = 10.0
GRACE = 30.0
SLOW = settings(max_examples=300, deadline=None, derandomize=True)


@dataclass
class Workload:
    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]
    jobs: tuple[tuple[JobRequest, float], ...]  # (request, true duration), by submit time
    seed: int

    def __repr__(self) -> str:  # hypothesis prints the failing example: keep it readable
        lines = [f"Workload(seed={self.seed})"]
        lines += [f"  node {n.name} {n.gpus} GPUs" for n in self.nodes]
        lines += [
            f"  team {t.name} nominal {t.quotas[0].nominal} borrow {t.quotas[0].borrowing_limit}"
            for t in self.teams
        ]
        lines += [
            f"  {r.id} {r.team} {r.priority} {r.nodes}x{r.gpus_per_node}"
            f" at +{r.submit_time - NOW:g} runs {d:g} limit {r.time_limit_s:g}"
            for r, d in self.jobs
        ]
        return "\n".join(lines)


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    per_node = draw(st.sampled_from([2, 4]))
    node_count = draw(st.integers(1, 4))
    nodes = tuple(Node(f"n{i + 1}", A100, per_node) for i in range(node_count))
    total = per_node * node_count
    names = ["a", "b", "c"][: draw(st.integers(2, 3))]
    nominal = {t: draw(st.integers(0, total)) for t in names}
    teams = tuple(
        Team(t, 1.0, (Quota("*", nominal[t], draw(st.sampled_from([None, None, 0.0, 2.0]))),))
        for t in names
    )
    jobs = []
    for i in range(draw(st.integers(1, 20))):
        t = draw(st.sampled_from(names))
        n = draw(st.sampled_from([1, 1, 1, min(2, node_count)]))
        g = draw(st.sampled_from([1, 1, 2, per_node]))
        priority = draw(st.sampled_from(["high", "normal", "normal", "low"]))
        if priority == "high" and n * g > nominal[t]:
            priority = "normal"  # non-preemptible work runs only within its nominal
        steps = draw(st.integers(1, 30))
        limit = STEP * (steps + draw(st.integers(0, 20)))
        submit = NOW + STEP * draw(st.integers(0, 40))
        r = JobRequest(f"j{i:02d}", t, priority, submit, n, g, time_limit_s=limit)
        jobs.append((r, STEP * steps))
    jobs.sort(key=lambda x: (x[0].submit_time, x[0].id))
    return Workload(nodes, teams, tuple(jobs), draw(st.integers(0, 2**16)))


def admissible(w: Workload, r: JobRequest) -> bool:
    """Could r ever start, the cluster empty? Its team's quota must allow its size."""
    q = next(t.quotas[0] for t in w.teams if t.name == r.team)
    size = r.nodes * r.gpus_per_node
    limit = math.inf if q.borrowing_limit is None else q.borrowing_limit
    return size <= q.nominal + limit + 1e-9 and size <= sum(n.gpus for n in w.nodes)


@dataclass
class Staggered(Driver):
    """The driver with arrivals over time, and each victim leaving at a seeded moment within
    its grace period (at the latest when it ends)."""

    arrivals: list[tuple[JobRequest, float]] = field(default_factory=list)
    rng: random.Random = field(default_factory=random.Random)
    finished: dict[str, float] = field(default_factory=dict)

    def arrive(self) -> None:
        while self.arrivals and self.arrivals[0][0].submit_time <= self.now:
            r, duration = self.arrivals.pop(0)
            self.submit(r, duration)

    def applied(self, d: Decisions) -> None:
        super().applied(d)
        for p in d.preemptions:
            if self.running[p.job_id].preempting_since == self.now:  # preempted just now
                # It leaves by the end of a cycle step within its grace: 0 to 3 steps.
                self.leaves_at[p.job_id] = self.now + STEP * self.rng.randint(0, 3)

    def advance(self) -> None:
        before = set(self.running)
        super().advance()
        for job_id in before - set(self.running) - set(self.pending):
            self.finished[job_id] = self.now

    def step_once(self) -> Decisions:
        self.arrive()
        d = self.cycle()
        check_cycle(self, d)
        self.advance()
        return d


def check_cycle(drv: Staggered, d: Decisions) -> None:
    """What must hold after every cycle's decisions are applied."""
    by_name = {n.name: n for n in drv.nodes}
    use: Counter[tuple[str, int]] = Counter()
    for job in drv.running.values():
        for a in job.placement.allocs:
            assert all(0 <= g < by_name[a.node].gpus for g in a.gpus), (job.request.id, a)
            use.update((a.node, g) for g in a.gpus)
    assert all(c == 1 for c in use.values()), sorted(k for k, c in use.items() if c > 1)
    for p in d.preemptions:
        victim = drv.running[p.job_id].request
        assert PREEMPTIBLE[victim.priority], (p, victim)


D = TypeVar("D", bound=Staggered)


def run(
    w: Any,
    policy: Policy,
    driver: type[D],
    can_run: Callable[[Any, JobRequest], bool],
) -> D:
    """Drive a workload (nodes, teams, jobs, seed) on `driver` until every job that
    `can_run` admits has finished or the horizon passes."""
    drv = driver(w.nodes, w.teams, policy, step=STEP, rng=random.Random(w.seed))
    drv.arrivals = [(r, d) for r, d in w.jobs if can_run(w, r)]
    # Time enough to run every job one after another, each preempted a few times over.
    horizon = NOW + STEP * 41 + sum(4 * (r.time_limit_s or 0) + 8 * GRACE for r, _ in w.jobs)
    while drv.now <= horizon and (drv.arrivals or drv.pending or drv.running):
        drv.step_once()
    return drv


def assert_every_admissible_job_finished(
    w: Any, drv: Staggered, can_run: Callable[[Any, JobRequest], bool]
) -> None:
    expected = {r.id for r, _ in w.jobs if can_run(w, r)}
    assert set(drv.finished) == expected, (
        repr(w),
        {
            "pending": {k: (p.preempting_on, p.preemptions) for k, p in drv.pending.items()},
            "running": sorted(drv.running),
            "now": drv.now - NOW,
            "waits": [(x.job_id, x.reason.code) for x in drv.decisions[-1].waits],
        },
    )


POLICIES = [
    Policy(preemption_grace_s=GRACE),
    Policy(preemption_grace_s=GRACE, preemptible_classes_preempt=True),
    Policy(preemption_grace_s=GRACE, quota_hold_after_s=0.0),
]


@SLOW
@given(workloads(), st.sampled_from(POLICIES))
def test_every_job_that_could_ever_run_finishes(w: Workload, policy: Policy) -> None:
    drv = run(w, policy, Staggered, admissible)
    assert_every_admissible_job_finished(w, drv, admissible)


@SLOW
@given(workloads(), st.sampled_from(POLICIES))
def test_no_gpu_is_given_twice_and_only_preemptible_jobs_are_preempted(
    w: Workload, policy: Policy
) -> None:
    # check_cycle asserts both after every cycle's decisions are applied (run() calls it);
    # here, that cycles ran whenever a job could run.
    drv = run(w, policy, Staggered, admissible)
    assert bool(drv.decisions) == any(admissible(w, r) for r, _ in w.jobs)
