"""One scheduling cycle: schedule(snapshot, policy, now) -> Decisions."""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from itertools import chain, compress
from operator import attrgetter, itemgetter

from . import mig, reasons
from .backfill import Fluid, Release, Reservation, earliest_start, end_time, releases, reserve
from .capacity import (
    Fit,
    FreeIndex,
    Group,
    GroupKey,
    NodeState,
    allocate,
    best_fit,
    fit_by_end,
    fit_on,
)
from .order import Room, order_kinds, standings
from .preempt import Candidate, Plan, Preemptor, within_budget
from .preempt import plan as plan_preemption
from .quota import Account, Demand, Ledger, Verdict
from .types import (
    ANY_MODEL,
    Decisions,
    JobRequest,
    MigRelayout,
    MigSlot,
    NodeAlloc,
    Placement,
    Policy,
    Preemption,
    Reason,
    RunningJob,
    Snapshot,
    Start,
    Wait,
)

_preference = attrgetter("preference")
_preempting_on = attrgetter("preempting_on")
_at_node = itemgetter(0, 1)


# What a job's GPUs must be: (model, pool, cluster), None for any.
_Where = tuple[str | None, str | None, str | None]


# Above any priority class value: the plan's order puts tier 0 first (mig_request).
FIRST_TIER_BONUS = 1 << 40


@dataclass(frozen=True)
class _Failure:
    """Why a group of equivalent jobs failed this cycle; later members share the verdict."""

    reason: Reason
    capacity: bool  # blocked by capacity: members count as "ahead" and get estimates
    # A reservation blocked it: a member whose time limit ends by then may still fit.
    short_before: float | None = None
    best_nodes: int = 0  # nodes that could take one share of the job now
    shared: bool = True  # False: it concerns this job only (it is preempting for itself)
    estimate: float | None = None
    tail: reasons.BehindTail | None = None  # for no_capacity: its members' behind() reasons
    # It did not preempt because the victims would lose more than it waits: say so.
    note: reasons.Note | None = None
    mig: bool = False  # no instance for a slice: each member gets its own estimate
    # For capacity: the groups it was placed against, to count the best nodes again for a
    # later member once jobs have started in between.
    groups: Sequence[Group] = ()
    # For capacity: the groups its quota lets it use, whose fluids its estimate draws on.
    where: tuple[GroupKey, ...] = ()


@dataclass(slots=True)
class _Ahead:
    """Jobs waiting for capacity ahead so far, of one (GPU model, pool, cluster)."""

    jobs: int = 0
    gpus: float = 0.0


@dataclass(slots=True)
class _Waiting:
    """What capacity_wait needs of a kind, once per kind."""

    ahead: _Ahead  # of its own (model, pool, cluster)
    rivals: list[_Ahead]  # of those whose jobs could use the same nodes, its own first
    # The capacity groups whose fluids its estimate draws on (the earliest of them); a
    # gang never spans groups, so a pool or cluster it may not use lends it nothing.
    keys: tuple[GroupKey, ...]
    fluids: tuple[Fluid, ...]  # theirs (a tuple key hashes anew at every lookup)
    floored: bool  # whole GPUs per node: its estimate waits for nodes to hold the shape
    quota_key: tuple[str, str] | None  # the quota its start holds, when quotas are on
    floor: float | None = None  # group_floor of its one group, once floor_known
    floor_known: bool = False


@dataclass(slots=True)
class _Hold:
    """Nominal quota held this cycle for a team's first job that fits it but waits for
    nodes (FIFO within a team): its `gpus`, until its earliest start."""

    gpus: float
    until: float
    holder: str
    value: int  # its class: a later job of a higher class is not held back


_HELD_FOR = "held_for"


def _not_before_hold(estimate: float | None, reason: Reason, until: float | None) -> float | None:
    """A job held back for its team's earlier job starts no sooner than that job could."""
    if estimate is None or until is None or _HELD_FOR not in dict(reason.details):
        return estimate
    return max(estimate, until)


def _per_group(
    up: Mapping[str, NodeState], allocs: Sequence[NodeAlloc]
) -> list[tuple[GroupKey, int]]:
    """A job's GPUs on nodes that take work, per capacity group (only those come back)."""
    if len(allocs) == 1:  # the usual case
        st = up.get(allocs[0].node)
        return [] if st is None or not allocs[0].gpus else [(st.group, len(allocs[0].gpus))]
    counts: dict[GroupKey, int] = {}
    for a in allocs:
        st = up.get(a.node)
        if st is not None and a.gpus:
            counts[st.group] = counts.get(st.group, 0) + len(a.gpus)
    return list(counts.items())


def running_gpus(job: RunningJob, overrides: Mapping[str, mig.ModelTable] | None = None) -> float:
    """GPUs a running job counts for quota and shares; a MIG slice by its GPU fraction."""
    total = 0.0
    for a in job.placement.allocs:
        total += len(a.gpus)
        if a.mig is not None:
            total += _fraction(job.gpu_model, a.mig.profile, overrides) or 0.0
    return total


def _is_some(f: Callable[[str], str | None], job_id: str) -> bool:
    return f(job_id) is not None


def _fraction(
    model: str | None, profile: str, overrides: Mapping[str, mig.ModelTable] | None = None
) -> float | None:
    try:
        return mig.gpu_fraction(model or "", profile, overrides)
    except ValueError:
        return None


def _offers(model: str, profile: str, overrides: Mapping[str, mig.ModelTable] | None) -> bool:
    table = mig.geometry(model, overrides)
    return table is not None and table.profile(profile) is not None


def request_gpus(
    r: JobRequest, mig_models: Sequence[str], overrides: Mapping[str, mig.ModelTable] | None = None
) -> float | None:
    """GPUs a pending job asks for (None: a MIG profile that does not parse)."""
    if r.mig_profile:
        model = r.gpu_model
        if model is None:
            # Sized on a model that offers the profile (1g.6gb is 1/4 of an A30, not 1/7).
            offering = [m for m in mig_models if _offers(m, r.mig_profile, overrides)]
            model = next(iter(offering or mig_models), None)
        return _fraction(model, r.mig_profile, overrides)
    return float(r.nodes * r.gpus_per_node)


def schedule(snapshot: Snapshot, policy: Policy, now: float) -> Decisions:
    """Decide one cycle: which pending jobs start where, what is preempted, why others wait.

    1. Index capacity: free whole GPUs per (GPU model, pool) bucketed by free count, and the
       MIG instances (mig.MigIndex).
    2. Order: jobs that fit their team's nominal quota first (tier 0, as in Kueue: a
       guarantee before any borrowing), then within a tier priority-class value, then fair
       share by progressive filling, then FIFO within a team, ties by id (order.py); a job
       that preempted in an earlier cycle (PendingJob.preempting_on) leads its tier and
       class, so that no job ahead in fair share takes what its victims free.
       Baselines use submit order alone.
    3. Admit and place, walking the whole queue in order: quota with borrowing (quota.py;
       a team's first tier-0 job that waits for nodes holds its share of the team's
       nominal against the team's later jobs, which may pass only if the nominal has room
       for both by its earliest start or their time limit ends before it: FIFO within a
       team, as EASY backfill judges it; a slice job that waits for an instance likewise,
       until one frees by the limits, and one whose GPU is laid out for it counts on its
       quota at once; a whole-GPU job refused quota that has waited
       Policy.quota_hold_after_s (off by default) likewise, until its quota estimate, and
       one that preempted in an earlier cycle (PendingJob.preempting_on) at once: what its
       preemption freed stays its own, the team's nominal here and the GPUs in step 4; a
       job the queue preempted Policy.protect_after_preemptions times starts again only
       within its team's nominal, as a class that cannot be preempted does, unless larger
       than it), then placement (capacity.py): a single-node job
       goes where it does not keep a node busy longer than the jobs already there (by time
       limits), else best fit, so nodes empty whole for gangs; a gang starts
       all-or-nothing on n best-fit nodes of one group. A group of equivalent jobs
       (team, class, shape, protection) that failed is not tried again this cycle:
       capacity and quota only shrink while a cycle runs.
    4. Backfill (EASY): the first job per capacity group (GPU model, pool, cluster) that
       does not fit gets a reservation (backfill.py) holding the free GPUs it will need,
       and the quota it will borrow (of capacity nobody owns, no more than the idle GPUs it
       could use); a later job may take held GPUs or that quota only if
       its time limit ends before the reservation starts. A whole-GPU job that holds its
       team's nominal while refused quota until a known time (step 3: one that preempted
       in an earlier cycle, or has waited Policy.quota_hold_after_s) is reserved likewise,
       from then (reserve_from): its nodes drain while its quota does. One that preempted
       so keeps the GPUs its victims freed (else a job that would outlast its wait takes
       them and is preempted by it once more); it stays in Decisions.preempting, its
       reason naming the nodes (reasons.keeping), so the claim holds cycle after cycle (a
       slice job so keeps the instance or GPU held for it). Without backfill (fifo) the
       first job that does not fit stops everything behind it.
    5. Preempt: a job that does not fit and fits its team's nominal quota reclaims GPUs
       from teams running on borrowed quota (any of their jobs, up to what they hold above
       their nominal); a higher, non-preemptible class (any higher
       class, with Policy.preemptible_classes_preempt) preempts lower preemptible ones when
       the work it throws away is worth less than its wait (preempt.py); a job within its
       team's nominal takes other teams' work before its own team's. A job protected
       after its preemptions (step 3) is no victim of either; it preempts as its class
       does. Searches are bounded per cycle (Policy.max_preemption_searches); past the
       bound each team may still search once to reclaim, so failing searches ahead never
       starve a guarantee, and a job that preempted in an earlier cycle
       (PendingJob.preempting_on) still claims its victims leaving its nodes (no new
       victim), and while jobs there are leaving takes no GPUs on a node where another
       such job waits: they were likely freed for it. Such a job is tried on its own, not
       given its kind's verdict.
       The minimal victims get the grace period; the job starts after. A slice job does
       the same with running slice jobs: those holding an instance it may use, or all of a
       GPU's holders (the idle GPU is then re-laid out; with Policy.mig_repartition only).
       A GPU being emptied so is held for the job: no other job takes its free instances
       until it is idle, and once idle and re-laid out for it, it stays the job's (its
       preempting_on names the node, not the GPU: mig.MigIndex.reserve_on matches each
       such job to a GPU laid out with its profile before any to other GPUs there); one
       instance freed for it on a GPU others keep using is held alike. No slice is
       preempted for an instance while an idle GPU could be re-laid out for the job.
       A whole-GPU job's free GPUs beside its victims' are kept for it: no job takes them,
       not even one that ends before a reservation there (capacity.FreeIndex.keep).
       A job that may preempt for priority but is over its team's quota
       displaces its own team's lower classes on that quota, enough to fit it within the
       nominal; a slice job only where it then has an instance (one free or an idle GPU,
       held for it; or one its victims free).
    6. Reasons: every job that does not start gets a Wait with a structured reason, its
       position among the waiting jobs and an estimated start where one can be computed
       (for a slice job, from the limits of the jobs holding instances it may use; for a
       job refused quota, from those of its team's jobs on that quota; a whole-GPU job its
       team's own jobs keep from the nominal is also told whether the team's smaller jobs
       may pass it meanwhile, or that it holds the nominal: passable, holding).
    7. MIG: before the walk, mig.MigIndex.plan re-lays out idle GPUs for the queue's slice
       requests that their teams' quota can start, counted together (plan first, then take:
       a take cannot spoil a layout a later request needed, and takes the free instance the
       plan meant for the job); nothing starts on a new instance before inventory reports it.
    """
    return _Cycle(snapshot, policy, now).run()


class _Cycle:
    def __init__(self, snapshot: Snapshot, policy: Policy, now: float) -> None:
        self.s = snapshot
        self.policy = policy
        self.now = now
        classes = snapshot.priority_classes
        # Without the class order (the baselines) a class ranks nothing, not even for
        # preemption: a victim would come back ahead of its preemptor and ping-pong.
        self.values = {c.name: c.value for c in classes} if policy.priorities else {}
        self.preemptibles = {c.name: c.preemptible for c in classes}
        cap = policy.max_priority_preemptions
        self.max_preemptions = math.inf if cap is None else float(cap)
        # Step 1: capacity.
        self.index = FreeIndex(snapshot.nodes, snapshot.running)
        self.models = self.index.models()
        # A job of no GPU may also run on a MIG node (it takes no slice).
        self.no_gpu_models = self.index.models(no_gpu=True)
        self.mig_models = sorted({n.gpu_model for n in snapshot.nodes if n.mig and n.state == "up"})
        self.mig_index: mig.MigIndex | None = None
        # GPUs per model that exist (a model only on drained nodes is not unsatisfiable), and
        # those that take new work: only these are lent as nobody's quota and are the shares
        # of fair share (a drained node's GPUs lent are GPUs of other nodes taken).
        self.capacity: dict[str, int] = {}
        self.open_capacity: dict[str, int] = {}
        for n in snapshot.nodes:
            if n.state != "down":
                self.capacity[n.gpu_model] = self.capacity.get(n.gpu_model, 0) + n.gpus
                if n.state == "up":
                    self.open_capacity[n.gpu_model] = (
                        self.open_capacity.get(n.gpu_model, 0) + n.gpus
                    )
        self.total_capacity = sum(self.open_capacity.values())
        # Site-supplied MIG tables replace the built-in ones for their models.
        self.mig_tables = mig.overrides_from(snapshot.mig_tables) or None
        # GPUs per running job, in snapshot order.
        self.running_gpus = [running_gpus(j, self.mig_tables) for j in snapshot.running]
        # Jobs protected after their preemptions, by id, with how many they had.
        self.protected = self.protected_jobs()
        self.ledger: Ledger
        self.starts: list[Start] = []
        self.preemptions: list[Preemption] = []
        self.waits: list[Wait] = []
        self.fluids: dict[GroupKey, Fluid] | None = None
        self.reservations: list[Reservation] = []
        self.reserved_for: dict[str, Reservation] = {}
        self.claimed: set[str] = set()
        self.preempting: list[tuple[str, tuple[str, ...]]] = []  # Decisions.preempting
        # When the last preemption's victims have all left (plan_preemptor), for its estimate.
        self.victims_gone_at = now
        self._held_nodes: tuple[tuple[int, int], set[str]] = ((-1, -1), set())
        self.cycle_releases: list[tuple[float | None, str, tuple[NodeAlloc, ...]]] = []
        self.searches = 0
        # Teams that searched to reclaim after the searches were used up (preempt_for).
        self.reclaimed_beyond: set[str] = set()
        # Per (GPU model, pool, cluster) a job asks for, those it competes with (None: any).
        self._rivals: dict[_Where, tuple[_Ahead, list[_Ahead]]] = {}
        self._waiting: list[_Waiting | None] = []  # per kind, at its first wait for capacity
        # Per kind refused quota whose search for own victims failed: (starts, preemptions,
        # reservations) then, the searches it made, and the note it left (preempt_for_quota).
        self._no_victims: dict[int, tuple[tuple[int, int, int], int, reasons.Note | None]] = {}
        # Set by a preemption refused as not worth it, for the reason of the job that asked.
        self.not_worth: reasons.Note | None = None
        self.groups_cache: dict[tuple[str | None, str | None, str | None, bool], list[Group]] = {}
        self._candidates: dict[str, list[Candidate]] | None = None
        self._own: dict[str, list[Candidate]] | None = None
        # The candidates again, by what may make them victims (within_reach).
        self._leaving: list[Candidate] = []
        self._leaving_nodes: set[str] | None = None  # leaving_on
        self._preemptor_nodes: dict[str, set[str]] | None = None  # owed_to_another
        self._borrowed: list[Candidate] = []
        # Jobs of teams above their nominal not labelled borrowed, and what a reclaim may
        # still take per quota (reclaim_budget).
        self._reclaimable: list[Candidate] = []
        self._reclaim_left: dict[tuple[str, str], float] | None = None
        # Per quota: its nominal as a fluid (quota_estimate), and what started on it this
        # cycle, (end, GPUs), for one built later.
        self._quota_fluids: dict[tuple[str, str], Fluid] = {}
        self._quota_started: dict[tuple[str, str], list[tuple[float, float]]] = {}
        # The same for jobs that preempt this cycle, by their limits from when their victims
        # have left (quota_since): apart, as quota_taken's fluid takes from now.
        self._quota_preempting: dict[tuple[str, str], list[tuple[float, float]]] = {}
        # Per quota: its jobs this cycle preempts, (end by their limits, when they leave, GPUs).
        self._quota_preempted: dict[tuple[str, str], list[tuple[float | None, float, float]]] = {}
        self._team_quota: dict[str, tuple[str, str] | None] = {}
        self._passed: reasons.Note | None = None  # passable's words, made once
        # Jobs waiting for nodes ahead, (GPUs, limit), per quota, for a fluid built later.
        self._quota_ahead: dict[tuple[str, str], list[tuple[float, float | None]]] = {}
        self._quota_kinds: dict[int, tuple[Fluid | None, float | None, Account | None]] = {}
        self._by_team: dict[str, list[Candidate]] = {}
        self._displaceable: dict[
            tuple[str, int, tuple[str, str]], tuple[int, list[Candidate], int]
        ] = {}
        # How many jobs lead the order in tier 0: they fit their team's nominal quota in the
        # team's own order.
        self.first_tier = 0
        # Per quota: nominal held for the team's first tier-0 job that waits for nodes (one
        # that preempts has committed its quota already): the team's later jobs may not take
        # it unless they end by then.
        self.holds: dict[tuple[str, str], _Hold] = {}
        self.held_until: float | None = None  # of the last job held back (held_back)
        self._events: list[Release] | None = None
        # Per whole-GPU shape that failed: when its nodes could first hold it (shape_floor).
        self._floors: dict[tuple[object, ...], float | None] = {}
        # The same per capacity group and shape (group_floor).
        self._group_floors: dict[tuple[GroupKey, int, int], float | None] = {}
        self._ends: list[float | None] | None = None
        self._horizon: dict[str, float] | None = None
        self.never: list[bool] = []  # per kind: no node of the cluster as it is can hold it
        self._borrowed_ids: set[str] | None = None
        # Running jobs holding a MIG slice that may be victims, by id, with their GPUs.
        self._mig_holders: dict[str, tuple[Candidate, float]] | None = None
        # Per kind of MIG instance: when the jobs holding them end (mig_estimate).
        self._mig_ends: dict[mig.InstanceKind, list[float]] | None = None
        # Per (profile, GPU model, pool, cluster): may such a GPU serve it (mig_serves).
        self._mig_serves: dict[tuple[str | None, str, str | None, str | None], bool] = {}
        # Slices started this cycle: (end, node, slot), for _mig_ends.
        self.mig_started: list[tuple[float | None, str, MigSlot]] = []

    # -- helpers -----------------------------------------------------------------------

    def value(self, r: JobRequest) -> int:
        return self.values.get(r.priority, 0)

    def preemptible(self, r: JobRequest) -> bool:
        """May r be preempted, running, and so borrow, starting? Not when its class cannot
        be preempted, nor when it is protected after its preemptions (protected_jobs): for
        quota and as a victim the two are alike."""
        return self.preemptibles.get(r.priority, True) and r.id not in self.protected

    def preempts_for_priority(self, r: JobRequest) -> bool:
        """May r preempt lower classes (Policy.preemptible_classes_preempt)? By its class:
        a job protected after its preemptions gains no such power."""
        return self.policy.preemptible_classes_preempt or not self.preemptibles.get(
            r.priority, True
        )

    def protected_jobs(self) -> dict[str, int]:
        """The jobs (pending and running) of a preemptible class the queue preempted
        Policy.protect_after_preemptions times, with how many: each starts again only within
        its team's nominal quota and is no victim again. Only those whose GPUs fit their
        team's nominal on a quota they could use (of their model, else the team's "*"; for
        any model, any of the team's): a larger job could never start so. Running ones only
        while they fit it (protected_running). None without quotas (no nominal to start
        within)."""
        after = self.policy.protect_after_preemptions
        if after is None or not self.policy.quotas:
            return {}
        # One cheap pass over a deep queue: most jobs were never preempted.
        preemptible = self.preemptibles
        jobs = [(p.request, p.preemptions) for p in self.s.pending if p.preemptions >= after]
        jobs = [(r, n) for r, n in jobs if preemptible.get(r.priority, True)]
        ran = [j for j in self.s.running if j.preemptions >= after]
        ran = [j for j in ran if preemptible.get(j.request.priority, True)]
        if not jobs and not ran:  # the usual case: no quota lookups at all
            return {}
        nominals = {t.name: {q.gpu_model: q.nominal for q in t.quotas} for t in self.s.teams}
        protected: dict[str, int] = {}
        if ran:
            protected.update(self.protected_running(ran, nominals))
        for r, n in jobs:
            gpus = request_gpus(r, self.mig_models, self.mig_tables)
            quotas = nominals.get(r.team, {})
            if r.gpu_model:
                own = quotas.get(r.gpu_model, quotas.get(ANY_MODEL))
                fits = [] if own is None else [own]
            else:
                fits = list(quotas.values())
            if gpus is not None and any(gpus <= nominal + 1e-9 for nominal in fits):
                protected[r.id] = n
        return protected

    def protected_running(
        self, ran: Sequence[RunningJob], nominals: Mapping[str, Mapping[str, float]]
    ) -> dict[str, int]:
        """protected_jobs for running jobs: earliest started first, while they fit their
        team's nominal with its non-preemptible jobs. One that borrows (it started before
        the rule was on, or its team's nominal was cut since) stays a victim: else it would
        hold another team's guarantee, as nothing that cannot be preempted may."""

        def key(team: str, model: str) -> tuple[str, str] | None:
            quotas = nominals.get(team, {})
            found = model if model in quotas else ANY_MODEL if ANY_MODEL in quotas else None
            return None if found is None else (team, found)

        fixed: dict[tuple[str, str], float] = {}
        for j, gpus in zip(self.s.running, self.running_gpus, strict=True):
            if not self.preemptibles.get(j.request.priority, True):
                k = key(j.request.team, j.gpu_model)
                if k is not None:
                    fixed[k] = fixed.get(k, 0.0) + gpus
        protected: dict[str, int] = {}
        for j in sorted(ran, key=lambda j: (j.start_time, j.request.id)):
            k = key(j.request.team, j.gpu_model)
            if k is None:
                continue
            held = fixed.get(k, 0.0) + running_gpus(j, self.mig_tables)
            if held <= nominals[k[0]][k[1]] + 1e-9:
                fixed[k] = held
                protected[j.request.id] = j.preemptions
        return protected

    def check_quota(
        self,
        r: JobRequest,
        model: str,
        gpus: float,
        ends: float | None,
        idle: Callable[[], float] | None = None,
        ledger: Ledger | None = None,
    ) -> Verdict:
        """Ledger.check for r, preemptible or not as preemptible() says, and a protected
        job's refusal saying why."""
        return (ledger or self.ledger).check(
            r.team,
            model,
            gpus,
            self.preemptible(r),
            ends,
            idle=idle,
            preempted=self.protected.get(r.id),
        )

    def commit_quota(
        self,
        r: JobRequest,
        model: str,
        gpus: float,
        ends: float | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        """Ledger.commit for r, preemptible or not as preemptible() says."""
        (ledger or self.ledger).commit(
            r.team, model, gpus, self.preemptible(r), ends, protected=r.id in self.protected
        )

    def groups(self, model: str | None, r: JobRequest) -> list[Group]:
        """The capacity groups a job may use: of that model, its pool and its cluster (MIG
        nodes' too for a job of no GPU)."""
        key = (model, r.pool, r.cluster, not r.gpus_per_node)
        found = self.groups_cache.get(key)
        if found is None:
            found = self.groups_cache[key] = self.index.groups_for(*key)
        return found

    def models_for(self, r: JobRequest) -> list[str]:
        """The GPU models a job of whole GPUs (or none) may run on."""
        if r.gpu_model:
            return [r.gpu_model]
        return self.models if r.gpus_per_node else self.no_gpu_models

    def best_nodes_now(self, groups: Sequence[Group], g: int) -> int:
        return max((grp.count_at_least(g) for grp in groups), default=0)

    # -- the cycle ---------------------------------------------------------------------

    def run(self) -> Decisions:
        s, policy = self.s, self.policy
        pending = s.pending
        # Per-job fields read in queue order, not scheduling order: the order is scattered
        # over memory, and at 100k jobs each scattered read misses the cache.
        reqs = [p.request for p in pending]
        # Jobs of one kind (team, class, shape) are alike to the scheduler: what depends only
        # on the kind is worked out once per kind, and each job carries its kind's number. A
        # number per job, unlike a tuple, gives the garbage collector nothing to track. A job
        # protected after its preemptions is of a kind of its own, by their count (its
        # reason says it): its quota's verdict is not another's. -1: not protected.
        protected = self.protected
        numbers: dict[tuple[object, ...], int] = {}
        if protected:
            kind_of = [
                numbers.setdefault(
                    (
                        r.team,
                        r.priority,
                        r.nodes,
                        r.gpus_per_node,
                        r.gpu_model,
                        r.mig_profile,
                        r.pool,
                        r.cluster,
                        protected.get(r.id, -1),
                    ),
                    len(numbers),
                )
                for r in reqs
            ]
        else:  # the usual case: no job protected, the key as without the rule
            kind_of = [
                numbers.setdefault(
                    (
                        r.team,
                        r.priority,
                        r.nodes,
                        r.gpus_per_node,
                        r.gpu_model,
                        r.mig_profile,
                        r.pool,
                        r.cluster,
                    ),
                    len(numbers),
                )
                for r in reqs
            ]
        # Each kind's first job. Kinds are numbered in order of first appearance, so each
        # search starts where the previous kind's first job was: one pass over kind_of in C.
        kinds: list[JobRequest] = []
        at = 0
        for k in range(len(numbers)):
            at = kind_of.index(k, at)
            kinds.append(reqs[at])
        kind_demand = [request_gpus(r, self.mig_models, self.mig_tables) for r in kinds]
        # What each kind asks of its team's quota: one tuple per kind, not per job.
        kind_count = [0] * len(kinds)
        for k in kind_of:
            kind_count[k] += 1
        ready = self.ready_times(kinds, kind_demand) if policy.quotas else [None] * len(kinds)
        self.never = [t == math.inf for t in ready]
        wanted: list[Demand] = [
            (r.team, r.gpu_model, d, c, t)
            for r, d, c, t in zip(kinds, kind_demand, kind_count, ready, strict=True)
            if d is not None and t != math.inf
        ]
        self.ledger = Ledger(
            s.teams,
            zip(
                s.running,
                self.running_gpus,
                [self.preemptible(j.request) for j in s.running],
                strict=True,
            ),
            # What the queue wants only decides what quota is lent: nothing when quotas are off.
            wanted if policy.quotas else (),
            policy.quotas,
            self.open_capacity,
            self.running_ends() if policy.quotas else (),
            self.protected,
        )
        ids = [r.id for r in reqs]
        order = self.order(reqs, ids, kinds, kind_of, kind_demand)
        # A kind that failed is not tried again this cycle: its later jobs share the verdict.
        failed: list[_Failure | None] = [None] * len(kinds)
        # The reason a kind's jobs wait with when nothing about it depends on the job: an
        # unknown MIG profile, a failure other than for capacity, or strict FIFO blocked. Such
        # a job (most of a deep queue) then costs one Wait and nothing else.
        bad = [
            None
            if gpus is not None
            else reasons.bad_request(f"unknown MIG profile {r.mig_profile!r}")
            for r, gpus in zip(kinds, kind_demand, strict=True)
        ]
        settled = bad.copy()
        # How many jobs had started when a kind's verdict was reached: a later member's
        # numbers (the team's usage, the best nodes now) are worked out again once more have.
        seen = [0] * len(kinds)
        self._waiting = [None] * len(kinds)
        now = self.now
        relayouts = self.plan_mig(reqs, kinds, kind_of, kind_demand, order)
        waits = self.waits
        # Each job's kind and id in scheduling order, gathered in one pass each: the loop then
        # reads them in sequence (at 100k jobs a scattered read misses the cache).
        kind_at = list(map(kind_of.__getitem__, order))
        id_at = list(map(ids.__getitem__, order))
        preempts = policy.preemption
        hold_after = policy.quota_hold_after_s if policy.quotas else None
        for rank, (i, k, job_id) in enumerate(zip(order, kind_at, id_at, strict=True)):
            reason = settled[k]
            # A job that preempted in an earlier cycle (PendingJob.preempting_on) is tried on
            # its own, not given its kind's verdict, nor giving its own: it prefers its nodes,
            # and claims its leaving victims there past the search bound (keeps_beyond_bound).
            if reason is not None and not (
                preempts and bad[k] is None and pending[i].preempting_on
            ):
                if reason.code == "quota_exhausted":
                    if seen[k] != len(self.starts):
                        seen[k] = len(self.starts)
                        reason = settled[k] = self.quota_refusal_now(reqs[i], reason)
                    estimate = self.quota_estimate(k, reqs[i], kind_demand[k])
                    waits.append(Wait(job_id, reason, len(waits) + 1, estimate))
                else:
                    waits.append(Wait(job_id, reason, len(waits) + 1))
                continue
            r = reqs[i]
            on_nodes = pending[i].preempting_on
            fail = failed[k]  # for capacity, or until a time a shorter job may beat
            if (
                fail is not None
                and not on_nodes
                and not (
                    fail.short_before is not None
                    and r.time_limit_s is not None
                    and now + r.time_limit_s <= fail.short_before
                )
            ):
                if fail.capacity:
                    if seen[k] != len(self.starts):
                        seen[k] = len(self.starts)
                        fail = failed[k] = self.capacity_failure_now(r, fail)
                    self.capacity_wait(k, r, fail)
                    if rank < self.first_tier and policy.quotas and not r.mig_profile:
                        self.hold_quota(r, kind_demand[k], None)
                elif fail.mig:
                    estimate = self.mig_estimate(r)
                    if rank < self.first_tier and policy.quotas:
                        self.hold_slice_quota(r, kind_demand[k], estimate)
                    waits.append(Wait(r.id, fail.reason, len(waits) + 1, estimate))
                elif fail.reason.code == "quota_exhausted":
                    if seen[k] != len(self.starts):
                        seen[k] = len(self.starts)
                        refusal = self.quota_refusal_now(r, fail.reason)
                        fail = failed[k] = replace(fail, reason=refusal)
                    estimate = self.quota_estimate(k, r, kind_demand[k])
                    estimate = _not_before_hold(estimate, fail.reason, fail.short_before)
                    waits.append(Wait(r.id, fail.reason, len(waits) + 1, estimate))
                else:
                    waits.append(Wait(r.id, fail.reason, len(waits) + 1))
                continue
            gpus = kind_demand[k]
            assert gpus is not None  # else settled
            blocked = False
            if r.mig_profile:
                result = self.try_mig(r, gpus, rank < self.first_tier, on_nodes)
                if result is not None:
                    estimate = None
                    if result.code == "preempting":  # for this job only
                        estimate = self.victims_gone_at
                    elif result.code == "mig_unavailable":
                        if not on_nodes:
                            failed[k] = _Failure(result, capacity=False, mig=True)
                        estimate = self.mig_estimate(r)
                        if rank < self.first_tier and policy.quotas:
                            self.hold_slice_quota(r, gpus, estimate)
                    elif result.code != "mig_relayout":  # that one is about this job's GPU only
                        # Quota lent until a time may still admit a shorter job of this kind.
                        until = None
                        if result.code == "quota_exhausted":
                            until = self.ledger.lent_until(
                                [r.gpu_model] if r.gpu_model else self.mig_models
                            )
                            if _HELD_FOR in dict(result.details):
                                until, self.held_until = self.held_until, None
                        if not on_nodes:
                            failed[k] = _Failure(result, capacity=False, short_before=until)
                            seen[k] = len(self.starts)
                            if until is None:
                                settled[k] = result
                        if result.code == "quota_exhausted":
                            estimate = self.quota_estimate(k, r, gpus)
                            estimate = _not_before_hold(estimate, result, until)
                            if on_nodes and estimate is not None:
                                # It preempted for its place: the instance or GPU its victims
                                # freed stays its own (named back next cycle), and so does
                                # its share of the team's nominal, as for a whole-GPU job.
                                if _HELD_FOR not in dict(result.details):
                                    self.hold_slice_quota(r, gpus, estimate)
                                self.preempting.append((r.id, on_nodes))
                                result = reasons.keeping(result, on_nodes)
                    if result.code in ("mig_unavailable", "mig_relayout") and not policy.backfill:
                        blocked = True
                    waits.append(Wait(r.id, result, len(waits) + 1, estimate))
            else:
                outcome = self.try_whole(k, r, gpus, rank < self.first_tier, on_nodes)
                if outcome is not None:
                    if outcome.shared and not on_nodes:
                        failed[k] = outcome
                        seen[k] = len(self.starts)
                        if not outcome.capacity and outcome.short_before is None:
                            settled[k] = outcome.reason
                    if outcome.capacity:
                        self.capacity_wait(k, r, outcome)
                        blocked = not policy.backfill
                        if rank < self.first_tier and policy.quotas:
                            held = self.reserved_for.get(r.id)
                            self.hold_quota(r, gpus, None if held is None else held.start)
                    else:
                        estimate, reason = outcome.estimate, outcome.reason
                        if estimate is None and reason.code == "quota_exhausted":
                            estimate = self.quota_estimate(k, r, gpus)
                            if (
                                estimate is not None
                                and (
                                    on_nodes
                                    or (
                                        hold_after is not None and now - r.submit_time >= hold_after
                                    )
                                )
                                and _HELD_FOR not in dict(outcome.reason.details)
                            ):
                                # It preempted for its place, or waited long enough: it
                                # holds its team's nominal too.
                                self.hold_quota(r, gpus, estimate)
                                if not on_nodes:
                                    estimate = self.reserve_from(r, estimate)
                                    reason = self.holding(r, reason)
                            estimate = _not_before_hold(
                                estimate, outcome.reason, outcome.short_before
                            )
                            if on_nodes and estimate is not None:
                                estimate = self.reserve_from(r, estimate)
                                # Named back next cycle, so what it freed stays its own.
                                self.preempting.append((r.id, on_nodes))
                                reason = reasons.keeping(reason, on_nodes)
                        kept = r.id in self.reserved_for
                        waits.append(Wait(r.id, reason, len(waits) + 1, estimate, kept))
            if blocked:
                # Strict FIFO: nothing passes this job; a bad request still says what is wrong.
                fifo_blocked = reasons.fifo_blocked(r.id)
                settled = [fifo_blocked if b is None else b for b in bad]
        stats = (
            ("pending", float(len(pending))),
            ("started", float(len(self.starts))),
            ("groups_failed", float(len(failed) - failed.count(None))),
            ("preemption_searches", float(self.searches)),
            ("reservations", float(len(self.reservations))),
        )
        return Decisions(
            starts=tuple(self.starts),
            preemptions=tuple(self.preemptions),
            waits=tuple(waits),
            relayouts=tuple(relayouts),
            preempting=tuple(self.preempting),
            stats=stats,
        )

    def order(
        self,
        reqs: Sequence[JobRequest],
        ids: Sequence[str],
        kinds: Sequence[JobRequest],
        kind_of: Sequence[int],
        kind_demand: Sequence[float | None],
    ) -> list[int]:
        policy = self.policy
        if policy.priorities:
            value = self.values
            values = [value.get(r.priority, 0) for r in kinds]
        else:
            values = [0] * len(kinds)
        standing = None
        increments = [0.0] * len(kinds)
        if policy.fair_share:
            names = {t.name for t in self.s.teams}
            # A model with no node open still counts what runs on it, against all its GPUs.
            shares = {m: self.open_capacity.get(m) or gpus for m, gpus in self.capacity.items()}
            standing = standings(
                self.s.teams,
                sorted({r.team for r in kinds} - names),
                zip(self.s.running, self.running_gpus, strict=True),
                shares,
                self.now,
                policy.fair_share_half_life_s,
            )
            cap, total = shares, self.total_capacity or sum(shares.values()) or 1
            open_ = self.open_capacity
            # A job for any model is a share of the GPUs its team's quota covers: where it
            # can run, and what the next cycle's standing will count it against.
            usable: dict[str, int] = {}
            for team in {r.team for r in kinds if not r.gpu_model}:
                usable[team] = (
                    sum(g for m, g in open_.items() if self.ledger.key(team, m) is not None)
                    if policy.quotas
                    else 0
                ) or total
            increments = [
                (d or 0.0) / (cap.get(r.gpu_model, 0) or total)
                if r.gpu_model
                else (d or 0.0) / usable[r.team]
                for r, d in zip(kinds, kind_demand, strict=True)
            ]
        order, self.first_tier = order_kinds(
            kind_of,
            [r.submit_time for r in reqs],
            ids,
            [r.team for r in kinds],
            values,
            increments,
            standing,
            self.room(kinds, kind_demand) if policy.quotas else None,
            # Jobs that preempted in an earlier cycle lead their tier and class: a job ahead
            # in fair share would take the GPUs their victims free, and they would preempt
            # again (ping-pong).
            list(compress(range(len(self.s.pending)), map(_preempting_on, self.s.pending)))
            if policy.preemption
            else (),
        )
        return order

    def room(self, kinds: Sequence[JobRequest], kind_demand: Sequence[float | None]) -> Room:
        """Nominal quota left per team and quota key, and each kind's key and demand; a job
        for any model draws on the team's total (its `(team, None)` key)."""
        left: dict[Hashable, float] = {}
        nominal: dict[Hashable, float] = {}
        for (team, model), acc in self.ledger.accounts.items():
            rest = acc.quota.nominal - acc.used
            left[(team, model)] = rest
            left[(team, None)] = left.get((team, None), 0.0) + rest
            nominal[(team, model)] = acc.quota.nominal
            # A job for any model runs on one quota: the largest bounds what fits a nominal.
            nominal[(team, None)] = max(nominal.get((team, None), 0.0), acc.quota.nominal)
        keys: list[Hashable] = [
            self.ledger.key(r.team, r.gpu_model) if r.gpu_model else (r.team, None) for r in kinds
        ]
        # A job that can never run takes none of its team's nominal from the jobs behind it.
        demands = [0.0 if no else d or 0.0 for d, no in zip(kind_demand, self.never, strict=True)]
        return Room(left, keys, demands, nominal)

    def ready_times(
        self, kinds: Sequence[JobRequest], kind_demand: Sequence[float | None]
    ) -> list[float | None]:
        """Per kind, when its shape first fits on nodes if it does not now (None: it fits
        now, or no known release makes it fit; inf: no node of the cluster as it is can ever
        hold it, so it wants no quota). Worked out once per shape, not per kind."""
        by_shape: dict[tuple[object, ...], float | None] = {}
        result: list[float | None] = []
        for r, d in zip(kinds, kind_demand, strict=True):
            if d is not None and r.mig_profile:
                mig_shape = (r.mig_profile, r.gpu_model, r.pool, r.cluster)
                if mig_shape not in by_shape:
                    by_shape[mig_shape] = None if self.mig_offered(r) else math.inf
                result.append(by_shape[mig_shape])
                continue
            if d is None or r.gpus_per_node == 0:
                result.append(None)
                continue
            shape = (r.gpu_model, r.pool, r.cluster, r.nodes, r.gpus_per_node)
            if shape not in by_shape:
                groups = self.groups(r.gpu_model, r)
                g, n = r.gpus_per_node, r.nodes
                if best_fit(self.index, groups, g, n, {}) is not None:
                    by_shape[shape] = None
                elif max((grp.max_fitting_nodes(g) for grp in groups), default=0) < n:
                    by_shape[shape] = math.inf  # as try_whole finds it unsatisfiable
                else:
                    by_shape[shape] = earliest_start(self.index, groups, g, n, self.events())
            result.append(by_shape[shape])
        return result

    def mig_serves(self, r: JobRequest, model: str) -> bool:
        """May a GPU of `model` serve r's profile (mig_offered, for that model)?"""
        key = (r.mig_profile, model, r.pool, r.cluster)
        found = self._mig_serves.get(key)
        if found is None:
            found = self._mig_serves[key] = self.mig_offered(replace(r, gpu_model=model))
        return found

    def mig_offered(self, r: JobRequest) -> bool:
        """Does an up MIG GPU r may use offer its profile, by its table or an instance it
        has? (A model spelled otherwise but with the same table counts: when unsure, yes.)"""
        profile = r.mig_profile or ""
        table = mig.geometry(r.gpu_model, self.mig_tables) if r.gpu_model else None
        tables: dict[str, mig.ModelTable | None] = {}
        for n in self.s.nodes:
            if n.state != "up" or not (n.mig or n.mig_gpus):
                continue
            if r.pool not in (None, n.pool) or r.cluster not in (None, n.cluster):
                continue
            if n.gpu_model not in tables:
                tables[n.gpu_model] = mig.geometry(n.gpu_model, self.mig_tables)
            own = tables[n.gpu_model]
            if r.gpu_model not in (None, ANY_MODEL, n.gpu_model) and (
                table is None or own != table
            ):
                continue
            # A fixed layout (Node.mig_fixed) offers it too: an admin may apply the proposal.
            if own is not None and own.profile(profile) is not None:
                return True
            if any(i.profile == profile for g in n.mig_gpus for i in g.mig_instances):
                return True
        return False

    def capacity_wait(self, k: int, r: JobRequest, fail: _Failure) -> None:
        """A wait for capacity: how much waits ahead for GPUs it could use, and an estimate."""
        fluids = self.fluids if self.fluids is not None else self.fluid_state()
        c = self._waiting[k]
        if c is None:
            c = self._waiting[k] = self.waiting_kind(r, fail)
        gpus = r.nodes * r.gpus_per_node
        mine, rivals = c.ahead, c.rivals
        if len(rivals) == 1:  # the usual case
            jobs, need = mine.jobs, mine.gpus
        else:
            jobs, need = 0, 0.0
            for other in rivals:
                jobs += other.jobs
                need += other.gpus
        mine.jobs += 1
        mine.gpus += gpus
        reason = fail.reason
        if jobs and reason.code == "no_capacity":
            reason = reasons.behind(r, jobs, need, fail.best_nodes, fail.tail)
            if fail.note is not None:
                reason = reasons.with_note(reason, fail.note)
        elif reason.details and reason.details[-1] != ("time_limit_s", r.time_limit_s):
            # A reservation's words name the limit of the kind's first job: each its own.
            said = dict(reason.details)
            if "reserved_for" in said:
                reason = reasons.reserved(
                    r, said["reserved_for"], said["reservation_start"], self.now
                )
        held = self.reserved_for.get(r.id)
        estimate: float | None
        if held is not None:
            # Reserved: its GPUs come back to later jobs only when it ends, by its limit
            # from its reserved start (taken from the fluid's clock, it would end sooner),
            # and they are those of the group it is reserved in.
            f = fluids[held.group]
            f.take(gpus, r.time_limit_s, at=max(held.start, f.clock))
            estimate = held.start
        elif len(c.fluids) == 1:  # the usual case
            estimate = c.fluids[0].start(gpus, r.time_limit_s)
            # The fluid pools a group's GPUs; it cannot be before nodes could hold the
            # shape, and with no known release that makes them, there is none.
            if estimate is not None and c.floored:
                if not c.floor_known:
                    c.floor, c.floor_known = self.group_floor(c.keys[0], r), True
                floor = c.floor
                estimate = None if floor is None else max(estimate, floor)
        else:
            estimate = self.estimate(c.keys, r, gpus, c.floored)
        if held is not None:
            estimate = held.start
        self.waits.append(Wait(r.id, reason, len(self.waits) + 1, estimate, held is not None))
        if c.quota_key is not None:
            # It holds its team's quota once it starts: jobs behind it refused quota count it.
            q = self._quota_fluids.get(c.quota_key)
            if q is None:
                self._quota_ahead.setdefault(c.quota_key, []).append((gpus, r.time_limit_s))
            else:
                q.take(gpus, r.time_limit_s)

    def waiting_kind(self, r: JobRequest, fail: _Failure) -> _Waiting:
        """What capacity_wait needs of r's kind, worked out at its first wait."""
        model = r.gpu_model
        where = (model, r.pool, r.cluster)
        found = self._rivals.get(where)
        if found is None:
            # Jobs compete when some node could hold either: their capacity groups meet.
            found = self._rivals[where] = (_Ahead(), [])
            found[1].append(found[0])
            mine = {g.key for g in self.groups(model, r)}
            for other, (theirs, their_rivals) in self._rivals.items():
                if other != where and any(g.key in mine for g in self.index.groups_for(*other)):
                    found[1].append(theirs)
                    their_rivals.append(found[0])
        keys = fail.where or tuple(g.key for g in self.groups(model, r))
        fluids = self.fluid_state()
        return _Waiting(
            found[0],
            found[1],
            keys,
            tuple(fluids[key] for key in keys),
            bool(r.gpus_per_node and not r.mig_profile),
            self.quota_key_of(r) if self.policy.quotas else None,
        )

    def hold_quota(self, r: JobRequest, gpus: float | None, until: float | None) -> None:
        """r fits its team's nominal but waits for nodes: hold that nominal against the
        team's later jobs until its earliest start (`until`, its reservation's start; else
        when nodes could first hold its shape, worked out now: a floor cached earlier in
        the cycle may be from before GPUs it needs were taken). Not when its start is not
        known: the team's later jobs would wait for a time nobody knows."""
        if not gpus or not r.gpus_per_node:
            return
        k = self.quota_key_of(r)
        if k is None or k in self.holds:  # one per quota, as EASY reserves for the first
            return
        if until is None:
            groups = self.groups(r.gpu_model, r)
            until = earliest_start(self.index, groups, r.gpus_per_node, r.nodes, self.events())
        if until is None or until <= self.now:
            return
        self.holds[k] = _Hold(gpus, until, r.id, self.value(r))

    def hold_borrowed(self, r: JobRequest, model: str, gpus: float, at: float) -> None:
        """r, reserved from `at`, will borrow on its quota then: hold what it will borrow
        (Ledger.hold_for), counting the team's jobs started or preempting this cycle that
        end by then, and those it preempts by when they leave."""
        k = self.ledger.key(r.team, model)
        started = self.quota_since(k) if k is not None else ()
        preempted = self._quota_preempted.get(k, ()) if k is not None else ()
        self.ledger.hold_for(r.team, model, gpus, at, self.idle_gpus(model, r), started, preempted)

    def hold_slice_quota(self, r: JobRequest, gpus: float | None, until: float | None) -> None:
        """hold_quota for a slice job that fits its team's nominal but waits for an instance:
        until one it may use comes free (`until`, by the limits of the jobs holding them)."""
        k = self.quota_key_of(r)
        if not gpus or k is None or k in self.holds or until is None or until <= self.now:
            return
        self.holds[k] = _Hold(gpus, until, r.id, self.value(r))

    def held_back(
        self, r: JobRequest, model: str, gpus: float, ends: float | None
    ) -> tuple[Reason, float] | None:
        """Would r take nominal its team holds for an earlier job (hold_quota), so that the
        job could not start when it otherwise would? Then why, and until when a job that
        ends sooner may pass."""
        k = self.ledger.key(r.team, model)
        h = None if k is None else self.holds.get(k)
        if k is None or h is None or (ends is not None and ends <= h.until):
            return None
        if self.value(r) > h.value:  # classes rank first
            return None
        acc = self.ledger.accounts[k]
        if acc.used + h.gpus + gpus <= acc.quota.nominal + 1e-9:
            return None
        # Room for both by the time the holder could start (the team's jobs ending by then,
        # those started or preempting this cycle too, those it preempts when they leave)?
        both = self.ledger.nominal_free_at(
            r.team, model, h.gpus + gpus, self.quota_since(k), self._quota_preempted.get(k, ())
        )
        if both is not None and both <= h.until:
            return None
        self.held_until = h.until
        return reasons.quota_held(r, acc.quota, acc.used, h.gpus, h.holder), h.until

    def shape_floor(self, r: JobRequest) -> float | None:
        """The earliest time r's shape fits on nodes as the cycle has left them and known
        releases free them (now if it fits now; None if none does). Once per shape: a later
        job of the shape sees fewer free GPUs, so this stays a lower bound for it."""
        shape = (r.gpu_model, r.pool, r.cluster, r.nodes, r.gpus_per_node)
        if shape not in self._floors:
            groups = self.groups(r.gpu_model, r)
            g, n = r.gpus_per_node, r.nodes
            if best_fit(self.index, groups, g, n, {}) is not None:
                self._floors[shape] = self.now
            else:
                self._floors[shape] = earliest_start(self.index, groups, g, n, self.events())
        return self._floors[shape]

    def group_floor(self, key: GroupKey, r: JobRequest) -> float | None:
        """shape_floor on one capacity group."""
        g, n = r.gpus_per_node, r.nodes
        at = (key, g, n)
        if at not in self._group_floors:
            groups = [self.index.groups[key]]
            if best_fit(self.index, groups, g, n, {}) is not None:
                self._group_floors[at] = self.now
            else:
                self._group_floors[at] = earliest_start(self.index, groups, g, n, self.events())
        return self._group_floors[at]

    # -- whole GPUs --------------------------------------------------------------------

    def try_whole(
        self, k: int, r: JobRequest, gpus: float, first_tier: bool, on_nodes: tuple[str, ...]
    ) -> _Failure | None:
        """Start r, of kind number k, or say why not (placing it on hold or preempting for it
        on the way). `on_nodes`: where an earlier cycle preempted for it
        (PendingJob.preempting_on), tried first."""
        models = self.models_for(r)
        if r.gpu_model and r.gpu_model not in self.capacity:
            return _Failure(reasons.unsatisfiable(r, 0), capacity=False)
        if self.never and self.never[k]:
            # No node can ever hold it: that, not its quota, is what it waits for.
            groups = self.groups(r.gpu_model, r)
            best = max((grp.max_fitting_nodes(r.gpus_per_node) for grp in groups), default=0)
            widest = max((grp.width for grp in groups if grp.whole), default=0)
            return _Failure(reasons.unsatisfiable(r, best, widest), capacity=False)
        preemptible = self.preemptible(r)
        allowed: list[tuple[str, bool]] = []
        refusal: Reason | None = None
        others: tuple[Reason, ...] = ()  # other models' refusals, for a job for any model
        ends = None if r.time_limit_s is None else self.now + r.time_limit_s
        check, preempted = self.ledger.check, self.protected.get(r.id)  # check_quota, inlined
        for m in models:
            idle = partial(self.idle_gpus, m, r) if r.gpus_per_node else None
            verdict = check(r.team, m, gpus, preemptible, ends, idle=idle, preempted=preempted)
            if verdict.ok:
                allowed.append((m, verdict.borrowed))
            elif refusal is None:
                refusal = verdict.reason
            elif verdict.reason is not None:
                others = (*others, verdict.reason)
        if others and refusal is not None:
            refusal = reasons.on_every_model((refusal, *others))
        if refusal is not None and not allowed:
            refusal = self.passable(r, gpus, refusal)
        if allowed and self.holds:
            kept = []
            held_until = math.inf
            for m, b in allowed:
                held = self.held_back(r, m, gpus, ends)
                if held is None:
                    kept.append((m, b))
                else:
                    refusal, held_until = held[0], min(held_until, held[1])
            if not kept:
                # Not a preemption: the team's own earlier job has the first claim.
                return _Failure(refusal or reasons.unsatisfiable(r, 0), False, held_until)
            allowed = kept
        if not allowed:
            waiting = self.preempt_for_quota(k, r, gpus, models, on_nodes)
            note, self.not_worth = self.not_worth, None
            if waiting is not None:
                ready = self.victims_gone_at
                return _Failure(waiting, capacity=False, shared=False, estimate=ready)
            if refusal is not None and note is not None:
                refusal = reasons.with_note(refusal, note)
            # Quota lent until a time may still admit a job of this kind that ends sooner.
            return _Failure(
                refusal or reasons.unsatisfiable(r, 0),
                capacity=False,
                short_before=self.ledger.lent_until(models),
            )
        groups = [grp for m, _ in allowed for grp in self.groups(m, r)]
        g, n = r.gpus_per_node, r.nodes
        # First where its preemption freed GPUs for it.
        fit = fit_on(self.index, groups, g, n, on_nodes) if on_nodes else None
        own = fit is not None
        if fit is None and n == 1 and g > 0 and self.policy.pack_by_end:
            fit = fit_by_end(
                self.index, groups, g, math.inf if ends is None else ends, self.horizon()
            )
        elif fit is None:
            fit = best_fit(self.index, groups, g, n, {})
        # While jobs on its own nodes are still leaving, it waits for them rather than take
        # GPUs on a node another preemptor waits on: likely freed for that job, which would
        # then preempt once more.
        waits_for_own = (
            fit is not None
            and not own
            and bool(on_nodes)
            and self.owed_to_another(r.id, fit.nodes)
            and self.leaving_on(on_nodes)
        )
        if waits_for_own:
            fit = None
        from_held = False
        if fit is None and self.reservations and not waits_for_own:
            held_fit, holder = self.fit_with_held(groups, g, n)
            if held_fit is not None and holder is not None:
                if ends is not None and ends <= holder.start:
                    fit, from_held = held_fit, True
                else:
                    return _Failure(
                        reasons.reserved(r, holder.job_id, holder.start, self.now),
                        capacity=True,
                        short_before=holder.start,
                        where=tuple(grp.key for grp in groups),
                    )
        if fit is not None:
            model = fit.group.key[0]
            # What a team borrows is held by its preemptible jobs (quota.py).
            borrowed = dict(allowed)[model] and preemptible
            allocs = allocate(self.index, fit, g, from_held)
            self.commit_quota(r, model, gpus, ends)
            self.quota_taken(r, model, gpus, ends)
            self.starts.append(Start(r.id, Placement(allocs), model, borrowed))
            self.cycle_releases.append((ends, model, allocs))
            if self._horizon is not None:
                self.extend_horizon(allocs, math.inf if ends is None else ends)
            if self._events is not None and ends is not None:
                # As releases() would place them: after the releases of the same instant
                # and node already there (a stable sort of the list with these appended).
                for a in allocs:
                    insort(self._events, (ends, a.node, a.gpus), key=_at_node)
            if self.fluids is not None:
                self.fluids[fit.group.key].take(g * n, r.time_limit_s, at=self.now)
            return None
        max_nodes = max((grp.max_fitting_nodes(g) for grp in groups), default=0)
        if max_nodes < n:
            widest = max((grp.width for grp in groups if grp.whole), default=0)
            return _Failure(reasons.unsatisfiable(r, max_nodes, widest), capacity=False)
        best = self.best_nodes_now(groups, g)  # before holds change the picture
        waiting = self.preempt_for(r, gpus, groups, [m for m, _ in allowed], first_tier, on_nodes)
        note, self.not_worth = self.not_worth, None
        if waiting is not None:
            ready = self.victims_gone_at
            return _Failure(waiting, capacity=False, shared=False, estimate=ready)
        # EASY (the backfill baseline): one reservation, the first blocked job's; gpuq keeps
        # one per capacity group (GPU model, pool, cluster), so a blocked job of one model,
        # pool or cluster does not free another's for all.
        if self.policy.backfill and not (
            self.reservations if not self.policy.priorities else self.reserved_in(groups)
        ):
            res = reserve(self.index, groups, g, n, self.events(), r.id)
            if res is not None:
                self.reservations.append(res)
                self.reserved_for[r.id] = res
                borrows = [m for m, b in allowed if b and m in res.models]
                if len(borrows) == 1 and preemptible:
                    # The quota it borrows then is held from later jobs still running then.
                    self.hold_borrowed(r, borrows[0], gpus, res.start)
        reason = reasons.no_capacity(r, best)
        return _Failure(
            reason if note is None else reasons.with_note(reason, note),
            capacity=True,
            best_nodes=best,
            tail=reasons.behind_tail(r, best),
            note=note,
            groups=groups,
            where=tuple(grp.key for grp in groups),
        )

    def reserve_from(self, r: JobRequest, until: float) -> float:
        """r is refused quota until `until` (its team's own jobs end by then) and holds its
        team's nominal meanwhile: it preempted in an earlier cycle (PendingJob.preempting_on),
        or has waited Policy.quota_hold_after_s. It also gets an EASY reservation of the
        nodes it will need from then, so that the nodes drain while the quota does (it does
        not wait for nodes once its quota is there) and a job that would outlast that wait
        does not take them (for a preemptor, the GPUs its victims freed: else r would
        reclaim them once more). One reservation per capacity group, as for a job waiting
        for nodes. Its start."""
        if not self.policy.backfill or not r.gpus_per_node:
            return until
        groups = [grp for m in self.models_for(r) for grp in self.groups(m, r)]
        if self.reservations if not self.policy.priorities else self.reserved_in(groups):
            return until
        res = reserve(self.index, groups, r.gpus_per_node, r.nodes, self.events(), r.id)
        if res is None:
            return until
        res = replace(res, start=max(res.start, until))
        self.reservations.append(res)
        self.reserved_for[r.id] = res
        return res.start

    def reserved_in(self, groups: Sequence[Group]) -> bool:
        """Is a job ahead reserved in one of these groups?"""
        keys = {grp.key for grp in groups}
        return any(res.group in keys for res in self.reservations)

    def capacity_failure_now(self, r: JobRequest, fail: _Failure) -> _Failure:
        """A kind's capacity verdict for a later member, once jobs have started since: the
        best nodes now are counted at its turn (the verdict stands: capacity only shrinks)."""
        if not fail.groups:
            return fail
        best = self.best_nodes_now(fail.groups, r.gpus_per_node)
        if best == fail.best_nodes:
            return fail
        reason = reasons.no_capacity(r, best)
        return replace(
            fail,
            reason=reason if fail.note is None else reasons.with_note(reason, fail.note),
            best_nodes=best,
            tail=reasons.behind_tail(r, best),
        )

    def quota_refusal_now(self, r: JobRequest, reason: Reason) -> Reason:
        """A kind's quota refusal for a later member, once jobs have started since: the
        team's usage at its turn (it only grows, so the verdict stands). A hold's or a
        note's words, and a slice's, are kept as they were."""
        details = dict(reason.details)
        if r.mig_profile or _HELD_FOR in details or "preemption_not_worth" in details:
            return reason
        gpus = float(r.nodes * r.gpus_per_node)
        ends = None if r.time_limit_s is None else self.now + r.time_limit_s
        refused = []
        for m in self.models_for(r):
            idle = partial(self.idle_gpus, m, r) if r.gpus_per_node else None
            verdict = self.check_quota(r, m, gpus, ends, idle)
            if verdict.ok:
                return reason  # not expected; the verdict the kind reached stands
            if verdict.reason is not None:
                refused.append(verdict.reason)
        return self.passable(r, gpus, reasons.on_every_model(refused)) if refused else reason

    def passable(self, r: JobRequest, gpus: float, refusal: Reason) -> Reason:
        """A whole-GPU job of more than one GPU that its team's quota refuses, for want of
        GPUs to borrow, is told that the team's smaller jobs may pass it meanwhile (not one
        that has waited Policy.quota_hold_after_s: it holds the nominal, see holding)."""
        if gpus <= 1 or r.mig_profile or refusal.code != "quota_exhausted":
            return refusal
        hold_after = self.policy.quota_hold_after_s
        if hold_after is not None and self.now - r.submit_time >= hold_after:
            return refusal
        # Not a refusal to borrow (Ledger.check's, which says what is lendable), or one its
        # team's nominal could never hold: then it is not the team's own jobs that keep it
        # waiting. Read without a dict: a deep queue asks often.
        nominal = None
        for key, value in refusal.details:
            if key == "nominal":
                nominal = value
            elif key == "lendable":
                if nominal is None or gpus > nominal + 1e-9:
                    return refusal
                if self._passed is None:
                    self._passed = reasons.passed_meanwhile(hold_after)
                return reasons.with_note(refusal, self._passed)
        return refusal

    def holding(self, r: JobRequest, refusal: Reason) -> Reason:
        """The refusal of a job that has waited Policy.quota_hold_after_s, once it holds its
        team's nominal against the team's later jobs (one job per quota does)."""
        k = self.quota_key_of(r)
        h = None if k is None else self.holds.get(k)
        if h is None or h.holder != r.id or self.policy.quota_hold_after_s is None:
            return refusal
        return reasons.with_note(
            refusal, reasons.holding_nominal(h.gpus, self.policy.quota_hold_after_s)
        )

    def idle_gpus(self, model: str, r: JobRequest) -> float:
        """The idle whole GPUs (free, or held for a job ahead) of `model` that r may use:
        what its quota refusal says may be lent to it at most (the model's quota also
        counts its MIG GPUs, and those of other pools and clusters)."""
        groups = self.groups(model, r)
        idle = sum(k * len(bucket) for grp in groups for k, bucket in enumerate(grp.buckets))
        # Held GPUs are on the nodes of reservations and of this cycle's preemptions only.
        keys = {grp.key for grp in groups}
        nodes = self.index.nodes
        for name in self.held_nodes():
            st = nodes.get(name)
            if st is not None and st.group in keys:
                idle += len(st.held) + len(st.kept)
        return float(idle)

    def held_nodes(self) -> set[str]:
        """The nodes of reservations and of this cycle's preemptions (both only grow within
        a cycle, so the set is kept until either grows)."""
        size = (len(self.reservations), len(self.preempting))
        if self._held_nodes[0] != size:
            held = {name for res in self.reservations for name in res.nodes}
            held.update(name for _, on in self.preempting for name in on)
            self._held_nodes = (size, held)
        return self._held_nodes[1]

    def horizon(self) -> dict[str, float]:
        """When each node's running jobs, and those started this cycle, end by their limits
        (inf: one has none)."""
        if self._horizon is None:
            self._horizon = {}
            ends = chain(
                zip(self.running_ends(), (j.placement.allocs for j in self.s.running), strict=True),
                ((end, allocs) for end, _, allocs in self.cycle_releases),
            )
            for end, allocs in ends:
                self.extend_horizon(allocs, math.inf if end is None else end)
        return self._horizon

    def extend_horizon(self, allocs: Sequence[NodeAlloc], end: float) -> None:
        horizon = self._horizon
        assert horizon is not None
        for a in allocs:
            if end > horizon.get(a.node, -math.inf):
                horizon[a.node] = end

    def fit_with_held(
        self, groups: Sequence[Group], g: int, n: int
    ) -> tuple[Fit | None, Reservation | None]:
        keys = {grp.key[0] for grp in groups}
        relevant = [res for res in self.reservations if res.models & keys]
        if not relevant:
            return None, None
        extra = self.index.held_counts(name for res in relevant for name in res.nodes)
        fit = best_fit(self.index, groups, g, n, extra) if extra else None
        if fit is None:
            return None, None
        holders = [res for res in relevant if set(res.nodes) & set(fit.nodes)]
        return fit, min(holders or relevant, key=lambda res: res.start)

    def running_ends(self) -> list[float | None]:
        """When each running job ends for planning (backfill.end_time), in snapshot order."""
        if self._ends is None:
            grace, now = self.policy.preemption_grace_s, self.now
            self._ends = [end_time(j, now, grace) for j in self.s.running]
        return self._ends

    def events(self) -> list[Release]:
        if self._events is None:
            self._events = releases(
                chain(
                    zip(
                        self.running_ends(),
                        (j.placement.allocs for j in self.s.running),
                        strict=True,
                    ),
                    ((ends, allocs) for ends, _, allocs in self.cycle_releases),
                )
            )
        return self._events

    # -- preemption --------------------------------------------------------------------

    def owed_to_another(self, job_id: str, names: Sequence[str]) -> bool:
        """Is one of these nodes where another job preempted in an earlier cycle
        (PendingJob.preempting_on) and waits for the GPUs freed there?"""
        if self._preemptor_nodes is None:
            self._preemptor_nodes = {}
            for p in self.s.pending:
                if p.preempting_on and not p.request.mig_profile:
                    for name in p.preempting_on:
                        self._preemptor_nodes.setdefault(name, set()).add(p.request.id)
        waiting = self._preemptor_nodes
        return any(waiting.get(name, set()) - {job_id} for name in names)

    def leaving_on(self, names: Sequence[str]) -> bool:
        """Is a job leaving (preempted, in its grace period) on one of these nodes?"""
        if self._leaving_nodes is None:
            self._leaving_nodes = {
                a.node
                for job in self.s.running
                if job.preempting_since is not None
                for a in job.placement.allocs
                if a.gpus
            }
        return not self._leaving_nodes.isdisjoint(names)

    def candidates(self) -> dict[str, list[Candidate]]:
        """Preemptible running jobs per node, in victim preference order."""
        if self._candidates is None:
            borrowed = self.borrowed_ids()
            values, preemptibles, protected = self.values, self.preemptibles, self.protected
            on_node: dict[str, list[Candidate]] = {}
            for job in self.s.running:
                r = job.request
                leaving = job.preempting_since is not None
                if not (leaving or (preemptibles.get(r.priority, True) and r.id not in protected)):
                    continue
                allocs = job.placement.allocs
                if len(allocs) == 1:  # the usual case, without a comprehension's frame
                    a = allocs[0]
                    size = len(a.gpus)
                    per_node = {a.node: size} if size else {}
                else:
                    per_node = {a.node: len(a.gpus) for a in allocs if a.gpus}
                    size = sum(per_node.values())
                if not size:
                    continue  # a MIG slice: victim searches free whole GPUs
                c = Candidate(
                    job, values.get(r.priority, 0), r.id in borrowed, leaving, per_node, size
                )
                for node in per_node:
                    on_node.setdefault(node, []).append(c)
                if leaving:
                    self._leaving.append(c)
                elif c.borrowed:
                    self._borrowed.append(c)
                self._by_team.setdefault(c.team, []).append(c)
            for lst in on_node.values():
                lst.sort(key=_preference)
            self._candidates = on_node
            self.mark_reclaimable()
        return self._candidates

    def reclaim_budget(self) -> dict[tuple[str, str], float]:
        """What a reclaim may take back from each quota running above its nominal: the GPUs
        its running jobs hold above it, less those already leaving. Any of such a team's
        preemptible jobs may be the victim, not only the most recently started ones (those
        labelled borrowed): a reclaim needs GPUs of a model and on nodes, and the labelled
        ones may hold none there. Each victim of another team, reclaimed or preempted for
        priority, spends it (record_victims); as Kueue's, a victim may be taken while its
        quota is still above its nominal, what is left of the budget positive, so the last
        one may take the team below it (preempt.within_budget): otherwise a job larger than
        what its team borrows is never reclaimed. What the reclaimer does not need stays
        free for that team, and plans that keep every team at its nominal are preferred."""
        if self._reclaim_left is None:
            budget: dict[tuple[str, str], float] = {}
            if self.policy.quotas:
                ledger = self.ledger
                leaving: dict[tuple[str, str] | None, float] = {}
                for job, gpus in zip(self.s.running, self.running_gpus, strict=True):
                    if job.preempting_since is not None:
                        k = ledger.usage_key(job.request.team, job.gpu_model)
                        leaving[k] = leaving.get(k, 0.0) + gpus
                for k, acc in ledger.accounts.items():
                    held = sum(g for _, g in ledger.held(k))
                    above = held - leaving.get(k, 0.0) - acc.quota.nominal
                    if above > 1e-9:
                        budget[k] = above
                for k, used in ledger.unquoted.items():  # nominal 0: all above it
                    above = used - leaving.get(k, 0.0)
                    if above > 1e-9:
                        budget[k] = above
            self._reclaim_left = budget
        return self._reclaim_left

    def mark_reclaimable(self) -> None:
        """Set Candidate.quota_key and reclaimable on the whole-GPU candidates (preempt.py)."""
        budget = self.reclaim_budget()
        ledger = self.ledger
        for team in {k[0] for k in budget}:
            for c in self._by_team.get(team, ()):
                k = ledger.usage_key(c.team, c.job.gpu_model)
                if k in budget and not c.leaving:
                    c.quota_key = k
                    c.reclaimable = True
                    if not c.borrowed:
                        self._reclaimable.append(c)
        # Labelled borrowed jobs of a quota with nothing left above its nominal (what is
        # above it is leaving) are no reclaim victims.
        for c in self._borrowed:
            if c.quota_key is None:
                c.reclaimable = False

    def borrowed_ids(self) -> set[str]:
        if self._borrowed_ids is None:
            self._borrowed_ids = self.borrowed_jobs()
        return self._borrowed_ids

    def borrowed_jobs(self) -> set[str]:
        """The jobs that hold a team's GPUs above nominal: its most recently started ones."""
        over = self.ledger.borrowed_by_team()
        if not over:
            return set()
        key, preemptibles, protected = self.ledger.usage_key, self.preemptibles, self.protected
        teams = {team for team, _ in over}  # most teams borrow nothing: skip their jobs first
        by_key: dict[tuple[str, str], list[tuple[RunningJob, float]]] = {}
        for job, gpus in zip(self.s.running, self.running_gpus, strict=True):
            r = job.request
            if r.team not in teams:
                continue
            k = key(r.team, job.gpu_model)
            if (
                k is not None
                and k in over
                and preemptibles.get(r.priority, True)
                and r.id not in protected
            ):
                by_key.setdefault(k, []).append((job, gpus))
        result: set[str] = set()
        for k, jobs in by_key.items():
            jobs.sort(key=lambda jg: (-jg[0].start_time, jg[0].request.id))
            covered = 0.0
            for job, gpus in jobs:
                if covered >= over[k] - 1e-9:
                    break
                result.add(job.request.id)
                covered += gpus
        return result

    def preempt_for(
        self,
        r: JobRequest,
        gpus: float,
        groups: Sequence[Group],
        models: Sequence[str],
        first_tier: bool,
        on_nodes: tuple[str, ...],
    ) -> Reason | None:
        """Victims for a job that does not fit, preferring `on_nodes` (try_whole). It
        reclaims only when it comes before every borrower in the order (first tier), so the
        GPUs it frees are not taken back."""
        policy = self.policy
        if not policy.preemption or not self.s.running:
            return None
        reclaims = (
            policy.quotas
            and first_tier
            and any(self.ledger.within_nominal(r.team, m, gpus) for m in models)
        )
        priority = self.preempts_for_priority(r)
        keep = False  # only its victims that are leaving, on its nodes (keeps_beyond_bound)
        if self.searches >= policy.max_preemption_searches:
            if self.may_reclaim_beyond_bound(r, reclaims):
                priority = False
            elif on_nodes:
                priority, reclaims, keep = False, False, True
            else:
                return None
        p = Preemptor(
            r.team,
            self.value(r),
            reclaims,
            policy.quotas,
            policy.min_runtime_s,
            self.now,
            max_preemptions=self.max_preemptions,
            priority=priority,
        )
        on_node = self.candidates()
        if p.quotas or keep:
            on_node = self.within_reach(p, on_node)
        if keep:
            on_node = self.keeps_beyond_bound(on_node, on_nodes)
        # A search with no job it may take on these nodes is no search: it must not use up
        # the cycle's bound before a job that has victims (the next cycle would be the same).
        keys = {grp.key for grp in groups}
        nodes = self.index.nodes
        if not any(name in nodes and nodes[name].group in keys for name in on_node):
            return None
        self.count_search(r, p.reclaims)
        found = self.victims(r, groups, p, on_nodes, on_node)
        if found is None:
            return None
        if not self.worth_it(
            found.victims,
            gpus,
            lambda: earliest_start(self.index, groups, r.gpus_per_node, r.nodes, self.events()),
        ):
            return None
        self.apply_preemption(r, gpus, found)
        leaving = [c for c, _ in found.victims]
        freed = sum(c.size for c in leaving)
        return reasons.preempting(len(leaving), freed, self.victims_gone_at - self.now, found.nodes)

    def keeps_beyond_bound(
        self, on_node: dict[str, list[Candidate]], on_nodes: tuple[str, ...]
    ) -> dict[str, list[Candidate]]:
        """Once the cycle's searches are used up, a job that preempted in an earlier cycle
        still claims its victims that are leaving, on the nodes it preempted on: that is no
        new search (no job is preempted), and without it the GPUs they free go to the jobs
        behind it, and it preempts again. `on_node`: what a search of leaving jobs only
        reaches (within_reach)."""
        return {name: cands for name, cands in on_node.items() if name in on_nodes}

    def may_reclaim_beyond_bound(self, r: JobRequest, reclaims: bool) -> bool:
        """Once the cycle's searches are used up, may r still search to reclaim? Once per
        team per cycle: searches that fail for others (every cycle, while the queue stays
        as it is) must not keep a team from its guarantee, and the extra searches stay
        bounded by the number of teams."""
        return reclaims and r.team not in self.reclaimed_beyond

    def count_search(self, r: JobRequest, reclaims: bool) -> None:
        if self.searches >= self.policy.max_preemption_searches and reclaims:
            self.reclaimed_beyond.add(r.team)
        self.searches += 1

    def preempt_for_quota(
        self,
        k: int,
        r: JobRequest,
        gpus: float,
        models: Sequence[str],
        on_nodes: tuple[str, ...],
    ) -> Reason | None:
        """_preempt_for_quota, without searching again for a kind that found no victims
        while nothing has started, been preempted or reserved since: a deep queue repeats a
        kind refused quota, and each would search the same cluster in vain. A repeat counts
        the searches the first made, as if made again, so that the cap falls where it would.
        A job that preempted on `on_nodes` before searches itself, its verdict not kept: it
        prefers those nodes, and past the cap claims its leaving victims there, as no other
        job of its kind does."""
        if on_nodes:
            return self._preempt_for_quota(r, gpus, models, on_nodes)
        stamp = (len(self.starts), len(self.preemptions), len(self.reservations))
        cap = self.policy.max_preemption_searches
        found = self._no_victims.get(k)  # r is of kind number k: its GPUs and models too
        if found is not None and found[0] == stamp:
            if self.searches < cap:
                self.searches = min(self.searches + found[1], cap)
            if found[2] is not None:
                self.not_worth = found[2]
            return None
        searches, note = self.searches, self.not_worth
        result = self._preempt_for_quota(r, gpus, models, on_nodes)
        if result is None:
            # The note only when this search set it (a refusal as not worth it).
            set_note = self.not_worth if self.not_worth is not note else None
            self._no_victims[k] = (stamp, self.searches - searches, set_note)
        return result

    def _preempt_for_quota(
        self, r: JobRequest, gpus: float, models: Sequence[str], on_nodes: tuple[str, ...]
    ) -> Reason | None:
        """A job over its team's quota may displace its own team's lower classes on that
        quota: enough of them to fit the quota, and to fit on nodes, when without them it
        would run within the team's nominal (victims on `on_nodes` preferred, as for
        preempt_for)."""
        policy = self.policy
        if not policy.preemption or not policy.quotas or not self.s.running:
            return None
        cap = policy.max_preemption_searches
        # Past the bound only its victims that are leaving, on its nodes (keeps_beyond_bound).
        keep = self.searches >= cap
        if keep and not on_nodes:
            return None  # as the loop below would, before the candidates are built
        if not self.preempts_for_priority(r):
            return None  # displacing its own team's lower classes is a priority preemption
        value = self.value(r)
        own_all = self.own_candidates().get(r.team, [])
        if not own_all or not (own_all[0].leaving or own_all[0].value < value):
            return None
        for m in models:
            if self.searches >= cap and not keep:
                return None
            key = self.ledger.key(r.team, m)
            acc = self.ledger.account(r.team, m)
            if key is None or acc is None:
                continue
            if not self.preemptible(r) and gpus > self.ledger.fixed_room(r.team, m) + 1e-9:
                continue  # only non-preemptible jobs hold that quota: none can be displaced
            shortfall = acc.used + gpus - self.ledger.headroom(r.team, m)
            own, own_gpus = self.displaceable(r.team, value, key, own_all)
            if keep:
                own = [c for c in own if c.leaving]
                own_gpus = sum(c.size for c in own)
            if own_gpus < shortfall - 1e-9:
                continue
            # A team's nominal is its higher classes' first: a job displaces lower ones to
            # run within it, not to borrow more (the lost work buys no guarantee).
            if acc.used - own_gpus + gpus > acc.quota.nominal + 1e-9:
                continue
            self.searches += 1
            p = Preemptor(
                r.team,
                value,
                False,
                True,
                policy.min_runtime_s,
                self.now,
                True,
                max_preemptions=self.max_preemptions,
                priority=not keep,
            )
            groups = self.groups(m, r)
            reach = None
            if keep:
                reach = self.keeps_beyond_bound(self.within_reach(p, self.candidates()), on_nodes)
            # The plan frees the quota too (its victims, and more of `own` where they fall
            # short), and is priced with all it takes.
            found = self.victims(r, groups, p, on_nodes, reach, (shortfall, own))
            if found is None:
                continue
            victims = found.victims
            freed = sum(c.size for c, _ in victims if c.team == r.team)
            ready_at = partial(
                self.ledger.nominal_free_at,
                r.team,
                m,
                gpus,
                self.quota_since(key),
                self._quota_preempted.get(key, ()),
            )
            if not self.worth_it(victims, gpus, ready_at):
                continue
            self.apply_preemption(r, gpus, found)
            return reasons.preempting(
                len(victims), int(freed), self.victims_gone_at - self.now, found.nodes
            )
        return None

    def worth_it(
        self,
        victims: Sequence[tuple[Candidate, str]],
        gpus: float,
        ready_at: Callable[[], float | None],
    ) -> bool:
        """Is a priority preemption worth the work it throws away? Only when the victims'
        GPU-seconds since they started are at most Policy.preemption_loss_ratio times the
        GPU-seconds the job would otherwise wait (until `ready_at()`, from time limits). A
        reclaim always is: it restores a guarantee. A refusal is kept in self.not_worth for
        the job's reason."""
        if any(kind == "reclaim" for _, kind in victims):
            return True
        now = self.now
        lost = sum(c.size * (now - c.start) for c, kind in victims if kind == "priority")
        return self.worth_losing(lost, gpus, ready_at)

    def worth_losing(self, lost: float, gpus: float, ready_at: Callable[[], float | None]) -> bool:
        """worth_it for `lost` GPU-seconds of priority victims' work."""
        ratio = self.policy.preemption_loss_ratio
        now = self.now
        if ratio is None or lost <= 0.0:
            return True
        at = ready_at()
        if at is None:
            return True
        wait = gpus * max(0.0, at - now)
        if lost <= ratio * wait:
            return True
        self.not_worth = reasons.not_worth(lost, wait)
        return False

    def displaceable(
        self, team: str, value: int, key: tuple[str, str], own_all: list[Candidate]
    ) -> tuple[list[Candidate], int]:
        """The team's running jobs on quota `key` that a job of class `value` may displace,
        and their GPUs. Kept until a preemption claims more jobs: a team's deep queue asks
        the same question job after job."""
        version = len(self.claimed)  # claimed only grows
        found = self._displaceable.get((team, value, key))
        if found is None or found[0] != version:
            min_runtime_s, now = self.policy.min_runtime_s, self.now
            own = [
                c
                for c in own_all
                if (
                    c.leaving
                    or (
                        c.value < value
                        and now - c.start >= min_runtime_s
                        and c.job.preemptions < self.max_preemptions
                    )
                )
                and c.id not in self.claimed
                and self.ledger.key(c.team, c.job.gpu_model) == key
            ]
            found = (version, own, sum(c.size for c in own))
            self._displaceable[(team, value, key)] = found
        return found[1], found[2]

    def own_candidates(self) -> dict[str, list[Candidate]]:
        """Each team's running jobs that may leave: those already leaving first (their quota
        is coming back), then preemptible ones, lowest class first."""
        if self._own is None:
            self.candidates()  # fills self._by_team: each candidate once, in its team's list
            self._own = {
                team: sorted(lst, key=lambda c: (not c.leaving, c.value, -c.start, c.id))
                for team, lst in self._by_team.items()
            }
        return self._own

    def victims(
        self,
        r: JobRequest,
        groups: Sequence[Group],
        p: Preemptor,
        on_nodes: tuple[str, ...],
        on_node: dict[str, list[Candidate]] | None = None,
        quota: tuple[float, Sequence[Candidate]] | None = None,
    ) -> Plan | None:
        """The victims that make room for r on `groups`, of nodes that cost the same those
        of `on_nodes` first (where an earlier cycle preempted for r); `on_node`: the
        candidates p may reach, when already worked out; `quota`: the quota r lacks and its
        team's jobs that may free it (preempt.plan)."""
        # Nodes reserved for a job ahead are off limits: their GPUs are promised.
        reserved = frozenset(n for res in self.reservations for n in res.nodes)
        if on_node is None:
            on_node = self.candidates()
            if p.quotas:
                on_node = self.within_reach(p, on_node)
        return plan_preemption(
            self.index,
            groups,
            r.gpus_per_node,
            r.nodes,
            on_node,
            p,
            self.claimed,
            reserved,
            self.reclaim_budget(),
            frozenset(on_nodes),
            quota,
        )

    def within_reach(
        self, p: Preemptor, on_node: dict[str, list[Candidate]]
    ) -> dict[str, list[Candidate]]:
        """The nodes of on_node with a job p may take. With quotas that is a job already
        leaving, a borrowed one or one of p's own team (preempt.py); a node with none of
        those cannot make room, so the search, which reads every candidate of every node
        it is given, is spared it."""
        team = p.team
        # Without priority preemption no class is lower for it: only reclaim and leaving jobs.
        value = p.value if p.priority else -math.inf
        reach = [*self._leaving, *(c for c in self._by_team.get(team, ()) if c.value < value)]
        if not p.own_team_only:
            reach += (
                c for c in self._borrowed if c.value < value or (p.reclaims and c.team != team)
            )
            if p.reclaims:
                reach += (c for c in self._reclaimable if c.team != team)
        names = {name for c in reach for name in c.gpus}
        return {name: cands for name, cands in on_node.items() if name in names}

    def apply_preemption(self, r: JobRequest, gpus: float, found: Plan) -> None:
        model = found.group.key[0]
        # The preemptor's quota is its own from now on: otherwise its team's lower jobs
        # restart on it while the victims leave, and are preempted again.
        self.commit_quota(r, model, gpus)
        self.record_victims(r, model, found.victims)
        self.preempting.append((r.id, found.nodes))
        held: dict[str, list[int]] = {}
        for name in found.nodes:
            st = self.index.nodes[name]
            # Of the node's free GPUs only those its victims there do not make up: another
            # job that preempted on this node (preempting_on names nodes only) may be owed
            # them, its victims gone already.
            coming = sum(c.gpus.get(name, 0) for c, _ in found.victims)
            held[name] = st.free[: max(0, r.gpus_per_node - coming)]
            self.index.keep(name, held[name])
        self.plan_preemptor(r, found, held)
        self.quota_preempting(r, model, gpus, self.victims_gone_at)

    def plan_preemptor(self, r: JobRequest, found: Plan, held: Mapping[str, list[int]]) -> None:
        """Release times after a preemption, for reservations and estimates: the victims
        leave by the grace period (sooner by their limits), and the GPUs r takes on its nodes
        (those `held` for it and the victims' it needs) come back only when r ends, by its
        limit from when the last victim has left; counted free at the victims' limits, they
        would be promised to a job behind while r runs on them."""
        events, fluids = self.events(), self.fluid_state()
        need = {name: r.gpus_per_node - len(gpus) for name, gpus in held.items()}
        taken = {name: list(gpus) for name, gpus in held.items()}
        start = self.now
        for c, _ in found.victims:
            start = max(start, self.victim_leaves(c.job, need, taken))
        self.victims_gone_at = start
        limit = r.time_limit_s
        fluids[found.group.key].take(r.nodes * r.gpus_per_node, limit, at=start)
        if limit is not None:
            for name, gpus in taken.items():
                insort(events, (start + limit, name, tuple(sorted(gpus))), key=_at_node)

    def victim_leaves(
        self,
        job: RunningJob,
        need: dict[str, int],
        taken: dict[str, list[int]],
    ) -> float:
        """A victim's GPUs come back when it leaves (by the grace period, sooner by its
        limit), not at its limit: moved so in the release events and fluids, for
        reservations and estimates, except those `need`ed on a node, which go to `taken`
        (its preemptor's). When it leaves."""
        now, grace = self.now, self.policy.preemption_grace_s
        events, fluids, up = self.events(), self.fluid_state(), self.index.nodes
        old = end_time(job, now, grace)
        leaves = now + grace if old is None else min(old, now + grace)
        allocs = job.placement.allocs
        if old is not None:
            for a in allocs:
                i = bisect_left(events, (old, a.node), key=_at_node)
                while i < len(events) and events[i] != (old, a.node, a.gpus):
                    i += 1
                if i < len(events):
                    del events[i]
        for key, count in _per_group(up, allocs):
            heap = fluids[key].heap
            if old is not None:
                # Cancels its release at `old` where it is, still in the heap or already
                # counted free by an estimate (then `old` is past the fluid's clock).
                heapq.heappush(heap, (old, -count))
            heapq.heappush(heap, (leaves, count))
        for a in allocs:
            more = need.get(a.node, 0)
            if more > 0:
                taken[a.node].extend(a.gpus[:more])
                need[a.node] = more - len(a.gpus[:more])
            if a.gpus[more:]:
                insort(events, (leaves, a.node, a.gpus[more:]), key=_at_node)
        return leaves

    def record_victims(
        self, r: JobRequest, model: str, victims: Sequence[tuple[Candidate, str]]
    ) -> None:
        """Claim the victims for r; each new one gets a Preemption with its sentence."""
        for c, kind in victims:
            self.claimed.add(c.job.request.id)
            if kind == "leaving":
                continue
            v = c.job.request
            # A slice: its share (a job of no GPU on a MIG node holds none).
            gpus = c.size or self.mig_holders().get(c.id, (c, 0.0))[1]
            if c.quota_key is not None and c.team != r.team:
                # Another team's GPUs above its nominal (reclaim_budget): spent. Past zero
                # (its last victim took it below its nominal) the quota has no more victims.
                self.reclaim_budget()[c.quota_key] -= gpus
            k = self.ledger.key(v.team, c.job.gpu_model)
            if k is not None:
                # It leaves within the grace, not at its limit: for its team's holds.
                old = end_time(c.job, self.now, self.policy.preemption_grace_s)
                leaves = self.now + self.policy.preemption_grace_s
                gone = (old, leaves if old is None else min(old, leaves), gpus)
                self.quota_preempted(k, gone)
            if kind == "reclaim":
                why = f"team {r.team} reclaimed its nominal {model} quota"
            else:
                why = (
                    f"priority {r.priority} ({self.value(r)}) outranks"
                    f" {v.priority} ({self.value(v)})"
                )
            self.preemptions.append(Preemption(v.id, r.id, kind, f"preempted by job {r.id}: {why}"))

    # -- MIG ---------------------------------------------------------------------------

    def new_mig_index(self) -> mig.MigIndex:
        """The cycle's MIG index. A GPU whose holders are all leaving is being emptied for
        the job that preempted them: it is reserved, and that job claims it again in its turn
        (preempt_for_mig), so no other job restarts on it and keeps it from going idle. The
        caller names that job (PendingJob.preempting_on): it is held for it, idle or not."""
        index = mig.MigIndex(self.s.nodes, self.mig_tables)
        index.mark_leaving({j.request.id for j in self.s.running if j.preempting_since is not None})
        named = sorted(
            mig.Named(r.id, r.mig_profile, p.preempting_on, r.gpu_model, r.pool, r.cluster)
            for p in self.s.pending
            if p.preempting_on and (r := p.request).mig_profile
        )
        if named:
            index.reserve_on(named)
        return index

    def mig_request(self, r: JobRequest, *, first_tier: bool = False) -> mig.MigRequest:
        # A job within its team's nominal comes before any borrower in the plan, as in the
        # order: else the plan gives an idle GPU to borrowers of a higher class, the job then
        # reclaims from them, and they take the GPU back as soon as they are requeued.
        value = self.value(r) + (FIRST_TIER_BONUS if first_tier else 0)
        return mig.MigRequest(
            r.id, r.mig_profile or "", r.gpu_model, r.pool, value, r.kind, r.cluster
        )

    def try_mig(
        self, r: JobRequest, gpus: float, first_tier: bool, on_nodes: tuple[str, ...] = ()
    ) -> Reason | None:
        if self.mig_index is None:
            self.mig_index = self.new_mig_index()
        profile = r.mig_profile or ""
        refusal: Reason | None = None
        admitted: list[str] = []
        ends = None if r.time_limit_s is None else self.now + r.time_limit_s
        models = [r.gpu_model] if r.gpu_model else self.mig_models
        if not any(self.mig_serves(r, m) for m in models):
            return reasons.mig_unoffered(r)  # as a whole-GPU job no node can hold
        over: list[str] = []  # the models whose quota refused it
        refused: tuple[Reason, ...] = ()  # what their quotas said
        for m in models:
            if not self.mig_serves(r, m):
                continue  # its quota for a model that never offers the profile is beside the point
            share = _fraction(m, profile, self.mig_tables) or gpus
            verdict = self.check_quota(r, m, share, ends)
            if not verdict.ok:
                refusal = refusal or verdict.reason
                over.append(m)
                if verdict.reason is not None:
                    refused = (*refused, verdict.reason)
                continue
            held = self.held_back(r, m, share, ends) if self.holds else None
            if held is not None:
                refusal = refusal or held[0]
                continue
            admitted.append(m)
            # Instances a relayout creates exist only once the backend has applied it.
            took = self.mig_index.take(
                profile, m, r.pool, r.id, include_relaid=False, cluster=r.cluster
            )
            if took is not None:
                node, slot = took
                self.commit_quota(r, m, share, ends)
                self.quota_taken(r, m, share, ends)
                alloc = NodeAlloc(node, (), slot)
                # What a team borrows is held by its preemptible jobs (quota.py).
                borrowed = verdict.borrowed and self.preemptible(r)
                self.starts.append(Start(r.id, Placement((alloc,)), m, borrowed))
                self.mig_started.append((ends, node, slot))
                if self._mig_ends is not None and ends is not None:
                    kind = self.mig_index.kind_at(node, slot)
                    if kind is not None:
                        heapq.heappush(self._mig_ends.setdefault(kind, []), ends)
                return None
        if not admitted and refusal is not None:
            if len(refused) > 1 and refusal is refused[0]:
                refusal = reasons.on_every_model(refused)
            waiting = self.preempt_slice_for_quota(r, gpus, over, on_nodes) if over else None
            note, self.not_worth = self.not_worth, None
            if waiting is not None:
                return waiting
            return refusal if note is None else reasons.with_note(refusal, note)
        if self.mig_index.relayout_for(r.id) is not None:
            target = self.mig_index.planned_for(r.id)
            assert target is not None
            # It starts once the layout is applied: its quota is its own from now on, as a
            # preemptor's (else a later job takes it, and the GPU was laid out for nothing).
            m = self.index.nodes[target[0]].group[0]
            if m in admitted:
                share = _fraction(m, profile, self.mig_tables) or gpus
                self.commit_quota(r, m, share, ends)
                self.quota_taken(r, m, share, ends)
            if self.mig_index.held_for(*target, r.id):
                # Emptied for it: still its own until the relayout is applied and it starts.
                self.preempting.append((r.id, (target[0],)))
                return reasons.mig_relayout(r, *target, on_nodes=(target[0],))
            return reasons.mig_relayout(r, *target)
        waiting = self.preempt_for_mig(r, gpus, admitted, first_tier, on_nodes)
        note, self.not_worth = self.not_worth, None
        if waiting is not None:
            return waiting
        shortage = self.mig_index.shortage(
            profile, admitted or [r.gpu_model], r.pool, r.cluster, r.id
        )
        reason = reasons.mig_unavailable(r, shortage)
        return reason if note is None else reasons.with_note(reason, note)

    def preempt_slice_for_quota(
        self, r: JobRequest, gpus: float, models: Sequence[str], on_nodes: tuple[str, ...] = ()
    ) -> Reason | None:
        """A slice job over its team's quota displaces its own team's lower classes on that
        quota as a whole-GPU job does (_preempt_for_quota): enough of them to fit the quota,
        to run within its nominal. Only where it then has an instance: one free for it (or
        an idle GPU to lay out), held for it while they leave; else one that some of them
        free (preempt_for_mig's sets: a job holding an instance it may use, or all of a
        GPU's holders), counted towards the quota they free. Past the cycle's bound, for a
        job that preempted on `on_nodes` in an earlier cycle, only its victims that are
        leaving (keeps_beyond_bound)."""
        policy = self.policy
        if not policy.preemption or not policy.quotas or not self.s.running:
            return None
        keep = self.searches >= policy.max_preemption_searches and bool(on_nodes)
        if not self.preempts_for_priority(r):
            return None  # displacing its own team's lower classes is a priority preemption
        assert self.mig_index is not None
        index, profile, now = self.mig_index, r.mig_profile or "", self.now
        value, preemptible = self.value(r), self.preemptible(r)
        holders = self.mig_holders()
        own_all = self.own_candidates().get(r.team, [])
        for m in models:
            if self.searches >= policy.max_preemption_searches and not keep:
                return None
            key = self.ledger.key(r.team, m)
            acc = self.ledger.account(r.team, m)
            if key is None or acc is None:
                continue
            share = _fraction(m, profile, self.mig_tables) or gpus
            if not preemptible and share > self.ledger.fixed_room(r.team, m) + 1e-9:
                continue  # only non-preemptible jobs hold that quota: none can be displaced
            shortfall = acc.used + share - self.ledger.headroom(r.team, m)
            if shortfall <= 1e-9:
                continue  # refused for its count of jobs, or held for an earlier job
            # Its team's jobs on this quota it may displace, whole-GPU and slices, with the
            # GPUs each holds of it: those leaving first, then the lowest class.
            whole, _ = self.displaceable(r.team, value, key, own_all)
            own = [(c, float(c.size)) for c in whole]
            own += [
                (c, g)
                for c, g in holders.values()
                if c.team == r.team
                and c.id not in self.claimed
                and self.ledger.key(c.team, c.job.gpu_model) == key
                and (
                    c.leaving
                    or (
                        c.value < value
                        and now - c.start >= policy.min_runtime_s
                        and c.job.preemptions < self.max_preemptions
                    )
                )
            ]
            if keep:
                own = [(c, g) for c, g in own if c.leaving]
            own.sort(key=lambda cg: (not cg[0].leaving, cg[0].value, -cg[0].start, cg[0].id))
            if sum(g for _, g in own) < shortfall - 1e-9:
                continue
            if acc.used - sum(g for _, g in own) + share > acc.quota.nominal + 1e-9:
                continue  # it would still borrow: the lost work buys no guarantee
            self.searches += 1
            size = {c.id: g for c, g in own}
            # Where it will run, and who must leave for it to have an instance there.
            ways: list[tuple[tuple[str, int, int | None], list[tuple[Candidate, str]], bool]]
            room = index.room_for(
                profile, m, r.pool, r.cluster, r.id, relayout=policy.mig_repartition
            )
            if room is not None:
                ways = [(room, [], False)]
            else:
                eligible = partial(self.own_slice_victim, {c.id for c, _ in own})
                ways = []
                for _, ids, gpu, emptied in index.victim_sets(
                    profile,
                    m,
                    r.pool,
                    r.cluster,
                    eligible,
                    relayout=policy.mig_repartition,
                    job_id=r.id,
                    shared=eligible,
                ):
                    if keep and gpu[0] not in on_nodes:
                        continue
                    freeing = [
                        (holders[i][0], "leaving" if holders[i][0].leaving else "priority")
                        for i in ids
                    ]
                    ways.append(((*gpu, None), freeing, emptied))
            best: tuple[tuple[object, ...], int] | None = None
            plans: list[tuple[list[tuple[Candidate, str]], float]] = []
            for n, (_, freeing, _) in enumerate(ways):
                victims = list(freeing)
                chosen = {c.id for c, _ in victims}
                freed = sum(size.get(c.id, 0.0) for c, _ in victims)
                extra = []
                for c, g in own:
                    if freed >= shortfall - 1e-9:
                        break
                    if c.id not in chosen:
                        extra.append((c, "leaving" if c.leaving else "priority"))
                        freed += g
                if freed < shortfall - 1e-9:
                    plans.append(([], 0.0))
                    continue
                # Taken lowest class first, an early one may prove unneeded: spare it.
                for i in range(len(extra) - 1, -1, -1):
                    c, kind = extra[i]
                    if kind != "leaving" and freed - size[c.id] >= shortfall - 1e-9:
                        freed -= size[c.id]
                        del extra[i]
                victims += extra
                plans.append((victims, freed))
                new = [c for c, kind in victims if kind != "leaving"]
                rank = (
                    len(new),
                    max((c.value for c in new), default=0),
                    sum(size[c.id] * max(1.0, now - c.start) for c in new),
                    tuple(sorted(c.id for c, _ in victims)),
                )
                if best is None or rank < best[0]:
                    best = (rank, n)
            if best is None:
                continue
            (node, gpu_index, start), freeing, emptied = ways[best[1]]
            victims, freed = plans[best[1]]
            lost = sum(size[c.id] * (now - c.start) for c, kind in victims if kind == "priority")

            ready_at = partial(self.slice_ready_at, r, m, share, room is None)
            if not self.worth_losing(lost, share, ready_at):
                continue
            self.commit_quota(r, m, share)
            self.record_victims(r, m, victims)
            gone = now
            for c, _ in victims:
                if c.size:
                    gone = max(gone, self.victim_leaves(c.job, {}, {}))
                else:
                    old = end_time(c.job, now, policy.preemption_grace_s)
                    grace = now + policy.preemption_grace_s
                    gone = max(gone, grace if old is None else min(old, grace))
            self.victims_gone_at = gone
            self.quota_preempting(r, m, share, gone)
            if not freeing:
                index.hold_room(node, gpu_index, start, r.id, profile)
            elif emptied:
                index.reserve(node, gpu_index, r.id, profile)
            else:
                (victim,) = freeing
                index.hold_freed(node, gpu_index, victim[0].id, r.id)
            self.preempting.append((r.id, (node,)))
            return reasons.preempting_for_quota_slice(
                len(victims), freed, profile, gone - now, (node,)
            )
        return None

    def own_slice_victim(self, own: set[str], job_id: str) -> bool:
        """May a running slice job free an instance for a job displacing its team's lower
        classes: one of those (`own`), or one already leaving?"""
        found = self.mig_holders().get(job_id)
        return job_id not in self.claimed and (
            job_id in own or (found is not None and found[0].leaving)
        )

    def slice_ready_at(
        self, r: JobRequest, model: str, share: float, for_instance: bool
    ) -> float | None:
        """When a slice job refused quota could start without preempting: once its team's
        jobs on that quota end (by their limits; those started or preempting this cycle too,
        those preempted this cycle when they leave) and, `for_instance`, an instance it may
        use comes free."""
        k = self.ledger.key(r.team, model)
        started = self.quota_since(k) if k is not None else ()
        preempted = self._quota_preempted.get(k, ()) if k is not None else ()
        quota = self.ledger.nominal_free_at(r.team, model, share, started, preempted)
        instance = self.mig_free_at(r) if for_instance else self.now
        return None if quota is None or instance is None else max(quota, instance)

    def mig_holders(self) -> dict[str, tuple[Candidate, float]]:
        """Running jobs holding a MIG slice that may leave (already leaving or preemptible),
        by id, with the GPUs they count as."""
        if self._mig_holders is None:
            borrowed = self.borrowed_ids()
            budget = self.reclaim_budget()
            self._mig_holders = {}
            for job, gpus in zip(self.s.running, self.running_gpus, strict=True):
                r = job.request
                leaving = job.preempting_since is not None
                if not any(a.mig for a in job.placement.allocs) or not (
                    leaving or self.preemptible(r)
                ):
                    continue
                c = Candidate(job, self.value(r), r.id in borrowed, leaving, {}, 0)
                k = self.ledger.usage_key(r.team, job.gpu_model)
                if k in budget and not leaving:
                    c.quota_key, c.reclaimable = k, True
                elif c.borrowed:
                    c.reclaimable = False  # what its quota holds above nominal is leaving
                self._mig_holders[r.id] = (c, gpus)
        return self._mig_holders

    def preempt_for_mig(
        self,
        r: JobRequest,
        gpus: float,
        models: Sequence[str],
        first_tier: bool,
        on_nodes: tuple[str, ...] = (),
    ) -> Reason | None:
        """Victims for a slice job with no instance: the fewest jobs that hold an instance it
        may use, or every instance of a GPU that can then be re-laid out for it. Who may be a
        victim, and the cheapest set, as for whole GPUs (preempt.py): already leaving, then
        reclaim from borrowers (first tier, within the team's nominal), then lower classes.
        Past the cycle's bound: reclaim only, or, for a job that preempted on `on_nodes` in
        an earlier cycle, its victims there that are leaving (keeps_beyond_bound)."""
        policy = self.policy
        beyond = self.searches >= policy.max_preemption_searches
        reclaim_beyond = beyond and self.may_reclaim_beyond_bound(r, policy.quotas and first_tier)
        keep = beyond and not reclaim_beyond and bool(on_nodes)
        if not policy.preemption or (beyond and not reclaim_beyond and not keep):
            return None
        holders = self.mig_holders() if self.s.running else {}
        if not holders:
            return None
        assert self.mig_index is not None
        profile, now = r.mig_profile or "", self.now
        searched = False
        priority = self.preempts_for_priority(r) and not beyond  # beyond: reclaim only
        relayout = policy.mig_repartition
        if relayout and any(
            self.mig_index.relayout_possible(profile, m, r.pool, r.cluster) for m in models
        ):
            return None  # an idle GPU can be re-laid out for it: no job need stop
        best: (
            tuple[
                tuple[object, ...], str, float, list[tuple[Candidate, str]], tuple[str, int], bool
            ]
            | None
        ) = None
        for m in models:
            share = _fraction(m, profile, self.mig_tables) or gpus
            reclaims = (
                policy.quotas
                and first_tier
                and not keep
                and self.ledger.within_nominal(r.team, m, share)
            )

            kind = partial(self.slice_victim, r, reclaims, priority)
            eligible = partial(_is_some, kind)
            # On a GPU emptied for other jobs too, their victims are leaving for r as well.
            shared = partial(self.shared_victim, kind)
            for model, ids, gpu, whole in self.mig_index.victim_sets(
                profile,
                m,
                r.pool,
                r.cluster,
                eligible,
                relayout=relayout,
                job_id=r.id,
                shared=shared,
            ):
                if keep and gpu[0] not in on_nodes:
                    continue
                searched = True
                victims = [(holders[i][0], kind(i) or "leaving") for i in ids]
                budget, share_of = self.reclaim_budget(), lambda c: holders[c.id][1]
                # Below a quota's nominal only for a job within its own (as plan()).
                if not within_budget(budget, r.team, victims, share_of, strict=not reclaims):
                    continue
                new = [(c, k) for c, k in victims if k != "leaving"]
                lost = sum(holders[c.id][1] * max(1.0, now - c.start) for c, _ in new)
                rank = (
                    # A set that takes a quota below its nominal loses to one that does not.
                    not within_budget(budget, r.team, victims, share_of, strict=True),
                    len(new),
                    max((1 if c.borrowed or k == "reclaim" else 2 for c, k in new), default=0),
                    max((c.value for c, _ in new), default=0),
                    lost,
                    ids,
                )
                if best is None or rank < best[0]:
                    best = (rank, model, share, victims, gpu, whole)
        # A search that met no job it may take is no search (as in preempt_for).
        if searched:
            self.count_search(r, policy.quotas and first_tier and not keep)
        if best is None:
            return None
        _, model, share, victims, gpu, whole = best
        if not any(k == "reclaim" for _, k in victims):
            lost = sum(holders[c.id][1] * (now - c.start) for c, k in victims if k == "priority")
            if not self.worth_losing(lost, share, partial(self.mig_free_at, r)):
                return None
        self.commit_quota(r, model, share)
        self.record_victims(r, model, victims)
        grace = policy.preemption_grace_s
        gone = now
        for c, _ in victims:
            old = end_time(c.job, now, grace)  # a victim already leaving has less grace left
            gone = max(gone, now + grace if old is None else min(old, now + grace))
        self.victims_gone_at = gone
        self.quota_preempting(r, model, share, gone)
        if whole:
            # The GPU empties for r: no other job takes its free instances meanwhile (in the
            # next cycles, the caller names r's node back: PendingJob.preempting_on).
            self.mig_index.reserve(*gpu, r.id, profile)
        else:
            # One instance of a GPU others keep using: that instance is held for r alike.
            (victim,) = victims
            self.mig_index.hold_freed(*gpu, victim[0].id, r.id)
        self.preempting.append((r.id, (gpu[0],)))
        return reasons.preempting_slice(len(victims), profile, gone - now, (gpu[0],))

    def shared_victim(self, kind: Callable[[str], str | None], job_id: str) -> bool:
        """May a job be a victim for r on a GPU emptied for other jobs too: as for
        slice_victim, or already leaving (claimed by those jobs this cycle)."""
        found = self.mig_holders().get(job_id)
        return kind(job_id) is not None or (found is not None and found[0].leaving)

    def slice_victim(
        self, r: JobRequest, reclaims: bool, priority: bool, job_id: str
    ) -> str | None:
        """What kind of victim (preempt.py) a running slice job may be for r, if any."""
        found = self.mig_holders().get(job_id)
        if found is None or job_id in self.claimed:
            return None
        c = found[0]
        if c.leaving:
            return "leaving"
        if reclaims and c.reclaimable and c.team != r.team:
            return "reclaim"
        policy = self.policy
        if (
            priority
            and c.value < self.value(r)
            and self.now - c.start >= policy.min_runtime_s
            and c.job.preemptions < self.max_preemptions
            and (not policy.quotas or c.team == r.team or (c.borrowed and c.reclaimable))
        ):
            return "priority"
        return None

    def mig_ends(self) -> dict[mig.InstanceKind, list[float]]:
        """Per kind of MIG instance, a heap of when the jobs holding one end (by time limits;
        this cycle's victims excepted: their preemptors take their instances)."""
        if self._mig_ends is None:
            if self.mig_index is None:
                self.mig_index = self.new_mig_index()
            index, claimed = self.mig_index, self.claimed
            heaps: dict[mig.InstanceKind, list[float]] = {}
            held = (
                (at, a.node, a.mig)
                for job, at in zip(self.s.running, self.running_ends(), strict=True)
                if job.request.id not in claimed
                for a in job.placement.allocs
            )
            for at, node, slot in chain(held, self.mig_started):
                if at is not None and slot is not None:
                    kind = index.kind_at(node, slot)
                    if kind is not None:
                        heaps.setdefault(kind, []).append(at)
            for heap in heaps.values():
                heapq.heapify(heap)
            self._mig_ends = heaps
        return self._mig_ends

    def mig_free_at(self, r: JobRequest) -> float | None:
        """When an instance r may use first comes free by time limits (None: not known)."""
        assert self.mig_index is not None
        index, profile = self.mig_index, r.mig_profile or ""
        return min(
            (
                heap[0]
                for kind, heap in self.mig_ends().items()
                if heap and index.serves(kind, profile, r.gpu_model, r.pool, r.cluster)
            ),
            default=None,
        )

    def mig_estimate(self, r: JobRequest) -> float | None:
        """When a waiting slice job may start: the first end, by time limits, of a job holding
        an instance it may use; jobs take them in queue order, each then holding it for its
        own limit."""
        assert self.mig_index is not None
        index, profile = self.mig_index, r.mig_profile or ""
        best: tuple[float, list[float]] | None = None
        for kind, heap in self.mig_ends().items():
            if (
                heap
                and (best is None or heap[0] < best[0])
                and index.serves(kind, profile, r.gpu_model, r.pool, r.cluster)
            ):
                best = (heap[0], heap)
        if best is None:
            return None
        at, heap = best
        if r.time_limit_s is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, at + r.time_limit_s)
        return at

    def plan_mig(
        self,
        reqs: Sequence[JobRequest],
        kinds: Sequence[JobRequest],
        kind_of: Sequence[int],
        kind_demand: Sequence[float | None],
        order: list[int],
    ) -> list[MigRelayout]:
        """Plan first, then take: idle MIG GPUs are re-laid out for the whole queue's slice
        requests (in scheduling order) before any job takes an instance, so a take cannot
        spoil a GPU a later request needed re-laid out (bench/mig_quality.py: take-first
        served about 96% of the optimum, plan-first 100%). Requests whose team has no quota
        room once the requests before them start are left out, so no GPU is re-laid out for a
        job that cannot start."""
        if not self.policy.mig_repartition:
            return []
        slices = [
            bool(r.mig_profile) and d is not None for r, d in zip(kinds, kind_demand, strict=True)
        ]
        if not any(slices):
            return []
        # Quota is checked as if the requests before each had started: a team's quota that
        # holds seven slices gets no GPU laid out for the eighth.
        trial = self.ledger.fork()
        requests = []
        never = self.never
        for rank, i in enumerate(order):
            k = kind_of[i]
            # A request no MIG GPU can serve (model, pool, cluster, table) takes no quota
            # from the requests behind it.
            if not slices[k] or (never and never[k]):
                continue
            gpus = kind_demand[k]
            assert gpus is not None
            r = reqs[i]
            models = [r.gpu_model] if r.gpu_model else self.mig_models
            ends = None if r.time_limit_s is None else self.now + r.time_limit_s
            for m in models:
                if not self.mig_serves(r, m):
                    continue  # its share of m's quota would hold back others for nothing
                share = _fraction(m, r.mig_profile or "", self.mig_tables) or gpus
                if self.check_quota(r, m, share, ends, ledger=trial).ok:
                    self.commit_quota(r, m, share, ends, ledger=trial)
                    # For the model its quota admits: an any-model job is planned there only.
                    checked = r if r.gpu_model else replace(r, gpu_model=m)
                    requests.append(self.mig_request(checked, first_tier=rank < self.first_tier))
                    break
        if not requests:
            return []
        if self.mig_index is None:
            self.mig_index = self.new_mig_index()
        baseline = not self.policy.priorities  # submit order, as the baselines start jobs
        return self.mig_index.plan(
            requests, in_order=baseline, strict=baseline and not self.policy.backfill
        )

    # -- waits -------------------------------------------------------------------------

    def quota_taken(self, r: JobRequest, model: str, gpus: float, ends: float | None) -> None:
        """A start this cycle holds its team's quota until it ends: for quota_estimate."""
        k = self.ledger.key(r.team, model)
        if k is None:
            return
        if ends is not None:  # one without a limit holds it for good: no release
            self._quota_started.setdefault(k, []).append((ends, gpus))
        f = self._quota_fluids.get(k)
        if f is not None:
            f.take(gpus, r.time_limit_s, at=self.now)

    def quota_preempting(self, r: JobRequest, model: str, gpus: float, start: float) -> None:
        """A job that preempts this cycle holds its team's quota from now (the ledger
        commits it) until it ends, by its limit from `start`, when its victims have left:
        for quota_estimate and the team's holds (quota_since)."""
        k = self.ledger.key(r.team, model)
        if k is None:
            return
        limit = r.time_limit_s
        if limit is not None:  # one without a limit holds it for good: no release
            self._quota_preempting.setdefault(k, []).append((start + limit, gpus))
        f = self._quota_fluids.get(k)
        if f is not None:
            f.take(gpus, limit, at=start)

    def quota_since(self, k: tuple[str, str]) -> Sequence[tuple[float, float]]:
        """(end, GPUs) of the jobs on quota k that start or preempt this cycle: the ledger
        counts them in its usage, not among the running jobs whose ends it knows."""
        started = self._quota_started.get(k, ())
        preempting = self._quota_preempting.get(k)
        return [*started, *preempting] if preempting else started

    def quota_preempted(self, k: tuple[str, str], gone: tuple[float | None, float, float]) -> None:
        """A job on quota k this cycle preempts, (end by its limit, when it leaves, GPUs):
        for hold_borrowed, and for quota_estimate's fluid, built later (quota_kind) or
        already (a job of the team refused quota earlier in the walk: moved here)."""
        self._quota_preempted.setdefault(k, []).append(gone)
        f = self._quota_fluids.get(k)
        if f is not None:
            self.leaves_sooner(f, gone)

    @staticmethod
    def leaves_sooner(f: Fluid, gone: tuple[float | None, float, float]) -> None:
        """A quota fluid's release of a preempted job, (end by its limit, when it leaves,
        GPUs), moved to when it leaves. One at or before the fluid's clock is counted free by
        then already (estimates took it, or it comes at the clock): it can come no sooner,
        and moving it would count its GPUs twice."""
        old, leaves, gpus = gone
        if old is not None:
            if old <= f.clock:
                return
            heapq.heappush(f.heap, (old, -gpus))  # cancels its release at the limit
        heapq.heappush(f.heap, (leaves, gpus))

    def quota_estimate(self, k: int, r: JobRequest, gpus: float | None) -> float | None:
        """When a job refused quota may start: when its team's running jobs on that quota
        (those this cycle preempts when they leave; one that preempts, by its limit from
        when its victims have left), and those ahead of it (refused alike, or waiting for
        nodes: held from now, a bound) end by their limits enough for it to
        fit the team's nominal (borrowing may come sooner; nothing promises it), and not
        before nodes could hold its shape. None when that is not known (behind a job without
        a limit, larger than the nominal, refused for its count of jobs, for any model of a
        team with several quotas)."""
        if gpus is None:
            return None
        # What depends on r's kind (number k) only, once per kind: the quota's fluid, the floor.
        found = self._quota_kinds.get(k)
        if found is None:
            found = self._quota_kinds[k] = self.quota_kind(r)
        f, floor, acc = found
        if f is None or floor is None or acc is None:
            return None
        cap = acc.quota.max_running_jobs
        if cap is not None and acc.running_jobs >= cap:
            return None  # refused for its count of jobs: the fluid counts GPUs
        at = f.start(gpus, r.time_limit_s)
        return None if at is None else (at if at > floor else floor)

    def quota_key_of(self, r: JobRequest) -> tuple[str, str] | None:
        """The quota r draws on: of its model, or for a job for any model its team's only
        quota (None with several: which one it takes depends on where it lands)."""
        if r.gpu_model:
            return self.ledger.key(r.team, r.gpu_model)
        if r.team not in self._team_quota:
            keys = [key for key in self.ledger.accounts if key[0] == r.team]
            self._team_quota[r.team] = keys[0] if len(keys) == 1 else None
        return self._team_quota[r.team]

    def quota_kind(self, r: JobRequest) -> tuple[Fluid | None, float | None, Account | None]:
        """quota_estimate's fluid for r's quota, the earliest its shape fits on nodes, and
        the quota's account."""
        if not self.policy.quotas:
            return None, None, None
        ledger = self.ledger
        k = self.quota_key_of(r)
        if k is None:
            return None, None, None
        f = self._quota_fluids.get(k)
        if f is None:
            acc = ledger.accounts[k]
            held = [(end, g) for end, g in ledger.held(k) if end is not None]
            held += self.quota_since(k)
            f = self._quota_fluids[k] = Fluid(acc.quota.nominal - acc.used, held, self.now)
            for gone in self._quota_preempted.get(k, ()):
                self.leaves_sooner(f, gone)
            for gpus, limit in self._quota_ahead.pop(k, ()):
                f.take(gpus, limit)
        floor = self.shape_floor(r) if r.gpus_per_node and not r.mig_profile else -math.inf
        return f, floor, ledger.accounts[k]

    def fluid_state(self) -> dict[GroupKey, Fluid]:
        """Per capacity group: the GPUs free now and when running jobs (and this cycle's)
        release theirs, for estimated starts. Built at the first wait for capacity."""
        if self.fluids is None:
            up = self.index.nodes
            free = dict.fromkeys(self.index.groups, 0)
            for st in up.values():
                free[st.group] += len(st.free) + len(st.held) + len(st.kept)
            ends: dict[GroupKey, list[tuple[float, int]]] = {key: [] for key in free}
            for job, at in zip(self.s.running, self.running_ends(), strict=True):
                if at is not None:
                    for key, count in _per_group(up, job.placement.allocs):
                        ends[key].append((at, count))
            for at_opt, _, allocs in self.cycle_releases:
                if at_opt is not None:
                    key = up[allocs[0].node].group  # a start is in one group
                    ends[key].append((at_opt, sum(len(a.gpus) for a in allocs)))
            self.fluids = {key: Fluid(free[key], ends[key], self.now) for key in free}
        return self.fluids

    def estimate(
        self, keys: Sequence[GroupKey], r: JobRequest, gpus: int, floored: bool
    ) -> float | None:
        """The earliest start over the groups (each no sooner than its nodes could hold the
        shape, when `floored`), taking the GPUs from the chosen group's fluid so that the
        jobs behind see them gone."""
        fluids = self.fluid_state()
        best: tuple[float, Fluid] | None = None
        for key in keys:
            f = fluids[key]
            at = f.earliest(gpus)
            f.undo()
            if at is not None and floored:
                floor = self.group_floor(key, r)
                at = None if floor is None else max(at, floor)
            if at is not None and (best is None or at < best[0]):
                best = (at, f)
        if best is None:
            return None
        best[1].earliest(gpus)
        best[1].take(gpus, r.time_limit_s)
        return best[0]
