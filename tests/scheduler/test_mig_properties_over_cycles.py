"""Properties of schedule() over many cycles on MIG nodes (hypothesis, derandomized): random
small workloads of slice jobs, with some whole-GPU nodes and jobs beside them, run on the
fake-clock driver that keeps each GPU's layout (a relayout applied once its GPU is idle),
with jobs arriving over time and each victim leaving at its own moment within its grace.
The whole-GPU counterpart is test_properties_over_cycles.py."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from scheduler.types import Decisions, JobRequest, MigInstance, Node, Policy, Quota, Team

from .builders import A100, NOW, mig_node
from .test_mig_over_several_cycles import MigDriver
from .test_properties_over_cycles import (
    POLICIES,
    SLOW,
    STEP,
    Staggered,
    assert_every_admissible_job_finished,
    check_cycle,
    run,
)

# A100 80 GB placements, as ../shared/specs/mig.md §Geometry gives them: profile ->
# (compute slices, memory slices, allowed starts). 7 compute and 8 memory slices per GPU.
SPEC = {
    "1g.10gb": (1, 1, {0, 1, 2, 3, 4, 5, 6}),
    "1g.20gb": (1, 2, {0, 2, 4, 6}),
    "2g.20gb": (2, 2, {0, 2, 4}),
    "3g.40gb": (3, 4, {0, 4}),
    "4g.40gb": (4, 4, {0}),
    "7g.80gb": (7, 8, {0}),
}
# Layouts a GPU may start with (besides none).
START_LAYOUTS = [
    (MigInstance("7g.80gb", 0, 8),),
    (MigInstance("4g.40gb", 0, 4), MigInstance("3g.40gb", 4, 4)),
    (MigInstance("3g.40gb", 0, 4), MigInstance("3g.40gb", 4, 4)),
    tuple(MigInstance("1g.10gb", s, 1) for s in range(7)),
    (MigInstance("2g.20gb", 0, 2), MigInstance("2g.20gb", 2, 2), MigInstance("3g.40gb", 4, 4)),
]


def fraction(r: JobRequest) -> float:
    """What the job counts for against its team's quota (a slice: compute slices / 7)."""
    if r.mig_profile is not None:
        return SPEC[r.mig_profile][0] / 7
    return float(r.nodes * r.gpus_per_node)


@dataclass
class Workload:
    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]
    jobs: tuple[tuple[JobRequest, float], ...]  # (request, true duration), by submit time
    seed: int

    def __repr__(self) -> str:  # hypothesis prints the failing example: keep it readable
        lines = [f"Workload(seed={self.seed})"]
        for n in self.nodes:
            layouts = [[f"{i.profile}@{i.start}" for i in g.mig_instances] for g in n.mig_gpus]
            lines.append(f"  node {n.name} {n.gpus} GPUs" + (f" MIG {layouts}" if n.mig else ""))
        lines += [
            f"  team {t.name} nominal {t.quotas[0].nominal:g} borrow {t.quotas[0].borrowing_limit}"
            for t in self.teams
        ]
        lines += [
            f"  {r.id} {r.team} {r.priority} {r.mig_profile or f'{r.gpus_per_node} GPU'}"
            f" at +{r.submit_time - NOW:g} runs {d:g} limit {r.time_limit_s:g}"
            for r, d in self.jobs
        ]
        return "\n".join(lines)


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    mig_nodes = []
    for i in range(draw(st.integers(1, 3))):
        gpus = draw(st.integers(1, 2))
        layouts = [draw(st.sampled_from([(), (), *START_LAYOUTS])) for _ in range(gpus)]
        mig_nodes.append(mig_node(f"m{i + 1}", layouts, gpus=gpus))
    whole = tuple(Node(f"n{i + 1}", A100, 2) for i in range(draw(st.integers(0, 1))))
    names = ["a", "b", "c"][: draw(st.integers(2, 3))]
    nominal = {t: draw(st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0, 3.0])) for t in names}
    teams = tuple(
        Team(t, 1.0, (Quota("*", nominal[t], draw(st.sampled_from([None, None, 0.0, 1.0]))),))
        for t in names
    )
    jobs = []
    for i in range(draw(st.integers(1, 20))):
        t = draw(st.sampled_from(names))
        profile = draw(st.sampled_from([*SPEC, "1g.10gb", "1g.10gb", "2g.20gb", None]))
        if profile is None and not whole:
            profile = "1g.10gb"
        gpus = 1 if profile is not None else draw(st.sampled_from([1, 2]))
        priority = draw(st.sampled_from(["high", "normal", "normal", "low"]))
        r = JobRequest(f"j{i:02d}", t, priority, 0.0, 1, gpus, mig_profile=profile)
        if priority == "high" and fraction(r) > nominal[t] + 1e-9:
            priority = "normal"  # non-preemptible work runs only within its nominal
        steps = draw(st.integers(1, 30))
        limit = STEP * (steps + draw(st.integers(0, 20)))
        submit = NOW + STEP * draw(st.integers(0, 40))
        r = JobRequest(r.id, t, priority, submit, 1, gpus, mig_profile=profile, time_limit_s=limit)
        jobs.append((r, STEP * steps))
    jobs.sort(key=lambda x: (x[0].submit_time, x[0].id))
    return Workload((*mig_nodes, *whole), teams, tuple(jobs), draw(st.integers(0, 2**16)))


def admissible(w: Workload, r: JobRequest) -> bool:
    """Could r ever start, the cluster empty? Its team's quota must allow its size, and a
    node must be of its kind (a MIG GPU, once re-laid out, offers every profile)."""
    q = next(t.quotas[0] for t in w.teams if t.name == r.team)
    limit = math.inf if q.borrowing_limit is None else q.borrowing_limit
    fits = any(n.mig == (r.mig_profile is not None) and n.gpus >= r.gpus_per_node for n in w.nodes)
    return fits and fraction(r) <= q.nominal + limit + 1e-9


@dataclass
class StaggeredMig(Staggered, MigDriver):
    """Staggered arrivals and leaves (test_properties_over_cycles.py) on MigDriver's layouts."""

    def step_once(self) -> Decisions:
        self.arrive()
        layouts = {k: [list(lay) for lay in v] for k, v in self.layouts.items()}
        d = self.cycle()
        check_cycle(self, d)
        check_mig_cycle(self, d, layouts)
        self.advance()
        return d


def valid_layout(layout: list[MigInstance]) -> bool:
    memory: Counter[int] = Counter()
    for i in layout:
        _, size, starts = SPEC[i.profile]
        if i.size != size or i.start not in starts:
            return False
        memory.update(range(i.start, i.start + i.size))
    compute_used = sum(SPEC[i.profile][0] for i in layout)
    return compute_used <= 7 and all(c == 1 for c in memory.values()) and max(memory, default=0) < 8


def check_mig_cycle(
    drv: StaggeredMig, d: Decisions, before: dict[str, list[list[MigInstance]]]
) -> None:
    """What must hold for slices after every cycle's decisions are applied: each start takes
    an instance that was free in the layout the cycle saw; each running slice job holds its
    instance there; every layout is one the GPU can have; a relayout gpuq applies is only for
    a GPU whose holders are all leaving; no team is above its nominal plus borrowing."""
    for s in d.starts:
        for a in s.placement.allocs:
            if a.mig is not None:
                free = [i for i in before[a.node][a.mig.gpu] if i.job_id is None]
                slot = (a.mig.profile, a.mig.start, a.mig.size)
                assert slot in [(i.profile, i.start, i.size) for i in free], (s, free)
    for job in drv.running.values():
        for a in job.placement.allocs:
            if a.mig is not None:
                held = [i for i in drv.layouts[a.node][a.mig.gpu] if i.job_id == job.request.id]
                assert [(i.profile, i.start, i.size) for i in held] == [
                    (a.mig.profile, a.mig.start, a.mig.size)
                ], (job.request.id, drv.layouts[a.node][a.mig.gpu])
                assert job.request.mig_profile == a.mig.profile, job
            else:
                assert not any(n.mig for n in drv.nodes if n.name == a.node), job
    for name, gpus in drv.layouts.items():
        for index, lay in enumerate(gpus):
            assert valid_layout(lay), (name, index, lay)
    for rl in d.relayouts:
        assert not rl.advisory, rl  # no node here has a fixed layout
        holders = {i.job_id for i in before[rl.node][rl.gpu]} - {None}
        staying = [h for h in holders if drv.running.get(h) and not leaving(drv, h)]
        assert not staying, (rl, staying)
    use: defaultdict[str, float] = defaultdict(float)
    for job in drv.running.values():
        use[job.request.team] += fraction(job.request)
    for t in drv.teams:
        q = t.quotas[0]
        limit = math.inf if q.borrowing_limit is None else q.borrowing_limit
        assert use[t.name] <= q.nominal + limit + 1e-9, (t.name, use[t.name], q)


def leaving(drv: StaggeredMig, job_id: str) -> bool:
    return drv.running[job_id].preempting_since is not None


@SLOW
@given(workloads(), st.sampled_from(POLICIES))
def test_every_slice_job_that_could_ever_run_finishes_and_each_cycle_keeps_the_rules(
    w: Workload, policy: Policy
) -> None:
    # check_cycle and check_mig_cycle assert the per-cycle rules (step_once calls them).
    drv = run(w, policy, StaggeredMig, admissible)
    assert_every_admissible_job_finished(w, drv, admissible)
