"""A small driver of schedule() over several cycles with a fake clock, as the simulator
drives it (scheduler/simulate.py): a start runs from the cycle's instant, a victim leaves
once its grace period is over and waits again, a run ends at its duration (at most its time
limit), and each preemptor waits with the nodes the last cycle preempted on for it
(Decisions.preempting -> PendingJob.preempting_on)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace

from scheduler import schedule
from scheduler.types import (
    Decisions,
    JobRequest,
    Node,
    PendingJob,
    Policy,
    RunningJob,
    Snapshot,
    Start,
    Team,
)

from .builders import NOW


@dataclass
class Driver:
    """The simulator's loop around schedule(), one cycle every `step` seconds."""

    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]
    policy: Policy = field(default_factory=Policy)
    now: float = NOW
    step: float = 10.0
    pending: dict[str, PendingJob] = field(default_factory=dict)
    running: dict[str, RunningJob] = field(default_factory=dict)
    duration: dict[str, float] = field(default_factory=dict)
    leaves_at: dict[str, float] = field(default_factory=dict)
    preempted: Counter[str] = field(default_factory=Counter)
    victims: list[str] = field(default_factory=list)
    # (preemptor, victim) in the order the cycles decided them.
    preemptions: list[tuple[str, str]] = field(default_factory=list)
    decisions: list[Decisions] = field(default_factory=list)

    def snapshot(self) -> Snapshot:
        return Snapshot(
            self.nodes,
            self.teams,
            tuple(self.pending[k] for k in sorted(self.pending)),
            tuple(self.running[k] for k in sorted(self.running)),
        )

    def submit(self, r: JobRequest, duration: float | None = None) -> None:
        self.pending[r.id] = PendingJob(r)
        self.duration[r.id] = duration if duration is not None else (r.time_limit_s or math.inf)

    def place(self, job: RunningJob) -> None:
        self.running[job.request.id] = job
        self.duration[job.request.id] = math.inf

    def started(self, start: Start) -> None:
        """A start applied (subclasses keep more state)."""

    def applied(self, d: Decisions) -> None:
        """A cycle's decisions applied (subclasses keep more state)."""

    def free(self, job_id: str) -> RunningJob:
        return self.running.pop(job_id)

    def cycle(self) -> Decisions:
        d = schedule(self.snapshot(), self.policy, self.now)
        self.decisions.append(d)
        # As the simulator and the service do: each preemptor waits with the nodes the last
        # cycle preempted on for it.
        for jid, p in list(self.pending.items()):
            if p.preempting_on:
                self.pending[jid] = replace(p, preempting_on=())
        for jid, on_nodes in d.preempting:
            self.pending[jid] = replace(self.pending[jid], preempting_on=on_nodes)
        for x in d.starts:
            p = self.pending.pop(x.job_id)
            self.running[x.job_id] = RunningJob(
                p.request, self.now, x.placement, x.gpu_model, preemptions=self.preempted[x.job_id]
            )
            self.started(x)
        for pre in d.preemptions:
            job = self.running[pre.job_id]
            if job.preempting_since is None:
                self.victims.append(pre.job_id)
                self.preemptions.append((pre.by_job_id, pre.job_id))
                self.running[pre.job_id] = replace(job, preempting_since=self.now)
                self.leaves_at[pre.job_id] = self.now + self.policy.preemption_grace_s
        self.applied(d)
        return d

    def advance(self) -> None:
        self.now += self.step
        for jid, job in list(self.running.items()):
            limit = job.request.time_limit_s
            ran = min(self.duration[jid], math.inf if limit is None else limit)
            if job.start_time + ran <= self.now:
                self.free(jid)
                self.leaves_at.pop(jid, None)
            elif jid in self.leaves_at and self.leaves_at[jid] <= self.now:
                self.free(jid)
                del self.leaves_at[jid]
                self.preempted[jid] += 1
                self.duration[jid] -= self.now - job.start_time
                self.pending[jid] = PendingJob(
                    job.request, attempts=1, preemptions=self.preempted[jid]
                )

    def run_until(self, until: float) -> None:
        while self.now <= until:
            self.cycle()
            self.advance()
