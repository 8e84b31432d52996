"""Quotas with borrowing (Kueue's cohort model, one cohort of all teams).

A team's quota for a model is its Quota for that exact model, else its "*" quota; both are
counted in GPUs (a MIG slice as its GPU fraction). Up to `nominal` is guaranteed. Above it a
team borrows, up to `borrowing_limit`, from the other teams' idle nominal quota, where idle
means neither used nor wanted by the owner's own pending jobs, so nothing is lent only to be
reclaimed a moment later; `lending_limit` caps what an owner lends. Idle quota of an exact
model is lent for that model; idle "*" quota for any model. Capacity that is nobody's nominal
quota is lent like idle "*" quota, so quotas that do not add up to the cluster waste nothing.

Non-preemptible jobs of a team together stay within its nominal quota; the part of a team's
usage above nominal is then always held by preemptible jobs, which another team reclaiming
its guarantee can preempt. So one team's unpreemptible work never blocks another's nominal.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .reasons import gpus_text
from .types import ANY_MODEL, Quota, Reason, RunningJob, Team

# What a job asks of a quota: (team, GPU model or None for any, GPUs).
Demand = tuple[str, str | None, float]


@dataclass
class Account:
    quota: Quota
    used: float = 0.0
    # Usage by non-preemptible jobs: never above nominal, so whatever a team borrows is held
    # by preemptible jobs and another team's guarantee can always be reclaimed.
    fixed: float = 0.0
    wanted: float = 0.0
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
    ) -> None:
        """`running` is (job, GPUs, preemptible); `capacity` the cluster's GPUs."""
        self.enabled = enabled
        self.accounts: dict[tuple[str, str], Account] = {}
        for team in teams:
            for q in team.quotas:
                self.accounts[(team.name, q.gpu_model)] = Account(q)
        self._key_cache: dict[tuple[str, str], tuple[str, str] | None] = {}
        account = self.account
        for job, gpus, preemptible in running:
            acc = account(job.request.team, job.gpu_model)
            if acc is not None:
                acc.used += gpus
                acc.fixed += 0.0 if preemptible else gpus
                acc.running_jobs += 1
        by_team: dict[str, list[Account]] = {}
        for (t, _), acc in self.accounts.items():
            by_team.setdefault(t, []).append(acc)
        targets_of: dict[tuple[str, str | None], list[Account]] = {}
        for owner, model, gpus in wanted:
            targets = targets_of.get((owner, model))
            if targets is None:
                # Any model: the demand may land on any of the team's quotas; lend none of them.
                found = by_team.get(owner, []) if model is None else [self.account(owner, model)]
                targets = targets_of[(owner, model)] = [acc for acc in found if acc is not None]
            for acc in targets:
                # A job larger than the nominal quota needs to borrow anyway: if it held the
                # nominal back, teams that all need to borrow would wait for each other forever.
                if gpus <= acc.quota.nominal + 1e-9:
                    acc.wanted += gpus
        # Lending pools by quota model ("*" lends to any model), net of current borrowing.
        nominal = sum(acc.quota.nominal for acc in self.accounts.values())
        self.pool: dict[str, float] = {ANY_MODEL: max(0.0, capacity - nominal)}
        for (_, model), acc in self.accounts.items():
            idle = max(0.0, acc.quota.nominal - acc.used - acc.wanted)
            if acc.quota.lending_limit is not None:
                idle = min(idle, acc.quota.lending_limit)
            self.pool[model] = self.pool.get(model, 0.0) + idle
        for (_, model), acc in sorted(self.accounts.items()):
            if acc.borrowed > 0:
                self._draw(model, acc.borrowed)

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

    def lendable(self, model: str) -> float:
        own = max(0.0, self.pool.get(model, 0.0))
        return own + (max(0.0, self.pool.get(ANY_MODEL, 0.0)) if model != ANY_MODEL else 0.0)

    def _draw(self, model: str, amount: float) -> None:
        own = max(0.0, self.pool.get(model, 0.0))
        take = min(own, amount)
        self.pool[model] = self.pool.get(model, 0.0) - take
        if amount > take and model != ANY_MODEL:
            self.pool[ANY_MODEL] = self.pool.get(ANY_MODEL, 0.0) - (amount - take)

    def check(self, team: str, model: str, gpus: float, preemptible: bool) -> Verdict:
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
        details = (
            ("team", team),
            ("gpu_model", q.gpu_model),
            ("used", round(acc.used, 4)),
            ("nominal", q.nominal),
            ("borrowing_limit", q.borrowing_limit),
            ("requested", round(gpus, 4)),
            ("lendable", round(self.lendable(q.gpu_model), 4)),
        )
        usage = (
            f"team {team} uses {gpus_text(acc.used)} of {gpus_text(q.nominal)} {q.gpu_model} GPUs"
        )
        limit = math.inf if q.borrowing_limit is None else q.borrowing_limit
        new_borrow = after - q.nominal
        if new_borrow > limit + 1e-9:
            return Verdict(
                False,
                reason=Reason(
                    "quota_exhausted",
                    f"{usage}; borrowing limit {acc.limit_text()} (needs {gpus_text(gpus)} more)",
                    details,
                ),
            )
        if new_borrow - acc.borrowed > self.lendable(q.gpu_model) + 1e-9:
            return Verdict(
                False,
                reason=Reason(
                    "quota_exhausted",
                    f"{usage}; borrowing limit {acc.limit_text()}, but only "
                    f"{gpus_text(self.lendable(q.gpu_model))} idle GPUs of other teams can be lent "
                    f"(needs {gpus_text(gpus)})",
                    details,
                ),
            )
        return OK_BORROWED

    def commit(self, team: str, model: str, gpus: float, preemptible: bool) -> None:
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
            self._draw(acc.quota.gpu_model, acc.borrowed - before)

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

    def within_nominal(self, team: str, model: str, gpus: float) -> bool:
        acc = self.account(team, model)
        return acc is not None and acc.used + gpus <= acc.quota.nominal + 1e-9

    def borrowed_by_team(self) -> Mapping[tuple[str, str], float]:
        return {k: a.borrowed for k, a in self.accounts.items() if a.borrowed > 0}
