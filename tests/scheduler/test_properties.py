"""Properties of schedule() on random snapshots (hypothesis, derandomized: fixed seeds)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import schedule
from scheduler.types import (
    DEFAULT_PRIORITY_CLASSES,
    Decisions,
    JobRequest,
    Node,
    NodeAlloc,
    PendingJob,
    Placement,
    Policy,
    Quota,
    RunningJob,
    Snapshot,
    Team,
)

from .builders import A100, H100, NOW

PREEMPTIBLE = {c.name: c.preemptible for c in DEFAULT_PRIORITY_CLASSES}
POLICIES = [
    Policy(),
    Policy(min_runtime_s=600),
    Policy(name="backfill", quotas=False, fair_share=False, priorities=False, preemption=False),
]
FAST = settings(max_examples=120, deadline=None, derandomize=True)


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    node_count = draw(st.integers(1, 5))
    nodes = tuple(
        Node(
            f"n{i}",
            draw(st.sampled_from([A100, H100])),
            draw(st.sampled_from([4, 8])),
            pool=draw(st.sampled_from([None, "train", "infer"])),
            state=draw(st.sampled_from(["up", "up", "up", "drain"])),
        )
        for i in range(node_count)
    )
    team_names = ["a", "b", "c"][: draw(st.integers(1, 3))]
    teams = tuple(
        Team(
            t,
            draw(st.sampled_from([1.0, 2.0])),
            (
                Quota(
                    draw(st.sampled_from(["*", A100])),
                    draw(st.integers(0, 16)),
                    draw(st.sampled_from([0.0, 4.0, None])),
                ),
            ),
        )
        for t in team_names
    )
    running: list[RunningJob] = []
    for n in nodes:
        gpu = 0
        while gpu < n.gpus and draw(st.booleans()):
            width = draw(st.integers(1, n.gpus - gpu))
            r = JobRequest(
                f"r{len(running)}",
                draw(st.sampled_from(team_names)),
                draw(st.sampled_from(["high", "normal", "low"])),
                NOW - 5000,
                1,
                width,
                time_limit_s=draw(st.sampled_from([None, 1000.0, 4000.0])),
            )
            leaving = NOW - 5 if draw(st.integers(0, 9)) == 0 else None
            placement = Placement((NodeAlloc(n.name, tuple(range(gpu, gpu + width))),))
            started_at = NOW - draw(st.integers(0, 3000))
            preemptions = draw(st.sampled_from([0, 0, 1, 2]))
            running.append(RunningJob(r, started_at, placement, n.gpu_model, leaving, preemptions))
            gpu += width
    pending = tuple(
        PendingJob(
            JobRequest(
                f"p{i}",
                draw(st.sampled_from([*team_names, "stranger"])),
                draw(st.sampled_from(["high", "normal", "normal", "low"])),
                NOW - draw(st.integers(0, 1000)),
                nodes=draw(st.sampled_from([1, 1, 1, 2])),
                gpus_per_node=draw(st.sampled_from([1, 2, 4, 8])),
                gpu_model=draw(st.sampled_from([None, None, A100, H100])),
                time_limit_s=draw(st.sampled_from([None, 500.0, 3000.0])),
                pool=draw(st.sampled_from([None, None, "train"])),
            ),
            preemptions=draw(st.sampled_from([0, 0, 0, 1])),
        )
        for i in range(draw(st.integers(0, 12)))
    )
    return Snapshot(nodes, teams, pending, tuple(running))


def protected(s: Snapshot, after: int = 1) -> set[str]:
    """The jobs Policy.protect_after_preemptions=after protects: of a preemptible class,
    preempted that often, no larger than their team's nominal on a quota they could use;
    running ones earliest started first, while they fit that nominal with their team's
    jobs that cannot be preempted."""
    quota = {t.name: t.quotas[0] for t in s.teams}
    found = set()
    for p in s.pending:
        r, q = p.request, quota.get(p.request.team)
        if p.preemptions < after or not PREEMPTIBLE[r.priority] or q is None:
            continue
        if q.gpu_model in ("*", r.gpu_model or q.gpu_model) and (
            r.nodes * r.gpus_per_node <= q.nominal
        ):
            found.add(r.id)
    fixed: dict[str, float] = defaultdict(float)
    candidates = []
    for j in s.running:
        r, q = j.request, quota.get(j.request.team)
        if q is None or q.gpu_model not in ("*", j.gpu_model):
            continue
        if not PREEMPTIBLE[r.priority]:
            fixed[r.team] += sum(len(a.gpus) for a in j.placement.allocs)
        elif j.preemptions >= after:
            candidates.append(j)
    for j in sorted(candidates, key=lambda j: (j.start_time, j.request.id)):
        gpus = sum(len(a.gpus) for a in j.placement.allocs)
        if fixed[j.request.team] + gpus <= quota[j.request.team].nominal + 1e-9:
            fixed[j.request.team] += gpus
            found.add(j.request.id)
    return found


def used_gpus(s: Snapshot, d: Decisions) -> Counter[tuple[str, int]]:
    use: Counter[tuple[str, int]] = Counter()
    for job in s.running:
        for a in job.placement.allocs:
            use.update((a.node, g) for g in a.gpus)
    for start in d.starts:
        for a in start.placement.allocs:
            use.update((a.node, g) for g in a.gpus)
    return use


@FAST
@given(snapshots(), st.sampled_from(POLICIES))
def test_capacity_is_never_exceeded(s: Snapshot, policy: Policy) -> None:
    d = schedule(s, policy, NOW)
    by_name = {n.name: n for n in s.nodes}
    use = used_gpus(s, d)
    assert all(count == 1 for count in use.values())
    for start in d.starts:
        for a in start.placement.allocs:
            node = by_name[a.node]
            assert node.state == "up" and all(0 <= g < node.gpus for g in a.gpus)


@FAST
@given(snapshots(), st.sampled_from(POLICIES))
def test_gangs_are_all_or_nothing_with_their_shape(s: Snapshot, policy: Policy) -> None:
    d = schedule(s, policy, NOW)
    requests = {p.request.id: p.request for p in s.pending}
    by_name = {n.name: n for n in s.nodes}
    for start in d.starts:
        r = requests[start.job_id]
        allocs = start.placement.allocs
        assert len({a.node for a in allocs}) == len(allocs) == r.nodes
        assert all(len(a.gpus) == r.gpus_per_node for a in allocs)
        assert {by_name[a.node].gpu_model for a in allocs} == {start.gpu_model}
        assert r.gpu_model in (None, start.gpu_model)
        assert r.pool is None or {by_name[a.node].pool for a in allocs} == {r.pool}


@FAST
@given(snapshots())
def test_no_team_goes_above_nominal_plus_borrowing_limit(s: Snapshot) -> None:
    d = schedule(s, Policy(), NOW)
    quota = {t.name: t.quotas[0] for t in s.teams}
    used: dict[str, float] = defaultdict(float)
    for job in s.running:
        q = quota.get(job.request.team)
        if q is not None and q.gpu_model in ("*", job.gpu_model):
            used[job.request.team] += sum(len(a.gpus) for a in job.placement.allocs)
    for start in d.starts:
        team = next(p.request.team for p in s.pending if p.request.id == start.job_id)
        q = quota[team]  # a team without quota never starts
        assert q.gpu_model in ("*", start.gpu_model)
        used[team] += sum(len(a.gpus) for a in start.placement.allocs)
    for team in {
        next(p.request.team for p in s.pending if p.request.id == x.job_id) for x in d.starts
    }:
        limit = math.inf if quota[team].borrowing_limit is None else quota[team].borrowing_limit
        assert used[team] <= quota[team].nominal + limit + 1e-9


@FAST
@given(snapshots())
def test_a_team_starts_jobs_that_cannot_be_preempted_only_within_its_nominal(
    s: Snapshot,
) -> None:
    # Of a class that cannot be preempted, or protected after their preemptions: once one
    # starts on a quota, they all (running and started) fit its nominal.
    d = schedule(s, Policy(), NOW)
    quota = {t.name: t.quotas[0] for t in s.teams}
    spared = protected(s)
    fixed: dict[str, float] = defaultdict(float)
    for job in s.running:
        r, q = job.request, quota.get(job.request.team)
        if q is None or q.gpu_model not in ("*", job.gpu_model):
            continue
        if not PREEMPTIBLE[r.priority] or r.id in spared:
            fixed[r.team] += sum(len(a.gpus) for a in job.placement.allocs)
    teams = set()
    pending = {p.request.id: p.request for p in s.pending}
    for start in d.starts:
        r = pending[start.job_id]
        if not PREEMPTIBLE[r.priority] or r.id in spared:
            assert not start.borrowed
            fixed[r.team] += sum(len(a.gpus) for a in start.placement.allocs)
            teams.add(r.team)
    for team in teams:
        assert fixed[team] <= quota[team].nominal + 1e-9, (team, fixed[team], quota[team])


@FAST
@given(snapshots())
def test_a_reclaim_takes_a_team_only_while_it_is_above_its_nominal(s: Snapshot) -> None:
    # What a team's running jobs hold on its quota once those leaving (before or by this
    # cycle) are gone. As Kueue's minimal set, a victim is taken while its team is still
    # above its nominal: all of the team's victims but the largest leave it above, so only
    # the last may take it below (a job larger than what its team borrows goes too).
    d = schedule(s, Policy(), NOW)
    quota = {t.name: t.quotas[0] for t in s.teams}
    reclaimed = {p.job_id for p in d.preemptions if p.kind == "reclaim"}
    gone = {p.job_id for p in d.preemptions}
    before: dict[str, float] = defaultdict(float)
    after: dict[str, float] = defaultdict(float)
    largest: dict[str, float] = defaultdict(float)
    on_quota: set[str] = set()  # teams a job was reclaimed from on their quota's model
    for job in s.running:
        team = job.request.team
        q = quota.get(team)
        if q is None or q.gpu_model not in ("*", job.gpu_model) or job.preempting_since:
            continue
        gpus = sum(len(a.gpus) for a in job.placement.allocs)
        before[team] += gpus
        if job.request.id in gone:
            largest[team] = max(largest[team], gpus)
        else:
            after[team] += gpus
        if job.request.id in reclaimed:
            on_quota.add(team)
    # (A job on a model its team has no quota for is all borrowed: not counted here.)
    for team in on_quota:
        nominal = quota[team].nominal
        assert before[team] > nominal + 1e-9, (team, before[team], quota[team])
        assert after[team] + largest[team] > nominal + 1e-9, (
            team,
            before[team],
            after[team],
            largest[team],
            quota[team],
        )


@FAST
@given(snapshots(), st.sampled_from(POLICIES), st.randoms(use_true_random=False))
def test_same_input_gives_same_decisions_whatever_the_input_order(
    s: Snapshot, policy: Policy, rnd
) -> None:  # type: ignore[no-untyped-def]
    first = schedule(s, policy, NOW)
    assert schedule(s, policy, NOW) == first
    pending, running = list(s.pending), list(s.running)
    rnd.shuffle(pending)
    rnd.shuffle(running)
    shuffled = Snapshot(s.nodes, s.teams, tuple(pending), tuple(running))
    assert schedule(shuffled, policy, NOW) == first


@FAST
@given(snapshots(), st.sampled_from(POLICIES))
def test_every_pending_job_either_starts_or_waits_once_with_a_reason(
    s: Snapshot, policy: Policy
) -> None:
    d = schedule(s, policy, NOW)
    ids = [x.job_id for x in d.starts] + [w.job_id for w in d.waits]
    assert sorted(ids) == sorted(p.request.id for p in s.pending)
    assert [w.position for w in d.waits] == list(range(1, len(d.waits) + 1))
    assert all(w.reason.code and w.reason.message for w in d.waits)


@FAST
@given(snapshots(), st.sampled_from(POLICIES))
def test_a_reserved_job_is_never_delayed_by_backfill(s: Snapshot, policy: Policy) -> None:
    d = schedule(s, policy, NOW)
    held = [w for w in d.waits if w.reserved]
    if not held:
        return
    (w,) = [x for x in held if x.position == min(h.position for h in held)]
    r = next(p.request for p in s.pending if p.request.id == w.job_id)
    at = w.estimated_start
    assert at is not None
    busy: Counter[str] = Counter()
    grace = policy.preemption_grace_s
    preempted = {p.job_id for p in d.preemptions}  # this cycle's: gone within the grace
    for job in s.running:
        ends = (
            [job.start_time + job.request.time_limit_s]
            if job.request.time_limit_s is not None
            else []
        )
        if job.preempting_since is not None:
            ends.append(job.preempting_since + grace)
        if job.request.id in preempted:
            ends.append(NOW + grace)
        if not ends or max(NOW, min(ends)) > at:
            for a in job.placement.allocs:
                busy[a.node] += len(a.gpus)
    requests = {p.request.id: p.request for p in s.pending}
    for start in d.starts:
        limit = requests[start.job_id].time_limit_s
        if limit is None or NOW + limit > at:
            for a in start.placement.allocs:
                busy[a.node] += len(a.gpus)
    fits = [
        n
        for n in s.nodes
        if n.state == "up"
        and r.gpu_model in (None, n.gpu_model)
        and r.pool in (None, n.pool)
        and n.gpus - busy[n.name] >= r.gpus_per_node
    ]
    by_group = Counter((n.gpu_model, n.pool) for n in fits)
    assert max(by_group.values(), default=0) >= r.nodes


@FAST
@given(snapshots(), st.sampled_from(POLICIES[:2]))
def test_non_preemptible_jobs_are_never_victims_and_victims_are_running(
    s: Snapshot, policy: Policy
) -> None:
    d = schedule(s, policy, NOW)
    running = {j.request.id: j for j in s.running}
    # A job protected after its preemptions is no victim again either.
    spared = protected(s)
    for p in d.preemptions:
        victim = running[p.job_id]
        assert PREEMPTIBLE[victim.request.priority]
        assert p.job_id not in spared
        assert victim.preempting_since is None
        assert p.message.startswith(f"preempted by job {p.by_job_id}: ")
    assert len({p.job_id for p in d.preemptions}) == len(d.preemptions)


@FAST
@given(snapshots(), st.lists(st.booleans(), min_size=3, max_size=3))
def test_on_a_cluster_of_one_model_a_star_quota_is_that_models_quota(
    s: Snapshot, rewrite: list[bool]
) -> None:
    # Only A100 nodes: "*" and A100 quotas cover the same GPUs, so whichever teams write
    # which changes no decision (pending jobs asking for H100 can never run). Borrowing has
    # no limit, so that what is lent and borrowed shows in the decisions.
    s = replace(
        s,
        nodes=tuple(replace(n, gpu_model=A100) for n in s.nodes),
        running=tuple(replace(j, gpu_model=A100) for j in s.running),
        teams=tuple(
            replace(t, quotas=tuple(replace(q, borrowing_limit=None) for q in t.quotas))
            for t in s.teams
        ),
    )
    other = {"*": A100, A100: "*"}
    teams = tuple(
        replace(t, quotas=tuple(replace(q, gpu_model=other[q.gpu_model]) for q in t.quotas))
        if again
        else t
        for t, again in zip(s.teams, rewrite, strict=False)
    )
    first, second = schedule(s, Policy(), NOW), schedule(replace(s, teams=teams), Policy(), NOW)
    assert (first.starts, first.preemptions) == (second.starts, second.preemptions)
    # Positions aside: a job that can never run (for H100) may sort in either quota tier.
    assert sorted((w.job_id, w.reason.code, w.estimated_start) for w in first.waits) == sorted(
        (w.job_id, w.reason.code, w.estimated_start) for w in second.waits
    )
