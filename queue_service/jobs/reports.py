"""Read models for the UI: usage reports, quota usage, MIG availability and cluster totals.
Read-only; every writer stays in services.py. Nothing here reads the clock: `now` comes in as
an argument, so tests drive it with a fake one."""

from __future__ import annotations

import csv
import io
import uuid
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db.models import Count, Min, Q, Sum

from queue_service.clusters.models import Cluster, Node
from queue_service.tenancy.models import Quota, Team
from scheduler.mig import ModelTable, geometry, parse_profile

from .models import Job, JobArray, JobRun

# --- usage: GPU-hours per user per day -------------------------------------------------------

# A report's period, for the UI and the API alike: the last DEFAULT_DAYS days unless asked,
# at most MAX_DAYS, no day before EARLIEST (days far from now are typos, and near date.min or
# date.max the report's arithmetic overflows).
DEFAULT_DAYS = 14
MAX_DAYS = 366
EARLIEST = date(2000, 1, 1)
# GPU-hours as the API, the CSV and `gpuq usage` give them: a 1g slice of an A100 (1/7 of a
# GPU) for an hour is 0.1429.
HOURS_DECIMALS = 4
# GPUs in use as the API gives them (a 1g slice: 0.1429).
QUOTA_DECIMALS = 4


def split_by_day(start: datetime, end: datetime) -> list[tuple[date, float]]:
    """Seconds of [start, end) that fall on each UTC day."""
    out: list[tuple[date, float]] = []
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    while start < end:
        next_midnight = datetime.combine(start.date() + timedelta(days=1), time(), UTC)
        stop = min(end, next_midnight)
        out.append((start.date(), (stop - start).total_seconds()))
        start = stop
    return out


@dataclass(frozen=True)
class UsageReport:
    team: str
    days: tuple[date, ...]  # every day of the period, oldest first
    users: tuple[str, ...]  # users with usage, alphabetical
    gpu_hours: dict[tuple[date, str], float]  # (day, user) -> GPU-hours; absent = 0

    def total(self, user: str | None = None) -> float:
        return sum(h for (_, u), h in self.gpu_hours.items() if user is None or u == user)


def usage_report(team: Team, first: date, last: date, now: datetime) -> UsageReport:
    """GPU-hours per user per UTC day of [first, last] for one team, from its jobs' runs (a job
    requeued after a preemption has one per attempt; a run still going counts up to `now`).
    A run charged no GPUs (a job of none, asking no CPUs nor memory) is no usage: its user
    is not listed for it."""
    lo = datetime.combine(first, time(), UTC)
    hi = datetime.combine(last + timedelta(days=1), time(), UTC)
    runs = (
        JobRun.objects.filter(team=team, started_at__lt=hi, gpus__gt=0)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=lo))
        .values_list("user__username", "gpus", "started_at", "ended_at")
    )
    hours: dict[tuple[date, str], float] = defaultdict(float)
    for user, gpus, started_at, ended_at in runs:
        end = min(ended_at or now, hi)
        for day, seconds in split_by_day(max(started_at, lo), end):
            hours[(day, user)] += gpus * seconds / 3600
    days = tuple(first + timedelta(days=i) for i in range((last - first).days + 1))
    return UsageReport(
        team=team.slug,
        days=days,
        users=tuple(sorted({u for _, u in hours})),
        gpu_hours=dict(hours),
    )


def usage_csv(report: UsageReport) -> str:
    """One row per day and user with usage, in GPU-hours as the API gives them (HOURS_DECIMALS).
    Cells a spreadsheet would run as a formula are prefixed with a quote."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["day", "team", "user", "gpu_hours"])
    for day in report.days:
        for user in report.users:
            value = report.gpu_hours.get((day, user))
            if value:
                writer.writerow(
                    [
                        day.isoformat(),
                        _cell(report.team),
                        _cell(user),
                        f"{value:.{HOURS_DECIMALS}f}",
                    ]
                )
    return out.getvalue()


def _cell(text: str) -> str:
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def team_usage(team: Team, first: date, last: date, now: datetime) -> dict[str, Any]:
    """The API's usage answer: usage_report's GPU-hours per user and per day with usage, and
    quota_usage's quotas in use now."""
    report = usage_report(team, first, last, now)
    return {
        "team": team.slug,
        "from": first,
        "to": last,
        "total_gpu_hours": round(report.total(), HOURS_DECIMALS),
        "users": [
            {"user": u, "gpu_hours": round(report.total(u), HOURS_DECIMALS)} for u in report.users
        ],
        "days": [
            {"day": day, "user": u, "gpu_hours": round(report.gpu_hours[(day, u)], HOURS_DECIMALS)}
            for day in report.days
            for u in report.users
            if report.gpu_hours.get((day, u))
        ],
        "quotas": [
            {
                "gpu_model": q.gpu_model,
                "used_gpus": round(q.used, QUOTA_DECIMALS),
                "nominal_gpus": q.nominal,
                "borrowing_limit_gpus": q.borrowing_limit,
                "borrowed_gpus": round(q.borrowed, QUOTA_DECIMALS),
            }
            for q in quota_usage([team])
        ],
    }


# --- quota usage -------------------------------------------------------------------------------


# Within this of nominal a team is not borrowing: the scheduler's own tolerance
# (scheduler/quota.py). 35 1g slices summed one by one are a hair over a nominal of 5.
BORROW_TOLERANCE = 1e-9


@dataclass(frozen=True)
class QuotaUsage:
    team: str
    gpu_model: str
    used: float  # unrounded, as the scheduler sums it: round only to show it
    nominal: float
    borrowing_limit: float | None  # None = unlimited
    lending_limit: float | None
    max_running_jobs: int | None
    # False: no quota (nor "*" quota) of the team covers this model, yet its jobs hold GPUs
    # of it (the quota was deleted while they ran): nominal 0, all of it borrowed.
    quota: bool = True

    @property
    def borrowed(self) -> float:
        over = self.used - self.nominal
        return over if over > BORROW_TOLERANCE else 0.0


def quota_usage(teams: Sequence[Team]) -> list[QuotaUsage]:
    """Per quota of these teams: GPUs held by the team's active jobs of that model against its
    nominal quota and borrowing limit. A "*" quota holds the models the team has no quota of
    their own for, as the scheduler charges them (scheduler/quota.py, Ledger.key). GPUs held
    on a model no quota covers get a row of their own (`quota` False), nominal 0 and
    borrowing limit 0: the scheduler counts them all borrowed, reclaimable (Ledger.unquoted)."""
    held: dict[tuple[int, str], float] = defaultdict(float)
    for team_id, model, gpus in (
        Job.objects.filter(team__in=teams, state__in=Job.ACTIVE)
        .values_list("team_id", "gpu_model")
        .annotate(total=Sum("gpus"))
    ):
        held[(team_id, model)] += gpus or 0.0
    quotas = list(
        Quota.objects.filter(team__in=teams)
        .select_related("team")
        .order_by("team__slug", "gpu_model")
    )
    own = {(q.team_id, q.gpu_model) for q in quotas}
    out = []
    for q in quotas:
        used = sum(
            g
            for (team_id, model), g in held.items()
            if team_id == q.team_id
            and (
                model == q.gpu_model
                or (q.gpu_model == Quota.ANY_MODEL and (team_id, model) not in own)
            )
        )
        out.append(
            QuotaUsage(
                team=q.team.slug,
                gpu_model=q.gpu_model,
                used=used,
                nominal=q.nominal_gpus,
                borrowing_limit=q.borrowing_limit_gpus,
                lending_limit=q.lending_limit_gpus,
                max_running_jobs=q.max_running_jobs,
            )
        )
    slugs = {t.pk: t.slug for t in teams}
    for (team_id, model), gpus in held.items():
        covered = (team_id, model) in own or (team_id, Quota.ANY_MODEL) in own
        if not covered and gpus > BORROW_TOLERANCE:
            out.append(
                QuotaUsage(
                    team=slugs[team_id],
                    gpu_model=model,
                    used=gpus,
                    nominal=0.0,
                    borrowing_limit=0.0,
                    lending_limit=None,
                    max_running_jobs=None,
                    quota=False,
                )
            )
    out.sort(key=lambda u: (u.team, u.gpu_model))
    return out


# --- MIG availability ------------------------------------------------------------------------


@dataclass(frozen=True)
class MigChoice:
    profile: str
    gpu_models: tuple[str, ...]
    free_now: int  # existing instances of this profile nobody holds
    relayout_gpus: int  # idle MIG GPUs with this profile that the cycle may re-lay out
    gpu_fraction: float  # how much of a GPU it counts as against quota

    @property
    def fits_now(self) -> bool:
        return self.free_now > 0 or self.relayout_gpus > 0


def mig_choices(layouts: dict[int, list[dict[str, Any]]]) -> list[MigChoice]:
    """The profiles the MIG GPUs of up nodes offer, with what fits now. `layouts` comes from
    clusters.services.gpu_layouts (who holds each slice)."""
    from .snapshot import relays_mig, site_mig_tables  # the cycle's rules; snapshot imports us

    free: dict[str, int] = defaultdict(int)
    idle: dict[str, int] = defaultdict(int)
    models: dict[str, set[str]] = defaultdict(set)
    fractions: dict[str, float] = {}
    nodes = Node.objects.filter(
        pk__in=list(layouts), mig_enabled=True, state=Node.State.UP
    ).select_related("cluster")
    site = site_mig_tables(Cluster.objects.filter(enabled=True))
    for node in nodes:
        table = geometry(node.gpu_model, site)
        if table is None:
            continue
        for spec in table.profiles:
            models[spec.name].add(node.gpu_model)
            fractions.setdefault(spec.name, spec.compute_slices / table.compute_slices)
        for gpu in layouts[node.pk]:
            slices = gpu.get("mig", [])
            for inst in slices:
                spec = table.profile(inst["profile"])
                if spec is not None and inst["team"] is None:
                    free[spec.name] += 1
            if relays_mig(node.cluster) and not any(inst["team"] for inst in slices):
                for spec in table.profiles:
                    idle[spec.name] += 1
    return [
        MigChoice(
            profile=name,
            gpu_models=tuple(sorted(models[name])),
            free_now=free[name],
            relayout_gpus=idle[name],
            gpu_fraction=fractions[name],
        )
        for name in sorted(models, key=_profile_order)
    ]


def quota_share(job: Job) -> str:
    """What the job counts as against quota, for its page. A waiting slice job's share is
    known only once it is placed (1/7 of most models, 1/4 of an A30): until then, that of
    each model it could run on, the site's tables as the cycle reads them."""
    shares = [job.gpus]
    if waiting_slice(job):
        # Rounded: 1/7 from two tables must read as one share, not two.
        shares = sorted({round(s, 6) for s in slice_shares(job)}) or shares
    lo, hi = shares[0], shares[-1]
    if lo != hi:
        return f"{_gpus(lo)}-{_gpus(hi)} GPUs of quota, by the model it runs on"
    return f"{_gpus(lo)} GPU{'' if lo == 1 else 's'} of quota"


def gpus_of_quota(job: Job, offers: MigOffers | None = None) -> float:
    """What the job counts as against quota, as one number (the API's `gpus`): a waiting
    slice job's largest share among the models that could run it, the most it can be
    charged once placed; else what it is charged (`Job.gpus`)."""
    if waiting_slice(job):
        return max(slice_shares(job, offers), default=job.gpus)
    return job.gpus


@dataclass(frozen=True)
class MigOffers:
    """What slice_shares reads, once for many jobs: the GPU models of the MIG nodes (of
    enabled clusters, not down) by cluster id, and the site's tables."""

    models: dict[int, frozenset[str]]
    site: dict[str, ModelTable]

    @classmethod
    def read(cls) -> MigOffers:
        from .snapshot import site_mig_tables  # the cycle's rules; snapshot imports us

        by_cluster: dict[int, set[str]] = defaultdict(set)
        for cluster_id, model in (
            Node.objects.filter(mig_enabled=True, cluster__enabled=True)
            .exclude(state=Node.State.DOWN)
            .values_list("cluster_id", "gpu_model")
            .distinct()
        ):
            by_cluster[cluster_id].add(model)
        site = site_mig_tables(Cluster.objects.filter(enabled=True))
        return cls({c: frozenset(m) for c, m in by_cluster.items()}, site)


def slice_shares(job: Job, offers: MigOffers | None = None) -> list[float]:
    """The share of a GPU the waiting slice job would be charged on each model of the MIG
    nodes (of enabled clusters, not down) that offer its profile: its `gpu_model` only, if
    it names one; its cluster's only, if pinned."""
    offers = offers if offers is not None else MigOffers.read()
    profile = job.spec["mig_profile"]
    if job.spec.get("gpu_model"):
        models: set[str] = {job.spec["gpu_model"]}
    elif job.pinned_cluster:
        models = set(offers.models.get(job.cluster_id or 0, ()))
    else:
        models = set().union(*offers.models.values())
    out = []
    for model in models:
        table = geometry(model, offers.site)
        spec = table.profile(profile) if table is not None else None
        if table is not None and spec is not None:
            out.append(spec.compute_slices / table.compute_slices)
    return out


def waiting_slice(job: Job) -> bool:
    """A slice job not placed yet: what it counts as depends on where it will run."""
    return bool(job.spec.get("mig_profile")) and job.state in (
        Job.State.PENDING,
        Job.State.SUSPENDED,
    )


def _gpus(value: float) -> str:
    """As the templates' `gpus` filter writes a count: two decimals at most."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _profile_order(name: str) -> tuple[int, int, str]:
    p = parse_profile(name)
    return (p.compute, p.memory_gb, name)


# --- cluster totals --------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterTotals:
    nodes: int
    nodes_up: int
    nodes_drain: int
    nodes_down: int
    gpus: int
    gpus_held: int  # whole GPUs held by jobs (also on drained nodes, where jobs still run)
    gpus_free: int  # whole GPUs nobody holds on up nodes without MIG
    mig_slices: int
    mig_slices_held: int


def cluster_totals(
    nodes: Sequence[Node], layouts: dict[int, list[dict[str, Any]]]
) -> ClusterTotals:
    """Counts for a cluster's header, from its nodes and gpu_layouts' holders."""
    held = free = slices = slices_held = 0
    for node in nodes:
        for gpu in layouts.get(node.pk, []):
            if node.mig_enabled:
                slices += len(gpu.get("mig", []))
                slices_held += sum(i.get("team") is not None for i in gpu.get("mig", []))
            elif gpu.get("team") is not None:
                held += 1
            elif node.state == Node.State.UP:
                free += 1
    return ClusterTotals(
        nodes=len(nodes),
        nodes_up=sum(n.state == Node.State.UP for n in nodes),
        nodes_drain=sum(n.state == Node.State.DRAIN for n in nodes),
        nodes_down=sum(n.state == Node.State.DOWN for n in nodes),
        gpus=sum(n.gpus for n in nodes),
        gpus_held=held,
        gpus_free=free,
        mig_slices=slices,
        mig_slices_held=slices_held,
    )


# An `after` entry as the cycle, the submit check and the job page read it:
# (state, name, "job" | "array").
Dep = tuple[str, str, str]
# The state of a job that is no longer stored, or of an array missing a task (deleted in the
# database: the admin cannot delete jobs): it can never succeed.
GONE = "gone"


def array_states(ids: Collection[str]) -> dict[str, Dep]:
    """Array id -> (state, name, "array") as `after` reads it: succeeded once every task
    has, named as Slurm shows an array (sweep[0-15%4]); the end of the first task (by index)
    that ended otherwise, named as that task (sweep[3]); else how many have succeeded. Two
    queries, whatever the arrays' sizes."""
    wanted = [uuid.UUID(i) for i in ids]
    names = {
        str(pk): (name, indices, size)
        for pk, name, indices, size in JobArray.objects.filter(pk__in=wanted).values_list(
            "id", "name", "indices", "size"
        )
    }
    succeeded: dict[str, int] = defaultdict(int)
    stored: dict[str, int] = defaultdict(int)  # tasks still there (one deleted never ends)
    failed: dict[str, tuple[int, str]] = {}  # the lowest index that ended otherwise
    groups = (
        Job.objects.filter(array_id__in=wanted)
        .values("array_id", "state")
        .annotate(n=Count("id"), first=Min("array_index"))
        .values_list("array_id", "state", "n", "first")
    )
    for array_id, state, n, first in groups:
        key = str(array_id)
        stored[key] += n
        if state == Job.State.SUCCEEDED:
            succeeded[key] = n
        elif state in Job.TERMINAL and (key not in failed or first < failed[key][0]):
            failed[key] = (first, state)
    out: dict[str, Dep] = {}
    for key, (name, indices, size) in names.items():
        if key in failed:
            index, state = failed[key]
            out[key] = (state, f"{name}[{index}]", "array")
        elif stored[key] < size:
            out[key] = (GONE, f"{name}[{indices}]", "array")
        elif succeeded[key] == size:
            out[key] = (Job.State.SUCCEEDED, f"{name}[{indices}]", "array")
        else:
            out[key] = (
                f"{succeeded[key]} of {size} tasks succeeded",
                f"{name}[{indices}]",
                "array",
            )
    return out
