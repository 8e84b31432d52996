"""The scheduling cycle's two ends: read the ORM into a scheduler Snapshot, and apply the
scheduler's Decisions, in one transaction. The deciding is scheduler.schedule()'s alone."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import (
    Count,
    F,
    FloatField,
    Func,
    OuterRef,
    Q,
    Subquery,
    Sum,
    TextField,
    Value,
)
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast, Coalesce, Exp, Greatest, Least
from django.utils import timezone

import scheduler
from queue_service.backends.base import cpus_per_node
from queue_service.clusters.models import Cluster, Node
from queue_service.clusters.services import Placed, held_outside
from queue_service.tenancy.models import Quota, Team
from scheduler import mig
from scheduler import types as st

from .models import Job, JobArray, JobRun, PriorityClass, SchedulerLock
from .reports import GONE, array_states
from .services import CLUSTER_HOLDS, StaleState, request_cycle, transition, unplaced

log = logging.getLogger(__name__)
T = TypeVar("T")
S = Job.State
SEP = "/"  # snapshot node names are "<cluster>/<node>": unique across clusters
# Usage older than this weighs under 2^-40 (1e-12): a year of 10,000 GPUs adds under a
# GPU-second. The window also keeps exp() in SQL from underflowing (PostgreSQL raises).
USAGE_WINDOW_HALF_LIVES = 40


def run_cycle(now: datetime | None = None) -> dict[str, Any]:
    """One scheduling cycle.

    1. Lock: one cycle at a time (SchedulerLock.hold, and on PostgreSQL an advisory lock
       held from the read to the apply).
    2. Snapshot: nodes, teams with quotas and usage, active jobs, and the pending jobs (one
       read, before the active jobs' read: a job requeued meanwhile is in neither, never in
       both) less those held back by the same rows (held_back): jobs whose `after` jobs have
       not all succeeded, or can never (marked for cancelling), and array tasks past their
       array's limit; each held one with why. All of it one view of the database
       (consistent_read).
    3. Decide: scheduler.schedule(snapshot, policy, now) - pure, no I/O.
    4. Apply: admit started jobs with their placements, mark preemption victims, store each
       waiting job's reason, position and estimated start, cancel what can never start -
       all in one transaction.
    5. After commit: dispatch admitted jobs and stop victims (Celery, or inline when embedded).
    """
    now = now or timezone.now()
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        # SQLite's transactions are IMMEDIATE (settings): no other writer commits until
        # this one ends, so its reads are one view. Inside a caller's transaction, its own.
        with transaction.atomic():
            lock = SchedulerLock.hold()
            return _decide_and_apply(lock, *build_snapshot(now), now)
    with _cycle_lock() as release:
        read = consistent_read(build_snapshot, now)
        with transaction.atomic():
            # First of the commit's hooks: the stops and dispatches after it (inline when
            # embedded; a Slurm stop may take seconds) run without the lock.
            transaction.on_commit(release)
            return _decide_and_apply(SchedulerLock.hold(), *read, now)


def _decide_and_apply(
    lock: SchedulerLock, snap: st.Snapshot, clusters: dict[str, Cluster], held: Held, now: datetime
) -> dict[str, Any]:
    started = time.perf_counter()
    decisions = decide(snap, now)
    decide_ms = (time.perf_counter() - started) * 1000
    if held.disabled is not None:
        decisions = held.disabled.explain(decisions, held, snap, now)
    summary = apply_decisions(decisions, clusters, now, held)
    summary["decide_ms"] = round(decide_ms, 3)
    lock.last_cycle_at = now
    lock.last_cycle_ms = decide_ms
    lock.last_stats = summary
    lock.save()
    return summary


@contextlib.contextmanager
def _cycle_lock() -> Iterator[Callable[[], None]]:
    """PostgreSQL: no other cycle, nor a job's update (SchedulerLock.hold), from the cycle's
    read to its apply, two transactions: an advisory lock of the session, not of either.
    Yields `release`, which lets go of it early (once: it is the session's, not counted)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [SchedulerLock.ADVISORY_KEY])
    held = True

    def release() -> None:
        nonlocal held
        if not held:
            return
        held = False
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [SchedulerLock.ADVISORY_KEY])
        except DatabaseError:
            connection.close()  # the session's end releases it

    try:
        yield release
    finally:
        release()


def consistent_read(read: Callable[..., T], *args: Any) -> T:
    """`read` as one view of the database. On PostgreSQL (READ COMMITTED: each query sees
    what was committed when it began) a transaction of its own, REPEATABLE READ and read
    only: what it reads is as of its first query, and it never waits for or fails with the
    writers. The writes come after, in READ COMMITTED, whose conditional UPDATEs see the
    changes since (a serializable apply would fail on them). Elsewhere, or inside a
    caller's transaction (whose isolation is set), as it is."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return read(*args)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        return read(*args)


def decide(snap: st.Snapshot, now: datetime) -> st.Decisions:
    """scheduler.schedule() with the garbage collector paused. A deep queue's call makes
    hundreds of thousands of objects, which trigger full collections over the whole process
    heap: a third of a 100k-job call. The call makes no reference cycles, so its garbage is
    freed as it goes and the pause costs no memory (docs/BENCHMARKS.md)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return scheduler.schedule(snap, policy(), now.timestamp())
    finally:
        if enabled:
            gc.enable()


def policy() -> st.Policy:
    return st.Policy(
        fair_share_half_life_s=settings.GPUQ_FAIR_SHARE_HALF_LIFE_S,
        preemption_grace_s=settings.GPUQ_PREEMPTION_GRACE_S,
        min_runtime_s=settings.GPUQ_MIN_RUNTIME_S,
        max_priority_preemptions=settings.GPUQ_MAX_PRIORITY_PREEMPTIONS,
        protect_after_preemptions=settings.GPUQ_PROTECT_AFTER_PREEMPTIONS,
        preemption_loss_ratio=settings.GPUQ_PREEMPTION_LOSS_RATIO,
        preemptible_classes_preempt=settings.GPUQ_PREEMPTIBLE_CLASSES_PREEMPT,
        quota_hold_after_s=settings.GPUQ_QUOTA_HOLD_AFTER_S,
    )


@dataclasses.dataclass(frozen=True)
class Held:
    """Pending jobs the scheduler does not see this cycle: their `after` jobs have not all
    succeeded, their array already runs as many tasks as it may, or their pinned cluster is
    disabled."""

    waiting: dict[str, st.Reason] = dataclasses.field(default_factory=dict)
    never: dict[str, str] = dataclasses.field(default_factory=dict)  # id -> why it never can
    # Jobs the scheduler sees charged more GPUs than they ask (their CPUs or memory): id ->
    # (the GPUs per node charged, why), added to their wait reasons (charged_reason).
    charged: dict[str, tuple[int, str]] = dataclasses.field(default_factory=dict)
    # The disabled clusters, when some have nodes that take work: for the waits they explain.
    disabled: Disabled | None = None

    def ids(self) -> frozenset[str]:
        return frozenset(self.waiting) | frozenset(self.never)


def cluster_disabled(names: Collection[str]) -> st.Reason:
    listed = sorted(names)
    which = f"cluster {listed[0]} is" if len(listed) == 1 else f"clusters {', '.join(listed)} are"
    return st.Reason(
        "cluster_disabled",
        f"{which} disabled: no new work starts there",
        (("clusters", tuple(listed)),),
    )


# A pending job's request before its footprint is fitted to any nodes, its CPUs per GPU and
# its memory: what Footprints.fit takes.
RawRequest = tuple[st.JobRequest, Any, Any]


class Disabled:
    """The nodes of disabled clusters (staff's "no new work"), which the snapshot leaves out.
    A job the enabled nodes cannot hold at all (`unsatisfiable`) that a disabled cluster's
    could is told that cluster is disabled, not that no node of its kind is up: which could
    is asked of the scheduler itself, on that cluster's nodes alone, as if nothing ran there
    (a wait for quota or room is a job they can hold)."""

    def __init__(self, nodes: Collection[Node], holders: Mapping[tuple[str, str], Placed]) -> None:
        self.nodes: dict[str, list[Node]] = defaultdict(list)
        for n in nodes:
            if n.state != Node.State.DOWN:
                self.nodes[n.cluster.name].append(n)
        self.holders = holders
        self.requests: dict[str, RawRequest] = {}  # pending jobs', by id

    def could_hold(
        self, jobs: Mapping[str, RawRequest], snap: st.Snapshot, now: datetime
    ) -> dict[str, list[str]]:
        """Job id -> the disabled clusters whose nodes could hold it."""
        where: dict[str, list[str]] = defaultdict(list)
        for cluster, nodes in sorted(self.nodes.items()):
            footprints = Footprints(nodes)
            pending = []
            for raw in jobs.values():
                fitted = footprints.fit(*raw)
                if not isinstance(fitted, st.Reason):
                    pending.append(st.PendingJob(fitted))
            if not pending:
                continue
            trial = dataclasses.replace(
                snap,
                nodes=tuple(_node(n, self.holders) for n in nodes),
                pending=tuple(pending),
                running=(),
            )
            outcome = decide(trial, now)
            for start in outcome.starts:
                where[start.job_id].append(cluster)
            for wait in outcome.waits:
                if wait.reason.code != "unsatisfiable":
                    where[wait.job_id].append(cluster)
        return where

    def explain(
        self, decisions: st.Decisions, held: Held, snap: st.Snapshot, now: datetime
    ) -> st.Decisions:
        """The decisions, and `held`, with the unsatisfiable waits a disabled cluster could
        serve saying so instead."""
        unsatisfiable = [w.job_id for w in decisions.waits if w.reason.code == "unsatisfiable"]
        unsatisfiable += [i for i, r in held.waiting.items() if r.code == "unsatisfiable"]
        jobs = {i: self.requests[i] for i in unsatisfiable if i in self.requests}
        if not jobs:
            return decisions
        where = self.could_hold(jobs, snap, now)
        if not where:
            return decisions
        reasons = {i: cluster_disabled(names) for i, names in where.items()}
        for job_id in reasons:
            held.charged.pop(job_id, None)  # charged for the enabled nodes' CPUs or memory
            if job_id in held.waiting:
                held.waiting[job_id] = reasons[job_id]
        waits = tuple(
            w._replace(reason=reasons[w.job_id]) if w.job_id in reasons else w
            for w in decisions.waits
        )
        return dataclasses.replace(decisions, waits=waits)


# A pending job's row as build_snapshot reads it: the request's fields (_request_of, but
# the spec as text: held jobs' are never decoded), its attempts, its array's id, index,
# limit and name, its `after` list (decoded: usually null), and its reason's code and
# `on_nodes` (the nodes the last cycle preempted on, or re-laid out a GPU emptied on, for
# it, or those it keeps while refused quota: PendingJob.preempting_on), and how many times
# the queue preempted it.
PendingRow = tuple[Any, ...]
# The reason codes whose `on_nodes` are a claim the next cycle hands back.
CLAIMING_REASONS = ("preempting", "mig_relayout", "quota_exhausted")
PENDING_FIELDS = (
    "id",
    "team__slug",
    "priority_class__name",
    "submitted_at",
    "spec_text",
    "kind",
    "pinned_cluster",
    "cluster__name",
    "attempts",
    "array_id",
    "array_index",
    "array__max_running",
    "array__name",
    "after",
    "reason_code",
    "on_nodes",
    "preemptions",
)
ID, SPEC, ATTEMPTS, ARRAY, INDEX, LIMIT, NAME, AFTER = 0, 4, 8, 9, 10, 11, 12, 13
REASON_CODE, ON_NODES, PREEMPTIONS = 14, 15, 16
PINNED, CLUSTER = 6, 7
TEAM = 1  # the team's slug


def _pending_rows() -> list[PendingRow]:
    return list(
        Job.objects.filter(state=S.PENDING)
        .annotate(
            spec_text=Cast("spec", TextField()),
            after=KeyTransform("after", "spec"),
            reason_code=KeyTextTransform("code", "reason"),
            on_nodes=KeyTransform("on_nodes", KeyTransform("details", "reason")),
        )
        .order_by("submitted_at", "id")
        .values_list(*PENDING_FIELDS)
    )


def held_back(rows: Collection[PendingRow]) -> Held:
    """Of these pending jobs, those with `after` jobs (Slurm's afterok) that have not all
    succeeded, and tasks of arrays at their limit of tasks at once (Slurm's --array=...%N).
    Decided from the same rows the snapshot is made of: a job that turned pending after they
    were read (a submit, a resume, a requeue) waits for the next cycle, past any limit."""
    waiting: dict[str, st.Reason] = {}
    never: dict[str, str] = {}
    with_after = [(str(row[ID]), row[TEAM], row[AFTER]) for row in rows if row[AFTER]]
    known = _states_and_names({dep for _, _, after in with_after for dep in after})
    for job_id, team, after in with_after:
        reason, why_never = after_status(after, known, team)
        if why_never is not None:
            never[job_id] = why_never
        elif reason is not None:
            waiting[job_id] = reason
    waiting.update(_over_array_limits(rows, skip=waiting.keys() | never.keys()))
    return Held(waiting, never)


def _over_array_limits(rows: Collection[PendingRow], skip: Collection[str]) -> dict[str, st.Reason]:
    """The pending tasks past what their array's limit leaves room for, by index: an array
    of %4 with 3 tasks started lets its lowest pending index through to the scheduler."""
    by_array: dict[Any, list[PendingRow]] = defaultdict(list)
    for row in rows:
        if row[LIMIT] is not None and str(row[ID]) not in skip:
            by_array[row[ARRAY]].append(row)
    if not by_array:
        return {}
    started = started_per_array(list(by_array))
    held: dict[str, st.Reason] = {}
    for array_id, tasks in by_array.items():
        tasks.sort(key=lambda row: row[INDEX])
        limit, name, count = tasks[0][LIMIT], tasks[0][NAME], started.get(array_id, 0)
        # Those let through are not started yet: they count as ahead of the held ones.
        ahead = max(count, limit)
        reason = st.Reason(
            "array_limit",
            f"array {name!r} runs at most {limit} task{'' if limit == 1 else 's'} at once:"
            f" {ahead} {'is' if ahead == 1 else 'are'} running or ahead of this one",
            (("array", str(array_id)), ("max_running", limit), ("started", count)),
        )
        for row in tasks[max(limit - count, 0) :]:
            held[str(row[ID])] = reason
    return held


def started_per_array(array_ids: list[Any]) -> dict[Any, int]:
    """Array id -> its tasks holding GPUs or on their way to (admitted to stopping)."""
    return dict(
        Job.objects.filter(array_id__in=array_ids, state__in=Job.ACTIVE)
        .values("array_id")
        .annotate(n=Count("id"))
        .values_list("array_id", "n")
    )


# An `after` entry as the cycle reads it: its Dep and its team's slug.
AfterDep = tuple[str, str, str, str]


def _states_and_names(ids: Collection[str]) -> dict[str, AfterDep]:
    """id -> (state, name, kind, team) of these jobs (the ones `after` names), in one query;
    an id that is a job array's stands for all its tasks (Slurm's afterok on an array job id)."""
    if not ids:
        return {}
    known = {
        str(pk): (state, name, "job", team)
        for pk, state, name, team in Job.objects.filter(pk__in=ids).values_list(
            "id", "state", "name", "team__slug"
        )
    }
    if arrays := [i for i in ids if i not in known]:
        teams = {
            str(pk): team
            for pk, team in JobArray.objects.filter(pk__in=arrays).values_list("id", "team__slug")
        }
        for array_id, dep in array_states(arrays).items():
            known[array_id] = (*dep, teams.get(array_id, ""))
    return known


def after_status(
    after: list[str], known: dict[str, AfterDep], team: str
) -> tuple[st.Reason | None, str | None]:
    """(why it waits, None) while some `after` job has yet to succeed; (None, why it never
    can) once one ended otherwise; (None, None) when all succeeded. Every member of `team`
    (the waiting job's) reads these, so another team's job is named by its id alone: some of
    them may not see it (as `gpuq show` and the job page name it)."""
    unmet = []
    for dep in after:
        state, name, kind, owner = known.get(dep, (GONE, "?", "job", team))
        own = owner == team
        if state == S.SUCCEEDED:
            continue
        if state == GONE:
            label = f"{name!r} ({dep})" if own else dep
            what = f"job {dep}" if kind == "job" else f"array {label}: a task of it"
            return None, f"{what} was deleted, so this one can never start"
        if state in Job.TERMINAL:
            if not own:
                what = f"job {dep}" if kind == "job" else f"a task of array {dep}"
                return None, f"{what} ended without succeeding, so this one can never start"
            what = f"job {name!r} ({dep})" if kind == "job" else f"task {name!r} of array {dep}"
            return None, f"{what} ended {state}, so this one can never start"
        unmet.append((dep, kind, f"{name!r} ({state})" if own else dep))
    if not unmet:
        return None, None
    listed = ", ".join(item if kind == "job" else f"array {item}" for _, kind, item in unmet)
    if len(unmet) > 1:
        message = f"waiting for {len(unmet)} jobs to succeed: {listed}"
    else:
        message = f"waiting for {'job ' if unmet[0][1] == 'job' else ''}{listed} to succeed"
    return st.Reason("after", message, (("after", tuple(dep for dep, _, _ in unmet)),)), None


def build_snapshot(now: datetime) -> tuple[st.Snapshot, dict[str, Cluster], Held]:
    """The scheduler's input, and the pending jobs left out of it (held back, with why)."""
    everything = list(Cluster.objects.all())
    clusters = {c.name: c for c in everything if c.enabled}
    disabled_names = {c.name for c in everything if not c.enabled}
    # Rows, not model instances: a deep queue is read every cycle, and building 10,000 jobs
    # with their team, class and cluster took most of a cycle (bench/cycle_bench.py).
    # Read before the active jobs: on PostgreSQL each read sees what was committed when it
    # ran, and a job moves from pending into the active states only by this cycle's own
    # apply (under its lock). A job requeued between the reads is then in neither (its GPUs
    # free, it waits for the next cycle), never in both: a GPU counted twice.
    rows = _pending_rows()
    active = list(
        Job.objects.filter(state__in=Job.ACTIVE)
        .exclude(placement=[])
        .select_related("team", "priority_class", "cluster")
        # The open run's start: a job its cluster held and ran again restarted its time limit.
        .annotate(run_started=Subquery(_open_run_start))
    )
    holders = _mig_holders(active)
    node_rows = list(Node.objects.filter(cluster__enabled=True).select_related("cluster"))
    nodes = tuple(_node(n, holders) for n in node_rows)
    # Nodes that take work (a gone node, marked down, must neither keep a job off the ones
    # left nor raise its charge there).
    footprints = Footprints([n for n in node_rows if n.state != Node.State.DOWN])
    held = held_back(rows)
    if disabled_names:
        # A job pinned to a disabled cluster waits for that, whatever else it would wait for.
        for row in rows:
            if row[PINNED] and row[CLUSTER] in disabled_names and str(row[ID]) not in held.ids():
                held.waiting[str(row[ID])] = cluster_disabled((row[CLUSTER],))
        off = Node.objects.filter(cluster__enabled=False).select_related("cluster")
        disabled = Disabled(list(off), holders)
        if disabled.nodes:
            held = dataclasses.replace(held, disabled=disabled)
    out = {_uuid(i) for i in held.ids()}
    pending_jobs = []
    for row in rows:
        if row[ID] in out:
            continue
        spec = json.loads(row[SPEC])
        raw = (
            _request_of(*row[:SPEC], spec, *row[SPEC + 1 : ATTEMPTS]),
            spec.get("cpus_per_gpu"),
            spec.get("memory"),
        )
        if held.disabled is not None:
            held.disabled.requests[raw[0].id] = raw
        fitted = footprints.fit(*raw)
        if isinstance(fitted, st.Reason):  # no node it could use has its CPUs or memory
            held.waiting[str(row[ID])] = fitted
            continue
        if fitted.gpus_per_node != spec["gpus_per_node"]:
            held.charged[fitted.id] = footprint_note(fitted.gpus_per_node, spec)
        # mig_relayout: a GPU emptied for it stays its own until it starts there;
        # quota_exhausted with on_nodes: it preempted, and keeps what that freed until its
        # quota frees (scheduler.reasons.keeping).
        on_nodes = row[ON_NODES] if row[REASON_CODE] in CLAIMING_REASONS else None
        pending_jobs.append(
            st.PendingJob(
                request=fitted,
                attempts=row[ATTEMPTS],
                preempting_on=tuple(on_nodes) if isinstance(on_nodes, list) else (),
                preemptions=row[PREEMPTIONS],
            )
        )
    pending = tuple(pending_jobs)
    running = tuple(
        st.RunningJob(
            request=_request(j),
            start_time=_run_start(j, now),
            placement=_placement(j),
            gpu_model=j.gpu_model,
            # Being stopped (preempted, cancelled or suspended): it leaves within the grace
            # from its first stop (a cancel of a victim sends no second one).
            preempting_since=_stopping_since(j),
            preemptions=j.preemptions,
        )
        for j in active
        if j.cluster is not None
    )
    snap = st.Snapshot(
        nodes=nodes,
        teams=_teams(now),
        pending=pending,
        running=running,
        priority_classes=tuple(
            st.PriorityClass(p.name, p.value, p.preemptible) for p in PriorityClass.objects.all()
        ),
        mig_tables=_mig_tables(clusters.values()),
    )
    return snap, clusters, held


_open_run_start = (
    JobRun.objects.filter(job=OuterRef("pk"), ended_at__isnull=True)
    .order_by("-started_at")
    .values("started_at")[:1]
)


def _run_start(job: Job, now: datetime) -> float:
    """When the job's time limit began, for when it ends: its open run's start (a run the
    cluster held and started again restarts the limit, as Slurm's requeue and a restarted
    pod do); held with no run open, now (it ends a whole limit after it runs again at the
    soonest); else when it started, or was admitted."""
    started = getattr(job, "run_started", None)
    if started is None and job.state == S.RUNNING and job.reason.get("code") == CLUSTER_HOLDS:
        started = now
    return (started or job.started_at or job.admitted_at or now).timestamp()


def _stopping_since(job: Job) -> float | None:
    if job.state not in Job.STOPPING:
        return None
    return (job.stopping_since or job.updated_at).timestamp()


def _mig_tables(clusters: Any) -> tuple[st.MigModelTable, ...]:
    """Site MIG profile tables from each cluster's `mig_profiles` setting (model -> {
    compute_slices, memory_slices, profiles: [[name, compute, memory, max, [starts], size]],
    aliases}), e.g. transcribed from `nvidia-smi mig -lgip/-lgipp` on its nodes. A malformed
    table is logged and left out: the built-in table then applies."""
    tables = []
    for cluster in clusters:
        given = cluster.settings.get("mig_profiles") or {}
        if not isinstance(given, Mapping):  # one cluster's typo must not stop every cycle
            log.warning("cluster %s: ignoring mig_profiles: not a mapping", cluster.name)
            continue
        for model, data in given.items():
            try:
                table = st.MigModelTable(
                    model=str(model),
                    compute_slices=int(data["compute_slices"]),
                    memory_slices=int(data["memory_slices"]),
                    profiles=tuple(
                        (
                            str(n),
                            int(c),
                            int(m),
                            int(x),
                            tuple(int(i) for i in starts),
                            int(size),
                        )
                        for n, c, m, x, starts, size in data["profiles"]
                    ),
                    aliases=tuple(str(a) for a in data.get("aliases", ())),
                )
                # The scheduler's own checks (a placement past the GPU's end, a bad name),
                # here: raised inside schedule(), they would fail every cycle.
                mig.overrides_from((table,))
                tables.append(table)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                log.warning("cluster %s: ignoring mig_profiles[%r]: %s", cluster.name, model, exc)
    return tuple(tables)


def site_mig_tables(clusters: Iterable[Cluster]) -> dict[str, mig.ModelTable]:
    """The `overrides` for mig.geometry that the scheduler counts slices with."""
    return mig.overrides_from(_mig_tables(clusters))


def _request(job: Job) -> st.JobRequest:
    """A running job's request, with the GPUs per node its placement holds: its footprint
    when it was admitted (CPUs or memory charged in GPUs), whatever the inventory says now."""
    request = _request_of(
        job.id,
        job.team.slug,
        job.priority_class.name,
        job.submitted_at,
        job.spec,
        job.kind,
        job.pinned_cluster,
        job.cluster.name if job.cluster else None,
    )
    held = max((len(a.get("gpus", ())) for a in job.placement), default=0)
    if not request.mig_profile and held > request.gpus_per_node:
        return dataclasses.replace(request, gpus_per_node=held)
    return request


def _request_of(
    pk: Any,
    team: str,
    priority: str,
    submitted_at: datetime,
    spec: dict[str, Any],
    kind: str,
    pinned_cluster: bool,
    cluster: str | None,
) -> st.JobRequest:
    """A job's request from its fields (a pending job's row, as build_snapshot reads it)."""
    return st.JobRequest(
        id=str(pk),
        team=team,
        priority=priority,
        submit_time=submitted_at.timestamp(),
        nodes=spec["nodes"],
        gpus_per_node=spec["gpus_per_node"],
        gpu_model=spec.get("gpu_model"),
        mig_profile=spec.get("mig_profile"),
        time_limit_s=float(spec["time_limit"]) if spec.get("time_limit") else None,
        kind=kind,
        cluster=cluster if pinned_cluster else None,
    )


@dataclasses.dataclass(frozen=True)
class NodeShape:
    """What a node offers a job, as far as its footprint goes."""

    cluster: str
    gpu_model: str
    pool: str | None
    mig: bool
    gpus: int
    cpus: int | None  # None: unknown, no constraint
    memory_mb: int | None


def footprint_on(gpus: int, cpus: int | None, memory_mb: int | None, node: NodeShape) -> int | None:
    """GPUs a job is charged per node on this node (Slurm's MAX_TRES billing): the most of
    its GPUs, its CPUs over the node's CPUs per GPU and its memory over the node's memory per
    GPU, rounded up. A job taking most of a node's CPUs makes its GPUs unusable, so it holds
    them; it never takes more CPUs (memory) than its footprint's share of the node. None:
    the node has fewer CPUs or less memory than the job asks per node. A job of no GPUs that
    asks CPUs or memory is charged too, rounded up like any: rounded down, any number of
    them would fit one node's GPUs and overcommit its CPUs."""
    footprint = gpus
    for asked, offered in ((cpus, node.cpus), (memory_mb, node.memory_mb)):
        if asked and offered:
            if asked > offered:
                return None
            footprint = max(footprint, -(-asked * node.gpus // offered))
    return footprint


# What a job's footprint depends on: GPUs per node, MIG, cluster, model and pool it is
# limited to, CPUs and memory per node.
_FitKey = tuple[int, bool, str | None, str | None, str | None, int | None, int | None]


class Footprints:
    """Jobs' requests with their CPUs and memory charged in GPUs, against the nodes of one
    snapshot. Nodes differ: a job is charged the largest footprint over the nodes it could
    use (its cluster when pinned, its GPU model, whole-GPU or MIG nodes) that can hold it at
    all, so it fits wherever the scheduler puts it. Nodes too small for it are kept away by
    narrowing it to the cluster, model or pool of those that can hold it when that tells them
    apart, else by charging past their GPUs while a node that can hold it still fits it. A
    job no such node can hold gets a reason instead (`unsatisfiable`: it is never
    dispatched). MIG jobs are charged their slice; only whether a node can hold them is
    checked, as for a job of no GPUs that only MIG nodes could take. Jobs asking no CPUs and
    no memory are unchanged (footprint = GPUs)."""

    def __init__(self, nodes: Collection[Node]) -> None:
        self.shapes = tuple(
            sorted(
                {
                    NodeShape(
                        n.cluster.name,
                        n.gpu_model,
                        n.pool or None,
                        n.mig_enabled,
                        n.gpus,
                        n.cpus or None,
                        n.memory_mb or None,
                    )
                    for n in nodes
                },
                key=repr,
            )
        )
        self._fits: dict[_FitKey, dict[str, Any] | st.Reason] = {}

    def fit(
        self, request: st.JobRequest, cpus_per_gpu: int | None, memory_mb: int | None
    ) -> st.JobRequest | st.Reason:
        if not cpus_per_gpu and not memory_mb:
            return request
        # Per node, as the backends ask: --cpus-per-task, Kubernetes' cpu request.
        cpus = cpus_per_node(cpus_per_gpu, request.gpus_per_node) if cpus_per_gpu else None
        key = (
            request.gpus_per_node,
            bool(request.mig_profile),
            request.cluster,
            request.gpu_model,
            request.pool,
            cpus,
            memory_mb or None,
        )
        fitted = self._fits.get(key)
        if fitted is None:
            fitted = self._fits[key] = self._fit(*key)
        if isinstance(fitted, st.Reason):
            return fitted
        return dataclasses.replace(request, **fitted) if fitted else request

    def _fit(
        self,
        gpus: int,
        mig: bool,
        cluster: str | None,
        model: str | None,
        pool: str | None,
        cpus: int | None,
        memory_mb: int | None,
    ) -> dict[str, Any] | st.Reason:
        def matching(mig: bool) -> list[NodeShape]:
            return [
                n
                for n in self.shapes
                if n.mig == mig
                and (cluster is None or n.cluster == cluster)
                and (model is None or n.gpu_model == model)
                and (pool is None or n.pool == pool)
            ]

        eligible = matching(mig)
        if not eligible and not gpus and not mig:
            # Then it can only run on a MIG node, taking no slice: checked there as a slice
            # job is, not charged.
            mig, eligible = True, matching(True)
        on = [(n, footprint_on(gpus, cpus, memory_mb, n)) for n in eligible]
        holding = [(n, f) for n, f in on if f is not None]
        if not eligible:
            return {}  # no such node at all: the scheduler says so
        if not holding and not gpus and not mig:
            # No whole-GPU node holds it: a MIG node may, taking no slice (checked there,
            # not charged), where the scheduler can be kept off the nodes too small for it.
            return _onto_mig(eligible, matching(True), cpus, memory_mb, cluster, model, pool)
        if not holding:
            return _too_large(eligible, cpus, memory_mb, cluster, model, mig)
        if mig:
            return {}
        footprint = max(f for _, f in holding)
        changes: dict[str, Any] = {"gpus_per_node": footprint} if footprint != gpus else {}
        too_small = [n for n, f in on if f is None and n.gpus >= footprint]
        if not too_small:
            return changes

        def charge_within(keep: Callable[[NodeShape], bool]) -> int | None:
            """The charge over the nodes `keep` selects (their largest footprint), or None
            when one of them cannot hold the job yet has GPUs enough for that charge: the
            scheduler would place it there."""
            charged = max(f for n, f in holding if keep(n))
            if any(f is None and n.gpus >= charged for n, f in on if keep(n)):
                return None
            return charged

        for field, given in (("cluster", cluster), ("gpu_model", model), ("pool", pool)):
            if given is not None:
                continue
            # A value some nodes that hold it have and no node too small for it has: the
            # one whose nodes offer the most GPUs (then by name), charged over its nodes.
            small = {getattr(n, field) for n in too_small}
            offered: dict[str, int] = {}
            for n, _ in holding:
                value = getattr(n, field)
                if value is not None and value not in small:
                    offered[value] = offered.get(value, 0) + n.gpus
            for value in sorted(offered, key=lambda v: (-offered[v], v)):
                charged = charge_within(lambda n, f=field, v=value: getattr(n, f) == v)
                if charged is None:
                    continue  # narrowed, the smaller charge fits a node too small for it
                narrowed: dict[str, Any] = {field: value}
                if charged != gpus:
                    narrowed["gpus_per_node"] = charged
                return narrowed
        # Each value is shared with small nodes: a cluster, model and pool together may not be.
        offered_by: dict[tuple[str, str, str | None], int] = {}
        for n, _ in holding:
            key = (n.cluster, n.gpu_model, n.pool)
            offered_by[key] = offered_by.get(key, 0) + n.gpus
        for c, m, p in sorted(offered_by, key=lambda k: (-offered_by[k], repr(k))):
            if (cluster is not None and c != cluster) or (pool is not None and p != pool):
                continue
            if any(
                n.cluster == c and n.gpu_model == m and (p is None or n.pool == p)
                for n in too_small
            ):
                continue
            narrowed = {"cluster": c, "gpu_model": m} | ({"pool": p} if p else {})
            within = charge_within(
                lambda n, c=c, m=m, p=p: (
                    (n.cluster, n.gpu_model) == (c, m) and (not p or n.pool == p)
                )
            )
            if within is None:
                continue
            return narrowed | ({"gpus_per_node": within} if within != gpus else {})
        past = max(n.gpus for n in too_small) + 1
        if any(n.gpus >= past for n, _ in holding):
            changes["gpus_per_node"] = past
            return changes
        # Nothing the scheduler sees keeps it off the nodes too small for it: placed there,
        # the cluster would refuse it. It waits, saying what would let it run.
        return _inseparable(holding, too_small, cpus, memory_mb)


def footprint_note(charged: int, spec: dict[str, Any]) -> tuple[int, str]:
    """The GPUs per node a job is charged beyond its own, and what for (its spec's CPUs and
    memory per node, as the backends ask them)."""
    asked = []
    if spec.get("cpus_per_gpu"):
        asked.append(f"{cpus_per_node(spec['cpus_per_gpu'], spec['gpus_per_node'])} CPUs")
    if spec.get("memory"):
        asked.append(f"{spec['memory']} MB of memory")
    return charged, f"charged {charged} GPUs per node for its {' and '.join(asked)} per node"


def charged_reason(reason: st.Reason, note: tuple[int, str]) -> st.Reason:
    """A wait reason in the scheduler's words, which count GPUs charged, with what they are
    charged for: a user who asked for one GPU is told why "6 free GPUs" are needed."""
    charged, why = note
    return st.Reason(
        reason.code,
        f"{reason.message} ({why})",
        (*reason.details, ("gpus_charged_per_node", charged)),
    )


def _inseparable(
    holding: list[tuple[NodeShape, int | None]],
    too_small: list[NodeShape],
    cpus: int | None,
    memory_mb: int | None,
) -> st.Reason:
    asked = " and ".join(
        a for a in (f"{cpus} CPUs" if cpus else "", f"{memory_mb} MB" if memory_mb else "") if a
    )
    large = {(n.cluster, n.gpu_model, n.pool) for n, _ in holding}
    small = sorted(
        f"{c}/{m}/{p or '-'}"
        for c, m, p in {(n.cluster, n.gpu_model, n.pool) for n in too_small}
        if (c, m, p) in large
    ) or ["its cluster, GPU model and pool"]
    return st.Reason(
        "unsatisfiable",
        f"needs {asked} per node, which only some nodes of {', '.join(small)} have; the others"
        " look the same to the scheduler (cluster, GPU model, pool, GPUs), so it cannot be kept"
        " off them: ask for fewer, or give the larger nodes a pool of their own and ask for it",
        (("cpus_per_node", cpus), ("memory_mb_per_node", memory_mb)),
    )


def _onto_mig(
    whole: list[NodeShape],
    mig: list[NodeShape],
    cpus: int | None,
    memory_mb: int | None,
    cluster: str | None,
    model: str | None,
    pool: str | None,
) -> dict[str, Any] | st.Reason:
    """A job of no GPUs that none of the `whole`-GPU nodes it could use can hold, narrowed
    to a cluster, model or pool (or the three together) of the `mig` nodes that hold it and
    of no node too small for it; why it waits when there is none."""
    holding = [n for n in mig if footprint_on(0, cpus, memory_mb, n) is not None]
    if not holding:
        return _too_large(whole + mig, cpus, memory_mb, cluster, model, False)
    too_small = whole + [n for n in mig if n not in holding]
    for name, given in (("cluster", cluster), ("gpu_model", model), ("pool", pool)):
        if given is not None:
            continue
        small = {getattr(n, name) for n in too_small}
        offered: dict[str, int] = {}
        for n in holding:
            value = getattr(n, name)
            if value is not None and value not in small:
                offered[value] = offered.get(value, 0) + n.gpus
        if offered:
            return {name: min(offered, key=lambda v: (-offered[v], v))}
    # Each value is shared with small nodes: a cluster, model and pool together may not be.
    for c, m, p in sorted({(n.cluster, n.gpu_model, n.pool) for n in holding}, key=repr):
        if not any(
            n.cluster == c and n.gpu_model == m and (p is None or n.pool == p) for n in too_small
        ):
            return {"cluster": c, "gpu_model": m} | ({"pool": p} if p else {})
    return _inseparable([(n, 0) for n in holding], too_small, cpus, memory_mb)


def _too_large(
    nodes: list[NodeShape],
    cpus: int | None,
    memory_mb: int | None,
    cluster: str | None,
    model: str | None,
    mig: bool,
) -> st.Reason:
    """Why no node the job could use can hold its CPUs or memory (all such nodes' are known:
    a node of unknown CPUs or memory holds any)."""
    kind = (f"{model} " if model else "") + ("MIG " if mig else "")
    where = f"of cluster {cluster}" if cluster else "of any cluster"
    most_cpus = max((n.cpus or 0 for n in nodes), default=0)
    most_memory = max((n.memory_mb or 0 for n in nodes), default=0)
    if cpus and cpus > most_cpus:
        message = f"needs {cpus} CPUs per node; {kind}nodes {where} have at most {most_cpus}"
    elif memory_mb and memory_mb > most_memory:
        message = (
            f"needs {memory_mb} MB of memory per node; {kind}nodes {where} have at most"
            f" {most_memory} MB"
        )
    else:
        message = (
            f"needs {cpus} CPUs and {memory_mb} MB of memory per node; no {kind}node {where}"
            " has both"
        )
    return st.Reason(
        "unsatisfiable",
        message,
        (
            ("cpus_per_node", cpus),
            ("memory_mb_per_node", memory_mb),
            ("max_cpus", most_cpus),
            ("max_memory_mb", most_memory),
        ),
    )


def _placement(job: Job) -> st.Placement:
    assert job.cluster is not None
    allocs = []
    for a in job.placement:
        mig = a.get("mig")
        allocs.append(
            st.NodeAlloc(
                node=f"{job.cluster.name}{SEP}{a['node']}",
                gpus=tuple(a.get("gpus", ())),
                mig=st.MigSlot(mig["gpu"], mig["profile"], mig["start"], mig["size"])
                if mig
                else None,
            )
        )
    return st.Placement(tuple(allocs))


def _mig_holders(active: list[Job]) -> dict[tuple[str, str], Placed]:
    """(cluster, node) -> (gpu, start) -> (id of the gpuq job placed on that MIG instance,
    whether the cluster runs it)."""
    holders: dict[tuple[str, str], dict[tuple[int, int], tuple[str, bool]]] = defaultdict(dict)
    for job in active:
        for a in job.placement:
            if a.get("mig") and job.cluster is not None:
                holders[(job.cluster.name, a["node"])][(a["mig"]["gpu"], a["mig"]["start"])] = (
                    str(job.id),
                    job.state in Job.RUNNING_STATES,
                )
    return holders


def _node(node: Node, holders: Mapping[tuple[str, str], Placed]) -> st.Node:
    mig_gpus: tuple[st.Gpu, ...] = ()
    if node.mig_enabled:
        placed = holders.get((node.cluster.name, node.name), {})
        # Used outside gpuq's placements, each slice once (a mark of one of its jobs is not).
        outside = held_outside(node.mig, placed)
        per_gpu: dict[int, list[st.MigInstance]] = defaultdict(list)
        for inst in node.mig:
            key = (inst["gpu"], inst["start"])
            holder = placed[key][0] if key in placed else outside.get(key)
            per_gpu[inst["gpu"]].append(
                st.MigInstance(inst["profile"], inst["start"], inst["size"], holder)
            )
        mig_gpus = tuple(
            st.Gpu(i, tuple(sorted(per_gpu.get(i, []), key=lambda m: m.start)))
            for i in range(node.gpus)
        )
    return st.Node(
        name=f"{node.cluster.name}{SEP}{node.name}",
        gpu_model=node.gpu_model,
        gpus=node.gpus,
        pool=node.pool or None,
        mig=node.mig_enabled,
        state=node.state,
        labels=tuple(sorted((k, str(v)) for k, v in node.labels.items())),
        mig_gpus=mig_gpus,
        cluster=node.cluster.name,
        mig_fixed=node.mig_enabled and not relays_mig(node.cluster),
    )


def relays_mig(cluster: Cluster) -> bool:
    """Can gpuq change a MIG layout there? Local: yes, at once; Kubernetes: through the GPU
    Operator's named layouts (`mig_configs`), if the cluster has any; Slurm: never (its
    gres.conf is the site's). Elsewhere jobs take the slices there are, and a layout that
    would serve the queue is only proposed to admins."""
    if cluster.kind == Cluster.Kind.LOCAL:
        return True
    configs = cluster.settings.get("mig_configs") if cluster.kind == "kubernetes" else None
    return isinstance(configs, Mapping) and bool(configs)


def _teams(now: datetime) -> tuple[st.Team, ...]:
    quotas: dict[int, list[st.Quota]] = defaultdict(list)
    for q in Quota.objects.all():
        quotas[q.team_id].append(
            st.Quota(
                gpu_model=q.gpu_model,
                nominal=q.nominal_gpus,
                borrowing_limit=q.borrowing_limit_gpus,
                lending_limit=q.lending_limit_gpus,
                max_running_jobs=q.max_running_jobs,
            )
        )
    usage = _usage_by_team(now)
    return tuple(
        st.Team(name=t.slug, weight=t.weight, quotas=tuple(quotas[t.pk]), usage=usage.get(t.pk, ()))
        for t in Team.objects.all()
    )


def _usage_by_team(now: datetime) -> dict[int, tuple[st.UsageBucket, ...]]:
    """Each team's GPU-seconds, every second decayed from when it was used (a running job's
    up to now), handed over as one bucket at now. The scheduler decays a bucket by its age
    alone: one per run at its end would count a week-long run as if used at its end. One
    aggregate in SQL, per team, over the runs that ended within USAGE_WINDOW_HALF_LIVES."""
    half_life = settings.GPUQ_FAIR_SHARE_HALF_LIFE_S
    rate = math.log(2) / half_life
    since = now - timedelta(seconds=half_life * USAGE_WINDOW_HALF_LIVES)
    at = now.timestamp()
    end = Least(Coalesce(_Epoch("ended_at"), Value(at)), Value(at))
    start = Least(Greatest(_Epoch("started_at"), Value(since.timestamp())), end)
    # The integral of gpus * 2^-(now - t)/half_life over the run.
    decayed = F("gpus") * (Exp(rate * (end - at)) - Exp(rate * (start - at))) / rate
    rows = (
        JobRun.objects.filter(Q(ended_at__isnull=True) | Q(ended_at__gte=since))
        .values("team_id")
        .order_by()
        .annotate(used=Sum(decayed, output_field=FloatField()))
        .values_list("team_id", "used")
    )
    return {team: (st.UsageBucket(at, used),) for team, used in rows if used and used > 0}


class _Epoch(Func):
    """A timestamp's seconds since the epoch, as a float (UTC on both databases)."""

    output_field = FloatField()

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(
            compiler, connection, template="EXTRACT(EPOCH FROM %(expressions)s)::float8", **extra
        )

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # Django stores a UTC timestamp as text; julianday reads it (day 2440587.5 is 1970-01-01).
        return self.as_sql(
            compiler,
            connection,
            template="((julianday(%(expressions)s) - 2440587.5) * 86400.0)",
            **extra,
        )


def apply_decisions(
    decisions: st.Decisions, clusters: dict[str, Cluster], now: datetime, held: Held | None = None
) -> dict[str, Any]:
    held = held or Held()
    jobs = Job.objects.in_bulk(
        [s.job_id for s in decisions.starts] + [p.job_id for p in decisions.preemptions]
    )
    admitted: list[str] = []
    # The site's MIG tables, as the scheduler counted slices with them.
    site_tables = site_mig_tables(clusters.values())
    for start in decisions.starts:
        job = jobs.get(_uuid(start.job_id))
        cluster_name = start.placement.allocs[0].node.split(SEP, 1)[0]
        if job is None or job.state != S.PENDING:
            continue
        message = "admitted on " + ", ".join(a.node for a in start.placement.allocs)
        if start.borrowed:
            message += " (borrowing idle quota of other teams)"
        try:
            transition(
                job,
                S.ADMITTED,
                code="admitted",
                message=message,
                cluster=clusters[cluster_name],
                placement=_placement_json(start.placement),
                gpu_model=start.gpu_model,
                # A slice's share of a GPU is known once its model is (1/7, or 1/4 on an
                # A30), and whole GPUs are the footprint the scheduler placed (CPUs and
                # memory charged in GPUs): usage and the quota report count as it did.
                gpus=_charged_gpus(job.spec, start, site_tables),
                borrowed=start.borrowed,
                admitted_at=now,
                queue_position=None,
                estimated_start=None,
                reason={"code": "admitted", "message": "dispatching to the cluster", "details": {}},
            )
            admitted.append(start.job_id)
        except StaleState:
            continue
    victims: list[Job] = []
    for pre in decisions.preemptions:
        job = jobs.get(_uuid(pre.job_id))
        # A job being handed to its backend cannot be stopped yet (no external id until
        # the submit returns): the preemptor keeps waiting and the next cycle decides again.
        if job is None or job.state not in (S.QUEUED, S.RUNNING, S.ADMITTED):
            continue
        try:
            if job.state in (S.ADMITTED,):
                transition(
                    job,
                    S.PENDING,
                    code="preempted_before_start",
                    message=pre.message,
                    reason={
                        "code": "preempted_before_start",
                        "message": f"{pre.message}; waiting again",
                        "details": {"by_job": pre.by_job_id, "kind": pre.kind},
                    },
                    **unplaced(job),
                )
                # Its GPUs are free at once: the preemptor need not wait for the next cycle.
                request_cycle()
                continue
            transition(
                job,
                S.PREEMPTING,
                code=f"preempting_{pre.kind}",
                message=pre.message,
                reason={
                    "code": "preempting",
                    "message": pre.message,
                    "details": {"by_job": pre.by_job_id, "kind": pre.kind},
                },
            )
            victims.append(job)
        except StaleState:
            continue
    waits = decisions.waits
    if held.charged:
        # One reason object per distinct (reason, note): the write sends each once.
        noted: dict[tuple[int, tuple[int, str]], st.Reason] = {}

        def with_note(w: st.Wait) -> st.Wait:
            note = held.charged.get(w.job_id)
            if note is None:
                return w
            key = (id(w.reason), note)
            reason = noted.get(key)
            if reason is None:
                reason = noted[key] = charged_reason(w.reason, note)
            return w._replace(reason=reason)

        waits = tuple(with_note(w) for w in waits)
    _store_waits(waits, now, held.waiting)
    never = 0
    for job in Job.objects.filter(pk__in=list(held.never), state=S.PENDING):
        message = held.never[str(job.pk)]
        try:
            transition(
                job,
                S.CANCELLED,
                code="after_never_met",
                message=message,
                reason={"code": "after_never_met", "message": message, "details": {}},
            )
            never += 1
        except StaleState:
            continue
    relaid = _apply_relayouts(decisions.relayouts, clusters)
    _after_commit(admitted, victims)
    return {
        "admitted": len(admitted),
        "preempted": len(victims),
        "waiting": len(decisions.waits) + len(held.waiting),
        "cancelled_after": never,
        "relayouts": relaid,
    }


def _charged_gpus(
    spec: dict[str, Any], start: st.Start, site_tables: Mapping[str, mig.ModelTable]
) -> float:
    if spec.get("mig_profile"):
        return mig.gpu_fraction(start.gpu_model or "", spec["mig_profile"], site_tables)
    return float(sum(len(a.gpus) for a in start.placement.allocs))


def _placement_json(placement: st.Placement) -> list[dict[str, Any]]:
    out = []
    for a in placement.allocs:
        item: dict[str, Any] = {"node": a.node.split(SEP, 1)[1], "gpus": list(a.gpus)}
        if a.mig is not None:
            item["mig"] = {
                "gpu": a.mig.gpu,
                "profile": a.mig.profile,
                "start": a.mig.start,
                "size": a.mig.size,
            }
        out.append(item)
    return out


WAIT_COLUMNS = ("id", "state", "reason", "queue_position", "estimated_start")


# job id, why it waits, position (None: not in the scheduler's order), estimated start
WaitRow = tuple[str, st.Reason, int | None, float | None]


def _store_waits(
    waits: tuple[st.Wait, ...], now: datetime, held: dict[str, st.Reason] | None = None
) -> None:
    """Each waiting job's reason, position and estimate (and each held-back job's reason),
    written only where they changed (a job leaving the head of the queue moves every one
    behind it). A job that left the queue while the cycle ran is not given a position; one
    submitted meanwhile has none yet."""
    rows: list[WaitRow] = [(w.job_id, w.reason, w.position, w.estimated_start) for w in waits]
    rows += [(job_id, reason, None, None) for job_id, reason in (held or {}).items()]
    if connection.vendor == "postgresql":
        _write_waits(rows)
        return
    stored = {
        str(pk): rest
        for pk, *rest in Job.objects.filter(state=S.PENDING).values_list(
            "id", "reason", "queue_position", "estimated_start"
        )
    }
    jobs = []
    for job_id, why, position, estimate in rows:
        reason = _reason_json(why)
        est = datetime.fromtimestamp(estimate, tz=now.tzinfo) if estimate is not None else None
        if job_id in stored and stored[job_id] != [reason, position, est]:
            jobs.append(Job(pk=job_id, reason=reason, queue_position=position, estimated_start=est))
    Job.objects.bulk_update(jobs, ["reason", "queue_position", "estimated_start"], batch_size=1000)
    Job.objects.filter(pk__in=[j.pk for j in jobs]).exclude(state=S.PENDING).update(
        queue_position=None, estimated_start=None
    )


def _write_waits(waits: list[WaitRow]) -> None:
    """PostgreSQL: one UPDATE whose rows come as two JSON documents (each distinct reason
    once, and each job's id, reason number, position and estimate), and which writes only the
    rows that differ from the stored ones. Reading the 10,000 stored waits back to compare
    them in Python took a third of a cycle, a parameter per value as long again, and Django's
    bulk_update (a CASE per column and row) 6.7 s (bench/cycle_bench.py)."""
    q = connection.ops.quote_name
    f = {name: q(Job._meta.get_field(name).column) for name in WAIT_COLUMNS}
    table = q(Job._meta.db_table)
    numbers: dict[int, int] = {}  # id() of a Reason the scheduler shares among jobs -> its number
    reasons: list[dict[str, Any]] = []
    rows = []
    for job_id, why, position, estimate in waits:
        n = numbers.get(id(why))
        if n is None:
            n = numbers[id(why)] = len(reasons)
            reasons.append(_reason_json(why))
        rows.append((job_id, n, position, estimate))
    # Only the model's own table and column names are formatted in; values are parameters.
    sql = (
        f"UPDATE {table} AS j SET {f['reason']} = r.reason,"  # noqa: S608
        f" {f['queue_position']} = v.pos, {f['estimated_start']} = to_timestamp(v.est)"
        " FROM jsonb_to_recordset(%s::jsonb) AS v(id uuid, r integer, pos integer, est float8)"
        " JOIN jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS r(reason, n) ON r.n = v.r + 1"
        f" WHERE j.{f['id']} = v.id AND j.{f['state']} = %s"
        f" AND (j.{f['reason']} IS DISTINCT FROM r.reason"
        f" OR j.{f['queue_position']} IS DISTINCT FROM v.pos"
        f" OR j.{f['estimated_start']} IS DISTINCT FROM to_timestamp(v.est))"
    )
    doc = json.dumps([{"id": pk, "r": n, "pos": pos, "est": est} for pk, n, pos, est in rows])
    with connection.cursor() as cursor:
        cursor.execute(sql, [doc, json.dumps(reasons), S.PENDING])


def _reason_json(reason: st.Reason) -> dict[str, Any]:
    out = reason.as_dict()
    out["details"] = {k: _jsonable(v) for k, v in out["details"].items()}
    return out


def _apply_relayouts(relayouts: tuple[st.MigRelayout, ...], clusters: dict[str, Cluster]) -> int:
    """Carry out the scheduler's MIG relayouts, per kind of cluster:
    local - simulated GPUs: applied at once, by the backend and in inventory;
    kubernetes - the node's new layout, if a named layout of the cluster's `mig_configs`
      catalogue matches it, is requested from the GPU Operator after commit (the node drains
      until the MIG manager reports success; a failure keeps it drained with the reason);
    otherwise (Slurm, no matching named layout, or advisory: a node gpuq cannot re-lay out,
    relays_mig) - stored as a proposal for admins."""
    by_node: dict[str, list[st.MigRelayout]] = defaultdict(list)
    for r in relayouts:
        by_node[r.node].append(r)
    for qualified, changes in by_node.items():
        cluster_name, node_name = qualified.split(SEP, 1)
        cluster = clusters[cluster_name]
        node = Node.objects.filter(cluster=cluster, name=node_name).first()
        if node is None:
            continue
        new = {
            r.gpu: [
                {"gpu": r.gpu, "profile": i.profile, "start": i.start, "size": i.size}
                for i in r.instances
            ]
            for r in changes
        }
        if cluster.kind == Cluster.Kind.LOCAL and not any(r.advisory for r in changes):
            from .dispatch import backend_for

            for gpu, layout in new.items():
                backend_for(cluster).apply_mig_layout(node_name, gpu, layout)
            node.mig = [m for m in node.mig if m["gpu"] not in new] + [
                i for layout in new.values() for i in layout
            ]
            node.save(update_fields=["mig", "updated_at"])
            continue
        advisory = any(r.advisory for r in changes)
        config = (
            _named_layout(cluster, node, new)
            if cluster.kind == "kubernetes" and not advisory
            else None
        )
        message = "; ".join(r.message for r in changes)
        if config is not None:
            node.state = Node.State.DRAIN
            node.reason = f"MIG reconfiguration to {config!r} requested: {message}"[:256]
            node.save(update_fields=["state", "reason", "updated_at"])
            _apply_named_layout_on_commit(node.pk, config)
        else:
            node.mig_proposals = {
                **node.mig_proposals,
                **{str(g): {"layout": layout, "message": message} for g, layout in new.items()},
            }
            node.save(update_fields=["mig_proposals", "updated_at"])
    return len(relayouts)


def _named_layout(cluster: Cluster, node: Node, new: dict[int, list[dict[str, Any]]]) -> str | None:
    """The catalogue entry whose per-GPU profiles equal the node's layout after `new`."""
    per_gpu: dict[int, list[str]] = defaultdict(list)
    for m in node.mig:
        if m["gpu"] not in new:
            per_gpu[m["gpu"]].append(m["profile"])
    for gpu, layout in new.items():
        per_gpu[gpu] = [i["profile"] for i in layout]
    wanted = [sorted(per_gpu.get(g, [])) for g in range(node.gpus)]
    configs = cluster.settings.get("mig_configs") or {}
    if not isinstance(configs, Mapping):  # refused by the sync already; not the cycle's to stop
        return None
    for name, layouts in configs.items():
        if not isinstance(layouts, list):
            continue
        if layouts and all(isinstance(p, str) for p in layouts):
            layouts = [layouts] * node.gpus  # one list: the same layout on every GPU
        try:
            if [sorted(g) for g in layouts] == wanted:
                return str(name)
        except TypeError:  # not lists of profile names
            continue
    return None


def _apply_named_layout_on_commit(node_id: int, config: str) -> None:
    if settings.CELERY_BROKER_URL:
        from .tasks import apply_mig_layout

        transaction.on_commit(lambda: apply_mig_layout.delay(node_id, config))
    else:
        from .dispatch import apply_mig_layout as apply_now

        # Robust, as the commit's stops and dispatches are: a relayout the cluster refuses
        # now must not drop the hooks after it (the next cycle plans it again).
        transaction.on_commit(lambda: apply_now(node_id, config), robust=True)


def _after_commit(admitted: list[str], victims: list[Job]) -> None:
    from .dispatch import request_stop

    for job in victims:
        request_stop(job)
    if settings.CELERY_BROKER_URL and admitted:
        from .tasks import dispatch_job

        transaction.on_commit(lambda: [dispatch_job.delay(j) for j in admitted])


def _uuid(value: str) -> Any:
    import uuid

    return uuid.UUID(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    return value


PREVIEW_ID = "00000000-0000-0000-0000-000000000000"


def preview_job(
    team_slug: str,
    spec: dict[str, Any],
    *,
    pinned_cluster: str | None = None,
    priority: str = "normal",
    now: datetime | None = None,
) -> dict[str, Any]:
    """What would happen to this (validated) spec if submitted now: starts at once, or waits
    with which reason, position and estimated start. Runs the real scheduler on the current
    snapshot plus the hypothetical job; writes nothing. Its reads (the `after` jobs, the
    snapshot, the nodes the job is fitted to) are one view, as a cycle's are."""
    now = now or timezone.now()
    if spec.get("hold"):
        return {
            "starts_now": False,
            "reason": {
                "code": "suspended",
                "message": "held at submit: it waits until resumed",
                "details": {},
            },
            "position": None,
            "estimated_start": None,
        }
    return consistent_read(_preview, team_slug, spec, pinned_cluster, priority, now)


def _preview(
    team_slug: str,
    spec: dict[str, Any],
    pinned_cluster: str | None,
    priority: str,
    now: datetime,
) -> dict[str, Any]:
    after = spec.get("after") or []
    if after:
        reason, never = after_status(after, _states_and_names(after), team_slug)
        if never is not None:
            reason = st.Reason("after_never_met", never)
        if reason is not None:
            return {
                "starts_now": False,
                "reason": _reason_json(reason),
                "position": None,
                "estimated_start": None,
            }
    snap, _, held = build_snapshot(now)
    nodes = Node.objects.filter(cluster__enabled=True).select_related("cluster")
    request = st.JobRequest(
        id=PREVIEW_ID,
        team=team_slug,
        priority=priority,
        submit_time=now.timestamp(),
        nodes=spec["nodes"],
        gpus_per_node=spec["gpus_per_node"],
        gpu_model=spec.get("gpu_model"),
        mig_profile=spec.get("mig_profile"),
        time_limit_s=float(spec["time_limit"]) if spec.get("time_limit") else None,
        kind=spec.get("kind", "training"),
        cluster=pinned_cluster,
    )
    raw = (request, spec.get("cpus_per_gpu"), spec.get("memory"))

    def unless_disabled(reason: st.Reason) -> st.Reason:
        if reason.code != "unsatisfiable" or held.disabled is None:
            return reason
        where = held.disabled.could_hold({PREVIEW_ID: raw}, snap, now)
        return cluster_disabled(where[PREVIEW_ID]) if where else reason

    fitted = Footprints(list(nodes.exclude(state=Node.State.DOWN))).fit(*raw)
    if isinstance(fitted, st.Reason):
        return {
            "starts_now": False,
            "reason": _reason_json(unless_disabled(fitted)),
            "position": None,
            "estimated_start": None,
        }
    snap = dataclasses.replace(snap, pending=(*snap.pending, st.PendingJob(fitted)))
    decisions = decide(snap, now)
    note = (
        footprint_note(fitted.gpus_per_node, spec)
        if fitted.gpus_per_node != spec["gpus_per_node"]
        else None
    )
    if any(s.job_id == PREVIEW_ID for s in decisions.starts):
        return {"starts_now": True, "reason": None, "position": None, "estimated_start": None}
    wait = next((w for w in decisions.waits if w.job_id == PREVIEW_ID), None)
    if wait is None:
        return {"starts_now": False, "reason": None, "position": None, "estimated_start": None}
    est = wait.estimated_start
    reason = unless_disabled(wait.reason)
    return {
        "starts_now": False,
        "reason": _reason_json(
            charged_reason(reason, note) if note and reason is wait.reason else reason
        ),
        "position": wait.position,
        "estimated_start": datetime.fromtimestamp(est, tz=now.tzinfo) if est is not None else None,
    }
