"""Quotas with borrowing (Kueue's cohort model, one cohort of all teams).

A team's quota for a model is its Quota for that exact model, else its "*" quota; both are
counted in GPUs (a MIG slice as its GPU fraction). Up to `nominal` is guaranteed. Above it a
team borrows, up to `borrowing_limit`, from the other teams' idle nominal quota, where idle
means neither used nor wanted by the owner's own pending jobs, so nothing is lent only to be
reclaimed a moment later. Wanted is what the owner could start on its nominal now; a job that
can never run on the cluster as it is (the engine leaves it out) wants nothing. A job
that fits its nominal only once the owner's own running jobs end, or that fits its nominal
but not on any nodes until running jobs end (both from time limits), wants the nominal from
then: until then it is lent, but only to jobs whose time limit ends first, so by the limits
the loan is back before the owner can use it (if running jobs end early, the owner reclaims
as from any borrower).
`lending_limit` caps what an owner lends; a team never borrows its own idle quota (it is its
nominal already), and since it borrows on a quota only once it uses all that quota's
nominal, loans other teams hold on that idle nominal must then be on other lenders' and
count against what is lent to it. Idle quota of an exact model is lent for that model; idle
"*" quota for any model, whatever model the borrower's quota is written for. Capacity of a
model that is nobody's nominal quota (beyond its own quotas', and in all beyond the "*"
quotas') is lent for that model, so quotas that do not add up to the cluster waste nothing.
A team with no quota for a model its jobs run on (a row deleted or changed meanwhile) has
nominal 0 there: all it runs is borrowed, and reclaimable.

Non-preemptible jobs of a team together stay within its nominal quota; the part of a team's
usage above nominal is then always held by preemptible jobs, which another team reclaiming
its guarantee can preempt. So one team's unpreemptible work never blocks another's nominal.
A job protected after its preemptions (Policy.protect_after_preemptions) counts as
non-preemptible here; the engine says which jobs are.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .reasons import gpus_text
from .types import ANY_MODEL, Quota, Reason, RunningJob, Team

# What jobs ask of a quota: (team, GPU model or None for any, GPUs per job, how many jobs,
# when their shape first fits on nodes if not now: None when it fits now or is not known).
Demand = tuple[str, str | None, float, int, float | None]


@dataclass
class Account:
    quota: Quota
    used: float = 0.0
    # Usage by non-preemptible jobs: never above nominal, so whatever a team borrows is held
    # by preemptible jobs and another team's guarantee can always be reclaimed.
    fixed: float = 0.0
    # Of `fixed`, jobs of a preemptible class protected after being preempted
    # (Policy.protect_after_preemptions): a refusal says they hold it too.
    protected: float = 0.0
    running_jobs: int = 0
    # Idle nominal this account lends: for good (in Ledger.pool), or until `loan.at`.
    lent: float = 0.0
    loan: Loan | None = None

    @property
    def borrowed(self) -> float:
        return max(0.0, self.used - self.quota.nominal)

    def limit_text(self) -> str:
        bl = self.quota.borrowing_limit
        return "unlimited" if bl is None else gpus_text(bl)


@dataclass(slots=True)
class Loan:
    """Idle nominal of `team` lent only to jobs that end by `at`; `amount` is what is left
    (below zero: borrowers hold more than its owner now leaves idle, which it reclaims)."""

    at: float
    amount: float
    team: str


@dataclass(slots=True)
class _Use:
    """A team's running jobs on one GPU model."""

    used: float = 0.0
    fixed: float = 0.0
    protected: float = 0.0
    jobs: int = 0
    held: list[tuple[float | None, float]] = field(default_factory=list)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    borrowed: bool = False
    reason: Reason | None = None


OK_NOMINAL = Verdict(True)
OK_BORROWED = Verdict(True, borrowed=True)


def times_text(n: int) -> str:
    return "1 time" if n == 1 else f"{n} times"


def never_fits(
    team: str, q: Quota, gpus: float, preemptible: bool, preempted: int | None = None
) -> Reason:
    """Why a job larger than its team's quota could ever hold waits: until the quota is
    raised, however long it waits. `preempted`: as for Ledger.check."""
    if preempted is not None:
        holds = (
            f"a job preempted {times_text(preempted)} runs only within nominal quota,"
            f" {gpus_text(q.nominal)}"
        )
    elif preemptible:
        holds = (
            f"the quota holds at most {gpus_text(q.nominal + (q.borrowing_limit or 0.0))}"
            f" (nominal {gpus_text(q.nominal)}, borrowing limit"
            f" {gpus_text(q.borrowing_limit or 0.0)})"
        )
    else:
        holds = (
            "classes that cannot be preempted run only within nominal quota,"
            f" {gpus_text(q.nominal)}"
        )
    return Reason(
        "quota_exhausted",
        f"it can never run under team {team}'s {q.gpu_model} quota as it is: it needs"
        f" {gpus_text(gpus)} GPUs and {holds}; it waits until the quota is raised",
        (
            ("team", team),
            ("gpu_model", q.gpu_model),
            ("nominal", q.nominal),
            ("borrowing_limit", q.borrowing_limit),
            ("requested", round(gpus, 4)),
            ("never_fits", True),
        ),
    )


class Ledger:
    def __init__(
        self,
        teams: Iterable[Team],
        running: Iterable[tuple[RunningJob, float, bool]],
        wanted: Iterable[Demand],
        enabled: bool,
        capacity: Mapping[str, float] | None = None,
        ends: Sequence[float | None] = (),
        protected: Container[str] = frozenset(),
    ) -> None:
        """`running` is (job, GPUs, preemptible); `capacity` the cluster's GPUs per model;
        `ends`, when given, when each running job ends for planning (None: unknown), in
        `running` order; `protected`, the ids of the running jobs not preemptible for being
        protected after preemptions (Policy.protect_after_preemptions), not for their class."""
        self.enabled = enabled
        self.accounts: dict[tuple[str, str], Account] = {}
        for team in teams:
            for q in team.quotas:
                self.accounts[(team.name, q.gpu_model)] = Account(q)
        self._key_cache: dict[tuple[str, str], tuple[str, str] | None] = {}
        # Usage per (team, model) first, then per account: one lookup per running job (the hot
        # path), and a "*" account's usage stays known per model.
        uses: dict[tuple[str, str], _Use] = {}
        for i, (job, gpus, preemptible) in enumerate(running):
            team_model = (job.request.team, job.gpu_model)
            u = uses.get(team_model)
            if u is None:
                u = uses[team_model] = _Use()
            u.used += gpus
            if not preemptible:
                u.fixed += gpus
                if protected and job.request.id in protected:
                    u.protected += gpus
            u.jobs += 1
            if ends:
                u.held.append((ends[i], gpus))
        self._held: dict[tuple[str, str], list[tuple[float | None, float]]] = {}
        # Usage per (team, model) of teams with no quota for the model (its row deleted or
        # changed while the jobs run): nominal 0, so all of it is borrowed and reclaimable.
        self.unquoted: dict[tuple[str, str], float] = {}
        on_models: dict[tuple[str, str], list[tuple[str, float]]] = {}
        for team_model, u in uses.items():
            k = self.key(*team_model)
            if k is None:
                self.unquoted[team_model] = u.used
                continue
            acc = self.accounts[k]
            acc.used += u.used
            acc.fixed += u.fixed
            acc.protected += u.protected
            acc.running_jobs += u.jobs
            if u.held:
                self._held.setdefault(k, []).extend(u.held)
            if k[1] == ANY_MODEL:
                on_models.setdefault(k, []).append((team_model[1], u.used))
        # What each owner's queue wants: demand that fits in what is left of its nominal now
        # (fits), and the smallest demand that does not yet fit but will once the owner's own
        # jobs end (blocked). Jobs larger than the nominal need to borrow anyway: if they held
        # the nominal back, teams that all need to borrow would wait for each other forever.
        fits: dict[tuple[str, str], float] = {}
        blocked: dict[tuple[str, str], float] = {}
        # Demand that fits the nominal but not the nodes: it wants the nominal from then.
        later: dict[tuple[str, str], float] = {}
        targets_of: dict[tuple[str, str | None], list[tuple[tuple[str, str], Account]]] = {}
        for owner, model, gpus, count, ready in wanted:
            targets = targets_of.get((owner, model))
            if targets is None:
                # Any model: the demand may land on any of the team's quotas; it counts on each.
                if model is None:
                    found = [(k, a) for k, a in self.accounts.items() if k[0] == owner]
                else:
                    k = self.key(owner, model)
                    found = [] if k is None else [(k, self.accounts[k])]
                targets = targets_of[(owner, model)] = found
            for k, acc in targets:
                nominal = acc.quota.nominal
                if gpus > nominal + 1e-9:
                    continue
                if acc.used + gpus > nominal + 1e-9:
                    if gpus < blocked.get(k, math.inf):
                        blocked[k] = gpus
                elif ready is None:
                    fits[k] = fits.get(k, 0.0) + gpus * count
                elif ready < later.get(k, math.inf):
                    later[k] = ready
        # Lending pools by quota model ("*" lends for any model): what accounts lend for good
        # (`given`) less what is borrowed of it (`pool`; below zero when an owner took back what
        # others hold), and who borrowed it (`drawn`, so no team borrows its own). Idle nominal
        # whose owner has a blocked job is lent only until that job could start on the owner's
        # nominal (`until`, from the owner's running jobs' ends; not at all when one of them has no
        # end), or until a job waiting for nodes could start, if sooner: by the limits the loan is
        # back before the owner needs it, and the nominal does not sit idle meanwhile.
        self.pool: dict[str, float] = {}
        self.given: dict[str, float] = {}
        self.drawn: dict[tuple[str, str], float] = {}
        self.until: dict[str, list[Loan]] = {}
        # Per model, capacity beyond that model's own quotas; of it in all, beyond the "*"
        # quotas too (they may take theirs on any model): lent for that model only.
        exact: dict[str, float] = {}
        star = 0.0
        for k, acc in self.accounts.items():
            model = k[1]
            q = acc.quota
            if model == ANY_MODEL:
                star += q.nominal
            else:
                exact[model] = exact.get(model, 0.0) + q.nominal
            room = q.nominal - acc.used
            want = min(max(0.0, room), fits.get(k, 0.0))
            idle = max(0.0, room - want)
            if q.lending_limit is not None:
                idle = min(idle, q.lending_limit)
            need = blocked.get(k)
            if (need is None and k not in later) or idle <= 1e-9:
                acc.lent = idle
                self.pool[model] = self.pool.get(model, 0.0) + idle
                self.given[model] = self.given.get(model, 0.0) + idle
                continue
            at: float | None = later.get(k, math.inf)
            if need is not None:
                on_nominal = _fits_at(self._held.get(k, []), acc.used, q.nominal - want - need)
                at = None if on_nominal is None else min(on_nominal, later.get(k, math.inf))
            if at is not None:
                acc.lent = idle
                acc.loan = Loan(at, idle, k[0])
                self.until.setdefault(model, []).append(acc.loan)
        for lst in self.until.values():
            lst.sort(key=_loan_order)
        self.unowned = {
            m: max(0.0, gpus - exact.get(m, 0.0)) for m, gpus in (capacity or {}).items()
        }
        self.unowned_total = max(0.0, sum(self.unowned.values()) - star)
        for k, acc in sorted(self.accounts.items()):
            borrowed = acc.borrowed
            if borrowed <= 0:
                continue
            if k[1] != ANY_MODEL:
                self._draw(k[0], k[1], borrowed, None)
                continue
            # Which GPUs of a "*" account are the borrowed ones is not known: each model's
            # usage borrows its share.
            models = sorted(on_models.get(k, ()))
            if len(models) == 1:
                self._draw(k[0], models[0][0], borrowed, None)
                continue
            for model, used in models:
                self._draw(k[0], model, borrowed * used / acc.used, None)
        for (name, model), used in sorted(self.unquoted.items()):
            self._draw(name, model, used, None)

    def fork(self) -> Ledger:
        """A copy to commit trial starts on, leaving this one as it is: what commit() changes
        is copied, the rest shared."""
        new = copy.copy(self)
        loans: dict[int, Loan] = {}
        new.accounts = {}
        for k, acc in self.accounts.items():
            twin = replace(acc)
            if acc.loan is not None:
                twin.loan = loans[id(acc.loan)] = replace(acc.loan)
            new.accounts[k] = twin
        new.until = {
            m: [loans.get(id(x)) or replace(x) for x in lst] for m, lst in self.until.items()
        }
        new.pool, new.given, new.drawn = dict(self.pool), dict(self.given), dict(self.drawn)
        new.unowned = dict(self.unowned)
        return new

    def key(self, team: str, model: str) -> tuple[str, str] | None:
        k = (team, model)
        try:
            return self._key_cache[k]  # the engine asks per job: one lookup
        except KeyError:
            pass
        if k in self.accounts:
            self._key_cache[k] = k
        elif (team, ANY_MODEL) in self.accounts:
            self._key_cache[k] = (team, ANY_MODEL)
        else:
            self._key_cache[k] = None
        return self._key_cache[k]

    def usage_key(self, team: str, model: str) -> tuple[str, str] | None:
        """The quota a running job's usage counts on; for a team with no quota for its model,
        (team, model) (Ledger.unquoted)."""
        k = self.key(team, model)
        if k is None and (team, model) in self.unquoted:
            return (team, model)
        return k

    def account(self, team: str, model: str) -> Account | None:
        k = self.key(team, model)
        return None if k is None else self.accounts[k]

    def _pooled(self, m: str, team: str, left: float, own_moved: float = 0.0) -> float:
        """What `team` may borrow of the `left` idle nominal lent for good under quota model
        `m`: within it, and within what the other teams lend less what it borrowed already
        (then some assignment of every loan to a lender of another team exists), and less
        `own_moved` of its loans from another pool (only other teams' idle nominal can hold
        them). Below zero: loans that need other lenders (an owner took back what they
        held, or more of its own loans moved here than other teams lend)."""
        if left < 0.0:
            return left
        k = (team, m)
        others = self.given.get(m, 0.0) - self.drawn.get(k, 0.0)
        own = self.accounts.get(k)
        if own is not None and own.loan is None:
            others -= own.lent
        if own_moved > 0.0:
            return min(left, max(others, 0.0) - own_moved)
        return left if left < others else (others if others > 0.0 else 0.0)

    def lendable(self, model: str, ends: float | None = None, team: str | None = None) -> float:
        """What may be lent for a job on GPU model `model` ending at `ends` (None: not known
        to end, so only quota idle for good): other teams' idle nominal (not `team`'s own)
        and capacity of that model that is nobody's quota."""
        total = 0.0
        # Checked for every job that would borrow: written out, without calls it can skip.
        pool, until = self.pool, self.until
        if team is None:
            if self.unowned_total > 0.0:
                total = min(self.unowned.get(model, 0.0), self.unowned_total)
            for m in (model,) if model == ANY_MODEL else (model, ANY_MODEL):
                left = pool.get(m, 0.0)
                if left > 1e-12:
                    total += left
                if ends is not None and m in until:
                    total += sum(x.amount for x in until[m] if ends <= x.at and x.amount > 0.0)
            return total
        k = self.key(team, model)
        # Loans of this model that need other lenders ("*" may hold them), and of them, the
        # team's own (which its own idle "*" nominal cannot hold).
        carry = carry_own = 0.0
        rest = 0.0  # loans for other models that need capacity nobody owns
        for m in (model,) if model == ANY_MODEL else (model, ANY_MODEL):
            left = pool.get(m, 0.0)
            if m == ANY_MODEL and model != ANY_MODEL:
                # So may loans for other models that an owner of their quota took back;
                # beyond "*", only capacity nobody owns may, which all models share.
                gone = -sum(x for m2, x in pool.items() if x < 0.0 and m2 not in (m, model))
                rest = max(0.0, gone - max(left, 0.0))
                left = max(left - gone, min(left, 0.0)) - carry
            if k is not None and m == k[1]:
                # It borrows on this quota only once it uses all its nominal: loans held on
                # its idle nominal then need other lenders.
                acc = self.accounts[k]
                if acc.loan is None:
                    left -= acc.lent
                elif acc.lent > 1e-12:
                    left -= acc.lent - acc.loan.amount  # what borrowers hold of its loan
                part = left
            elif left > 1e-12 or left < -1e-12 or carry_own > 0.0:
                part = self._pooled(m, team, left, carry_own)
            else:
                part = 0.0
            if m != ANY_MODEL:
                if part < 0.0:
                    carry, part = -part, 0.0
                    carry_own = min(carry, self.drawn.get((team, m), 0.0))
            else:
                carry = 0.0
            total += part
            if ends is not None and m in until:
                for loan in until[m]:
                    if ends <= loan.at and loan.amount > 0.0 and loan.team != team:
                        total += loan.amount
        total -= carry
        if self.unowned_total > rest:
            total += min(self.unowned.get(model, 0.0), self.unowned_total - rest)
        return total if total > 0.0 else 0.0

    def lent_until(self, models: Iterable[str]) -> float | None:
        """The latest time to which some quota for these models is lent, if any."""
        found = [
            loan.at
            for m in {*models, ANY_MODEL}
            for loan in self.until.get(m, ())
            if loan.amount > 1e-9
        ]
        return max(found, default=None)

    def _draw(self, team: str, model: str, amount: float, ends: float | None) -> None:
        """`team` borrows for a job on `model`: from quota idle for good first (the model's,
        then capacity nobody owns, then "*"), then from quota lent until a time, the soonest
        that outlasts `ends` first (None: an existing loan of unknown end, taken from the
        latest, which leaves new loans the least)."""
        left = self.pool.get(model, 0.0)
        take = min(self._pooled(model, team, left), amount) if left > 1e-12 else 0.0
        if take > 0.0:
            self.pool[model] -= take
            self.drawn[(team, model)] = self.drawn.get((team, model), 0.0) + take
            amount -= take
        if amount > 1e-12 and model in self.unowned:
            take = min(self.unowned[model], self.unowned_total, amount)
            if take > 0.0:
                self.unowned[model] -= take
                self.unowned_total -= take
                amount -= take
        left = self.pool.get(ANY_MODEL, 0.0)
        if amount > 1e-12 and model != ANY_MODEL and left > 1e-12:
            take = min(self._pooled(ANY_MODEL, team, left), amount)
            if take > 0.0:
                self.pool[ANY_MODEL] -= take
                key = (team, ANY_MODEL)
                self.drawn[key] = self.drawn.get(key, 0.0) + take
                amount -= take
        if amount <= 1e-12:
            return
        for m in (model,) if model == ANY_MODEL else (model, ANY_MODEL):
            lst = self.until.get(m, [])
            for loan in lst if ends is not None else reversed(lst):
                if (ends is not None and ends > loan.at) or loan.team == team:
                    continue
                take = min(max(0.0, loan.amount), amount)
                loan.amount -= take
                amount -= take
                if amount <= 1e-12:
                    return
        # More is lent than is idle (an owner's demand grew): the excess is reclaimable.
        if model != ANY_MODEL:
            self.pool[ANY_MODEL] = self.pool.get(ANY_MODEL, 0.0) - amount

    def hold_for(
        self,
        team: str,
        model: str,
        gpus: float,
        at: float,
        usable: float = math.inf,
        started: Sequence[tuple[float | None, float]] = (),
        preempted: Sequence[tuple[float | None, float, float]] = (),
    ) -> None:
        """A job of `team` reserved from `at` (EASY backfill) will borrow on this quota then:
        what it would borrow of quota idle for good is from now on lent only to jobs that
        end by `at`, as backfill holds the reserved GPUs. What it borrows then is counted
        on the team's usage then: its running jobs on the quota that end by `at` (by their
        limits; `started`: (end, GPUs) of those started, or preempting, since the
        snapshot; `preempted`: (end by its limit as held, when it leaves, GPUs) of those
        preempted since, which leave within the grace) give theirs back first, one of
        unknown end never (unless preempted). Of capacity nobody owns, at most `usable`:
        the idle GPUs such a job could use (that capacity is idle GPUs, and a whole-GPU
        job's hold must not keep a slice job off MIG GPUs it never runs on)."""
        k = self.key(team, model)
        if not self.enabled or k is None:
            return
        acc = self.accounts[k]
        used = acc.used
        for held in (self._held.get(k, ()), started):
            for end, held_gpus in held:
                if end is not None and end <= at:
                    used -= held_gpus
        for end, leaves, held_gpus in preempted:
            if (end is None or end > at) and leaves <= at:
                used -= held_gpus
        # Beyond what the team borrows now: the loans its jobs give back by `at` serve it then.
        need = max(0.0, used + gpus - acc.quota.nominal) - acc.borrowed
        if need <= 1e-12:
            return
        sources = [model] if model == ANY_MODEL else [model, ANY_MODEL]
        for m in sources:
            left = self.pool.get(m, 0.0)
            take = min(self._pooled(m, team, left), need) if left > 1e-12 else 0.0
            if take > 1e-12:
                self.pool[m] -= take
                loans = self.until.setdefault(m, [])
                # Anyone's short job may have it, the reserved job's team's included.
                loans.append(Loan(at, take, ""))
                loans.sort(key=_loan_order)
                need -= take
            if m == model and need > 1e-12 and model in self.unowned:
                take = min(self.unowned[model], self.unowned_total, need, usable)
                if take > 1e-12:
                    self.unowned[model] -= take
                    self.unowned_total -= take
                    loans = self.until.setdefault(model, [])
                    loans.append(Loan(at, take, ""))
                    loans.sort(key=_loan_order)
                    need -= take
            if need <= 1e-12:
                return

    def _take_back(self, acc: Account) -> None:
        """The owner uses nominal it lends: what is lent shrinks to what is left idle (what
        borrowers already hold beyond that is reclaimable)."""
        back = acc.lent - max(0.0, acc.quota.nominal - acc.used)
        if back <= 1e-12:
            return
        acc.lent -= back
        if acc.loan is not None:
            acc.loan.amount -= back
        else:
            m = acc.quota.gpu_model
            self.pool[m] -= back
            self.given[m] -= back

    def check(
        self,
        team: str,
        model: str,
        gpus: float,
        preemptible: bool,
        ends: float | None = None,
        *,
        idle: Callable[[], float] | None = None,
        preempted: int | None = None,
    ) -> Verdict:
        """May the team start `gpus` more on this quota now, for a job ending at `ends`?
        `idle`: how many idle GPUs such a job could use, when not all of the model's (a
        whole-GPU job's: not MIG GPUs, nor other pools'), asked only for a refusal, which
        says no more can be lent to it. `preempted`: for a job not preemptible because it
        was preempted this many times (Policy.protect_after_preemptions), not for its
        class: its refusal says so."""
        if not self.enabled:
            return OK_NOMINAL
        acc = self.account(team, model)
        if acc is None:
            return Verdict(
                False,
                reason=Reason(
                    "no_quota",
                    f"team {team} has no quota for {model}",
                    (("team", team), ("gpu_model", model)),
                ),
            )
        q = acc.quota
        limit = math.inf if q.borrowing_limit is None else q.borrowing_limit
        # Larger than the quota could ever hold (a nominal lowered since it was submitted, or
        # never large enough): no wait helps, and "needs N more" would say one does.
        most = q.nominal + limit if preemptible else q.nominal
        if gpus > most + 1e-9:
            return Verdict(False, reason=never_fits(team, q, gpus, preemptible, preempted))
        if q.max_running_jobs is not None and acc.running_jobs >= q.max_running_jobs:
            return Verdict(
                False,
                reason=Reason(
                    "quota_exhausted",
                    f"team {team} runs {acc.running_jobs} of at most {q.max_running_jobs} "
                    f"jobs on {q.gpu_model} quota",
                    (("team", team), ("max_running_jobs", q.max_running_jobs)),
                ),
            )
        if not preemptible and acc.fixed + gpus > q.nominal + 1e-9:
            return Verdict(False, reason=self.fixed_refusal(team, acc, gpus, preempted))
        after = acc.used + gpus
        if after <= q.nominal + 1e-9:
            return OK_NOMINAL
        # By the job's model: a "*" quota borrows another team's idle quota for that model too.
        lendable = self.lendable(model, ends, team)
        new_borrow = after - q.nominal
        over_limit = new_borrow > limit + 1e-9
        if not over_limit and new_borrow - acc.borrowed <= lendable + 1e-9:
            return OK_BORROWED
        # Refused: the numbers, and the sentence, only now (a deep queue asks often).
        capped: list[float] = []  # idle(), asked once and only when something is lendable

        def cap(lent: float) -> float:
            if idle is None or lent <= 1e-9:
                return lent
            if not capped:
                capped.append(idle())
            return min(lent, capped[0])

        shown = cap(lendable)
        details: tuple[tuple[str, Any], ...] = (
            ("team", team),
            ("gpu_model", q.gpu_model),
            ("used", round(acc.used, 4)),
            ("nominal", q.nominal),
            ("borrowing_limit", q.borrowing_limit),
            ("requested", round(gpus, 4)),
            ("lendable", round(shown, 4)),
        )
        usage = (
            f"team {team} uses {gpus_text(acc.used)} of {gpus_text(q.nominal)} {q.gpu_model} GPUs"
        )
        if over_limit:
            return Verdict(
                False,
                reason=Reason(
                    "quota_exhausted",
                    f"{usage}; borrowing limit {acc.limit_text()} (needs {gpus_text(gpus)} more)",
                    details,
                ),
            )
        # Quota lent until a time that this job would outlast: say so, it is visible idle.
        shorter = cap(self.lendable(model, -math.inf, team)) - shown
        more = ""
        if shorter > 1e-9:
            more = f"; {gpus_text(shorter)} more are lent only to jobs that end sooner"
            details += (("lendable_to_shorter_jobs", round(shorter, 4)),)
        return Verdict(
            False,
            reason=Reason(
                "quota_exhausted",
                f"{usage}; borrowing limit {acc.limit_text()}, but only "
                f"{gpus_text(shown)} idle GPUs of other teams can be lent "
                f"(needs {gpus_text(gpus)}){more}",
                details,
            ),
        )

    @staticmethod
    def fixed_refusal(team: str, acc: Account, gpus: float, preempted: int | None) -> Reason:
        """Why a job that is not preemptible does not fit what its team's non-preemptible
        jobs leave of the nominal (`preempted`: as for check)."""
        q = acc.quota
        used = f"{gpus_text(acc.fixed)} of {gpus_text(q.nominal)} {q.gpu_model} GPUs"
        details: tuple[tuple[str, Any], ...] = (
            ("team", team),
            ("gpu_model", q.gpu_model),
            ("non_preemptible_used", acc.fixed),
            ("nominal", q.nominal),
            ("requested", gpus),
        )
        if acc.protected > 1e-9:
            details += (("protected_used", acc.protected),)
        if preempted is not None:
            return Reason(
                "quota_exhausted",
                f"preempted {times_text(preempted)}, so it now runs only within team {team}'s"
                f" nominal quota, where nothing preempts it again: team {team} runs {used}"
                f" there (needs {gpus_text(gpus)})",
                (*details, ("protected_after_preemptions", preempted)),
            )
        held = "classes that cannot be preempted"
        if acc.protected > 1e-9:
            held += (
                f" or in jobs protected after being preempted ({gpus_text(acc.protected)} of them)"
            )
        return Reason(
            "quota_exhausted",
            f"team {team} runs {used} in {held}, which run only within nominal quota"
            f" (needs {gpus_text(gpus)})",
            details,
        )

    def commit(
        self,
        team: str,
        model: str,
        gpus: float,
        preemptible: bool,
        ends: float | None = None,
        *,
        protected: bool = False,
    ) -> None:
        """`protected`: not preemptible for being protected after preemptions, not for its
        class (counted as such in refusals)."""
        if not self.enabled:
            return
        acc = self.account(team, model)
        if acc is None:
            return
        before = acc.borrowed
        acc.used += gpus
        acc.fixed += 0.0 if preemptible else gpus
        acc.protected += gpus if protected else 0.0
        acc.running_jobs += 1
        if acc.lent > 0.0:
            self._take_back(acc)
        if acc.borrowed > before:
            self._draw(team, model, acc.borrowed - before, ends)

    def headroom(self, team: str, model: str) -> float:
        """The most GPUs the team could hold on this quota now, borrowing what it may."""
        acc = self.account(team, model)
        if acc is None:
            return 0.0
        q = acc.quota
        limit = math.inf if q.borrowing_limit is None else q.borrowing_limit
        return q.nominal + min(limit, acc.borrowed + self.lendable(model, None, team))

    def fixed_room(self, team: str, model: str) -> float:
        """Nominal quota left for non-preemptible work."""
        acc = self.account(team, model)
        return 0.0 if acc is None else acc.quota.nominal - acc.fixed

    def nominal_free_at(
        self,
        team: str,
        model: str,
        gpus: float,
        started: Sequence[tuple[float | None, float]] = (),
        preempted: Sequence[tuple[float | None, float, float]] = (),
    ) -> float | None:
        """When the team's running jobs on this quota will have ended (by their time limits)
        enough for `gpus` more to fit its nominal; None if never known. `started`: (end,
        GPUs) of jobs started on it since the snapshot (counted in its usage already);
        `preempted`: (end by its limit as held, when it leaves, GPUs) of its running jobs
        preempted since, which end when they leave (one of unknown end too)."""
        k = self.key(team, model)
        if k is None:
            return None
        acc = self.accounts[k]
        held = self._held.get(k, [])
        if started or preempted:
            held = [*held, *started]
        for end, leaves, gpus_gone in preempted:
            # The job's own entry is not known, only its (end, GPUs): any equal one serves.
            for i, (e, g) in enumerate(held):
                if e == end and abs(g - gpus_gone) <= 1e-9:
                    held[i] = (leaves, g)
                    break
        return _fits_at(held, acc.used, acc.quota.nominal - gpus)

    def held(self, key: tuple[str, str]) -> Sequence[tuple[float | None, float]]:
        """(end, GPUs) of the running jobs on a quota, as the snapshot gave them."""
        return self._held.get(key, ())

    def within_nominal(self, team: str, model: str, gpus: float) -> bool:
        acc = self.account(team, model)
        return acc is not None and acc.used + gpus <= acc.quota.nominal + 1e-9

    def borrowed_by_team(self) -> Mapping[tuple[str, str], float]:
        """Per quota (usage_key), what its running jobs hold above its nominal."""
        over = {k: a.borrowed for k, a in self.accounts.items() if a.borrowed > 0}
        over.update((k, used) for k, used in self.unquoted.items() if used > 0)
        return over


def _loan_order(loan: Loan) -> tuple[float, float, str]:
    return (loan.at, loan.amount, loan.team)


def _fits_at(held: list[tuple[float | None, float]], used: float, target: float) -> float | None:
    """When usage `used`, held as (end, GPUs), first drops to `target` or below; None if
    that depends on a job of unknown end."""
    if target < -1e-9:
        return None
    for end, gpus in sorted(held, key=lambda eg: math.inf if eg[0] is None else eg[0]):
        if end is None:
            return None
        used -= gpus
        if used <= target + 1e-9:
            return end
    return None
