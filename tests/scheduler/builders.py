"""Builders for scheduler tests: terse nodes, teams, jobs and snapshots, and a fake clock.

Times are seconds on a fake clock: NOW is "now", running jobs start relative to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler import schedule
from scheduler.types import (
    ANY_MODEL,
    Decisions,
    Gpu,
    JobRequest,
    MigInstance,
    Node,
    NodeAlloc,
    PendingJob,
    Placement,
    Policy,
    Quota,
    RunningJob,
    Snapshot,
    Start,
    Team,
    UsageBucket,
    Wait,
)

NOW = 1_000_000.0
A100 = "A100-SXM4-80GB"
H100 = "H100-SXM5-80GB"
FIFO = Policy(
    name="fifo", backfill=False, preemption=False, quotas=False, fair_share=False, priorities=False
)
BACKFILL = Policy(
    name="backfill", preemption=False, quotas=False, fair_share=False, priorities=False
)


def nodes(
    count: int, gpus: int = 8, model: str = A100, prefix: str = "n", **kw: object
) -> tuple[Node, ...]:
    return tuple(Node(f"{prefix}{i + 1}", model, gpus, **kw) for i in range(count))  # type: ignore[arg-type]


def mig_node(
    name: str,
    layouts: Iterable[Iterable[MigInstance]] = (),
    gpus: int = 1,
    model: str = A100,
    cluster: str | None = None,
) -> Node:
    given = [tuple(lay) for lay in layouts]
    given += [()] * (gpus - len(given))
    return Node(
        name,
        model,
        gpus,
        mig=True,
        mig_gpus=tuple(Gpu(i, lay) for i, lay in enumerate(given)),
        cluster=cluster,
    )


def team(
    name: str,
    nominal: float = 0.0,
    borrow: float | None = 0.0,
    model: str = ANY_MODEL,
    lending: float | None = None,
    weight: float = 1.0,
    usage: Iterable[tuple[float, float]] = (),
    max_jobs: int | None = None,
) -> Team:
    return Team(
        name,
        weight,
        (Quota(model, nominal, borrow, lending, max_jobs),),
        tuple(UsageBucket(at, gs) for at, gs in usage),
    )


def request(
    id: str,
    team: str = "a",
    gpus: int = 1,
    nodes: int = 1,
    priority: str = "normal",
    submit: float = NOW - 100,
    limit: float | None = 3600.0,
    model: str | None = None,
    pool: str | None = None,
    mig: str | None = None,
    cluster: str | None = None,
) -> JobRequest:
    return JobRequest(
        id, team, priority, submit, nodes, gpus, model, mig, limit, pool, cluster=cluster
    )


def job(id: str, **kw: object) -> PendingJob:
    return PendingJob(request(id, **kw))  # type: ignore[arg-type]


def running(
    id: str,
    on: Mapping[str, Iterable[int]],
    team: str = "a",
    started: float = NOW - 600,
    priority: str = "normal",
    limit: float | None = 3600.0,
    model: str = A100,
    leaving_since: float | None = None,
) -> RunningJob:
    allocs = tuple(NodeAlloc(n, tuple(g)) for n, g in on.items())
    per_node = len(allocs[0].gpus) if allocs else 0
    r = JobRequest(id, team, priority, started - 10, len(allocs), per_node, None, None, limit)
    return RunningJob(r, started, Placement(allocs), model, leaving_since)


def snap(
    nodes: Iterable[Node],
    teams: Iterable[Team] = (),
    pending: Iterable[PendingJob] = (),
    running: Iterable[RunningJob] = (),
) -> Snapshot:
    return Snapshot(tuple(nodes), tuple(teams), tuple(pending), tuple(running))


def decide(s: Snapshot, policy: Policy | None = None, now: float = NOW) -> Decisions:
    return schedule(s, policy or Policy(), now)


def started(d: Decisions) -> dict[str, Start]:
    return {s.job_id: s for s in d.starts}


def waits(d: Decisions) -> dict[str, Wait]:
    return {w.job_id: w for w in d.waits}


def gpus_of(s: Start) -> dict[str, tuple[int, ...]]:
    return {a.node: a.gpus for a in s.placement.allocs}
