"""Quotas with borrowing (Kueue's cohort model, one cohort of all teams).

A team's quota for a model is its Quota for that exact model, else its "*" quota; both are
counted in GPUs (a MIG slice as its GPU fraction). Up to `nominal` is guaranteed. Above it a
team borrows, up to `borrowing_limit`, from the other teams' idle nominal quota, where idle
means neither used nor wanted by the owner's own pending jobs, so nothing is lent only to be
reclaimed a moment later. Wanted is what the owner could start on its nominal now. A job
that fits its nominal only once the owner's own running jobs end, or that fits its nominal
but not on any nodes until running jobs end (both from time limits), wants the nominal from
then: until then it is lent, but only to jobs whose time limit ends first, so by the limits
the loan is back before the owner can use it (if running jobs end early, the owner reclaims
as from any borrower).
`lending_limit` caps what an owner lends. Idle quota of an exact model is lent for that
model; idle "*" quota for any model. Capacity that is nobody's nominal quota is lent like
idle "*" quota, so quotas that do not add up to the cluster waste nothing.

Non-preemptible jobs of a team together stay within its nominal quota; the part of a team's
usage above nominal is then always held by preemptible jobs, which another team reclaiming
its guarantee can preempt. So one team's unpreemptible work never blocks another's nominal.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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
    running_jobs: int = 0

    @property
    def borrowed(self) -> float:
        return max(0.0, self.used - self.quota.nominal)

    def limit_text(self) -> str:
        bl = self.quota.borrowing_limit
        return "unlimited" if bl is None else gpus_text(bl)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    borrowed: bool = False
    reason: Reason | None = None


OK_NOMINAL = Verdict(True)
OK_BORROWED = Verdict(True, borrowed=True)


class Ledger:
    def __init__(
        self,
        teams: Iterable[Team],
        running: Iterable[tuple[RunningJob, float, bool]],
        wanted: Iterable[Demand],
        enabled: bool,
        capacity: float = 0.0,
        ends: Sequence[float | None] = (),
    ) -> None:
        """`running` is (job, GPUs, preemptible); `capacity` the cluster's GPUs; `ends`, when
        given, when each running job ends for planning (None: unknown), in `running` order."""
        self.enabled = enabled
        self.accounts: dict[tuple[str, str], Account] = {}
        for team in teams:
            for q in team.quotas:
                self.accounts[(team.name, q.gpu_model)] = Account(q)
        self._key_cache: dict[tuple[str, str], tuple[str, str] | None] = {}
        key, cached = self.key, self._key_cache
        self._held: dict[tuple[str, str], list[tuple[float | None, float]]] = {}
        for i, (job, gpus, preemptible) in enumerate(running):
            team_model = (job.request.team, job.gpu_model)
            # key(), with its cache read inline: this runs for every running job.
            k = cached[team_model] if team_model in cached else key(*team_model)
            if k is not None:
                acc = self.accounts[k]
                acc.used += gpus
                acc.fixed += 0.0 if preemptible else gpus
                acc.running_jobs += 1
                if ends:
                    self._held.setdefault(k, []).append((ends[i], gpus))
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
        # Lending pools by quota model ("*" lends to any model), net of current borrowing.
        # Idle nominal whose owner has a blocked job is lent only until that job could start
        # on the owner's nominal (`until`, from the owner's running jobs' ends; not at all
        # when one of them has no end), or until a job waiting for nodes could start, if
        # sooner: by the limits the loan is back before the owner needs it, and the nominal
        # does not sit idle meanwhile.
        nominal_total = sum(acc.quota.nominal for acc in self.accounts.values())
        self.pool: dict[str, float] = {ANY_MODEL: max(0.0, capacity - nominal_total)}
        self.until: dict[str, list[list[float]]] = {}
        for k, acc in self.accounts.items():
            model = k[1]
            q = acc.quota
            room = q.nominal - acc.used
            want = min(max(0.0, room), fits.get(k, 0.0))
            idle = max(0.0, room - want)
            if q.lending_limit is not None:
                idle = min(idle, q.lending_limit)
            need = blocked.get(k)
            if (need is None and k not in later) or idle <= 1e-9:
                self.pool[model] = self.pool.get(model, 0.0) + idle
                continue
            at: float | None = later.get(k, math.inf)
            if need is not None:
                on_nominal = _fits_at(self._held.get(k, []), acc.used, q.nominal - want - need)
                at = None if on_nominal is None else min(on_nominal, later.get(k, math.inf))
            if at is not None:
                self.until.setdefault(model, []).append([at, idle])
        for lst in self.until.values():
            lst.sort()
        for (_, model), acc in sorted(self.accounts.items()):
            if acc.borrowed > 0:
                self._draw(model, acc.borrowed, None)

    def key(self, team: str, model: str) -> tuple[str, str] | None:
        k = (team, model)
        try:
            return self._key_cache[k]  # the hot path (every running job): one lookup
        except KeyError:
            pass
        if k in self.accounts:
            self._key_cache[k] = k
        elif (team, ANY_MODEL) in self.accounts:
            self._key_cache[k] = (team, ANY_MODEL)
        else:
            self._key_cache[k] = None
        return self._key_cache[k]

    def account(self, team: str, model: str) -> Account | None:
        k = self.key(team, model)
        return None if k is None else self.accounts[k]

    def lendable(self, model: str, ends: float | None = None) -> float:
        """Idle nominal that may be lent for `model` to a job ending at `ends` (None: not
        known to end, so only quota idle for good)."""
        total = max(0.0, self.pool.get(model, 0.0))
        models = (model,) if model == ANY_MODEL else (model, ANY_MODEL)
        if model != ANY_MODEL:
            total += max(0.0, self.pool.get(ANY_MODEL, 0.0))
        if ends is not None:
            for m in models:
                for until, amount in self.until.get(m, ()):
                    if ends <= until:
                        total += amount
        return total

    def lent_until(self, models: Iterable[str]) -> float | None:
        """The latest time to which some quota for these models is lent, if any."""
        found = [
            until
            for m in {*models, ANY_MODEL}
            for until, amount in self.until.get(m, ())
            if amount > 1e-9
        ]
        return max(found, default=None)

    def _draw(self, model: str, amount: float, ends: float | None) -> None:
        """Take a loan from the pools: quota idle for good first, then quota lent until a
        time, the soonest that outlasts `ends` first (None: an existing loan of unknown end,
        taken from the latest, which leaves new loans the least)."""
        for m in (model,) if model == ANY_MODEL else (model, ANY_MODEL):
            own = max(0.0, self.pool.get(m, 0.0))
            take = min(own, amount)
            self.pool[m] = self.pool.get(m, 0.0) - take
            amount -= take
        if amount <= 1e-12:
            return
        for m in (model,) if model == ANY_MODEL else (model, ANY_MODEL):
            lst = self.until.get(m, [])
            for entry in lst if ends is not None else reversed(lst):
                if ends is not None and ends > entry[0]:
                    continue
                take = min(entry[1], amount)
                entry[1] -= take
                amount -= take
                if amount <= 1e-12:
                    return
        # More is lent than is idle (an owner's demand grew): the excess is reclaimable.
        if model != ANY_MODEL:
            self.pool[ANY_MODEL] = self.pool.get(ANY_MODEL, 0.0) - amount

    def check(
        self, team: str, model: str, gpus: float, preemptible: bool, ends: float | None = None
    ) -> Verdict:
        """May the team start `gpus` more on this quota now, for a job ending at `ends`?"""
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
            return Verdict(
                False,
                reason=Reason(
                    "quota_exhausted",
                    f"team {team} runs {gpus_text(acc.fixed)} of {gpus_text(q.nominal)}"
                    f" {q.gpu_model} GPUs in"
                    " classes that cannot be preempted, which run only within nominal quota"
                    f" (needs {gpus_text(gpus)})",
                    (
                        ("team", team),
                        ("gpu_model", q.gpu_model),
                        ("non_preemptible_used", acc.fixed),
                        ("nominal", q.nominal),
                        ("requested", gpus),
                    ),
                ),
            )
        after = acc.used + gpus
        if after <= q.nominal + 1e-9:
            return OK_NOMINAL
        lendable = self.lendable(q.gpu_model, ends)
        limit = math.inf if q.borrowing_limit is None else q.borrowing_limit
        new_borrow = after - q.nominal
        over_limit = new_borrow > limit + 1e-9
        if not over_limit and new_borrow - acc.borrowed <= lendable + 1e-9:
            return OK_BORROWED
        # Refused: the numbers, and the sentence, only now (a deep queue asks often).
        details: tuple[tuple[str, Any], ...] = (
            ("team", team),
            ("gpu_model", q.gpu_model),
            ("used", round(acc.used, 4)),
            ("nominal", q.nominal),
            ("borrowing_limit", q.borrowing_limit),
            ("requested", round(gpus, 4)),
            ("lendable", round(lendable, 4)),
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
        shorter = self.lendable(q.gpu_model, -math.inf) - lendable
        more = ""
        if shorter > 1e-9:
            more = f"; {gpus_text(shorter)} more are lent only to jobs that end sooner"
            details += (("lendable_to_shorter_jobs", round(shorter, 4)),)
        return Verdict(
            False,
            reason=Reason(
                "quota_exhausted",
                f"{usage}; borrowing limit {acc.limit_text()}, but only "
                f"{gpus_text(lendable)} idle GPUs of other teams can be lent "
                f"(needs {gpus_text(gpus)}){more}",
                details,
            ),
        )

    def commit(
        self, team: str, model: str, gpus: float, preemptible: bool, ends: float | None = None
    ) -> None:
        if not self.enabled:
            return
        acc = self.account(team, model)
        if acc is None:
            return
        before = acc.borrowed
        acc.used += gpus
        acc.fixed += 0.0 if preemptible else gpus
        acc.running_jobs += 1
        if acc.borrowed > before:
            self._draw(acc.quota.gpu_model, acc.borrowed - before, ends)

    def headroom(self, team: str, model: str) -> float:
        """The most GPUs the team could hold on this quota now, borrowing what it may."""
        acc = self.account(team, model)
        if acc is None:
            return 0.0
        q = acc.quota
        limit = math.inf if q.borrowing_limit is None else q.borrowing_limit
        return q.nominal + min(limit, acc.borrowed + self.lendable(q.gpu_model))

    def fixed_room(self, team: str, model: str) -> float:
        """Nominal quota left for non-preemptible work."""
        acc = self.account(team, model)
        return 0.0 if acc is None else acc.quota.nominal - acc.fixed

    def nominal_free_at(self, team: str, model: str, gpus: float) -> float | None:
        """When the team's running jobs on this quota will have ended (by their time limits)
        enough for `gpus` more to fit its nominal; None if never known."""
        k = self.key(team, model)
        if k is None:
            return None
        acc = self.accounts[k]
        return _fits_at(self._held.get(k, []), acc.used, acc.quota.nominal - gpus)

    def within_nominal(self, team: str, model: str, gpus: float) -> bool:
        acc = self.account(team, model)
        return acc is not None and acc.used + gpus <= acc.quota.nominal + 1e-9

    def borrowed_by_team(self) -> Mapping[tuple[str, str], float]:
        return {k: a.borrowed for k, a in self.accounts.items() if a.borrowed > 0}


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
