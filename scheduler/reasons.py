"""Why a job does not start: structured reasons with numbers a person can check."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from .mig import Shortage
from .types import JobRequest, Quota, Reason


def gpus_text(x: float) -> str:
    """A GPU count for people: slices make fractions, and 4.14 reads better than 4.142857."""
    # Whole counts, the usual case, are their own rounding (and round() is slow on floats).
    return f"{x:g}" if x % 1 == 0 else f"{round(x, 2):g}"


def shape_text(r: JobRequest) -> str:
    return _shape(r.mig_profile, r.gpu_model, r.nodes, r.gpus_per_node, r.pool)


# Deep queues repeat a few shapes: every job waiting for capacity gets its text.
@lru_cache(maxsize=1024)
def _shape(
    mig_profile: str | None, gpu_model: str | None, nodes: int, gpus_per_node: int, pool: str | None
) -> str:
    if mig_profile:
        return f"one {mig_profile} MIG slice" + (f" on {gpu_model}" if gpu_model else "")
    count = "1 node" if nodes == 1 else f"{nodes} nodes"
    in_pool = f" in pool {pool}" if pool else ""
    what = gpu_model or ("GPU" if gpus_per_node == 1 else "GPUs")
    return f"{count} x {gpus_per_node} free {what}{in_pool}"


def _nodes(count: int) -> str:
    return "1 node" if count == 1 else f"{count} nodes"


def no_capacity(r: JobRequest, best_nodes: int) -> Reason:
    best = _nodes(best_nodes)
    return Reason(
        "no_capacity",
        f"needs {shape_text(r)}; the best now is {best}",
        (
            ("nodes", r.nodes),
            ("gpus_per_node", r.gpus_per_node),
            ("gpu_model", r.gpu_model),
            ("best_nodes_now", best_nodes),
        ),
    )


def unsatisfiable(r: JobRequest, max_nodes: int, widest: int = 0) -> Reason:
    """`widest`: the most GPUs on one up node it may use, said when none has enough."""
    details = (("nodes", r.nodes), ("gpus_per_node", r.gpus_per_node), ("max_nodes", max_nodes))
    if max_nodes == 0 and 0 < widest < r.gpus_per_node:
        return Reason(
            "unsatisfiable",
            f"needs {shape_text(r)}, but no node up in the cluster has {r.gpus_per_node} GPUs"
            f" (the most on one is {widest})",
            (*details, ("max_gpus_per_node", widest)),
        )
    return Reason(
        "unsatisfiable",
        f"needs {shape_text(r)}, but only {_nodes(max_nodes)} of that kind"
        f" {'is' if max_nodes == 1 else 'are'} up in the cluster",
        details,
    )


# What the behind() reasons of one shape and best-now node count share: the end of the
# message and the last detail.
BehindTail = tuple[str, tuple[str, Any]]


def behind_tail(r: JobRequest, best_nodes: int) -> BehindTail:
    return (
        f"; this job needs {shape_text(r)} and the best now is {_nodes(best_nodes)}",
        ("best_nodes_now", best_nodes),
    )


def behind(
    r: JobRequest,
    jobs_ahead: int,
    gpus_ahead: float,
    best_nodes: int,
    tail: BehindTail | None = None,
) -> Reason:
    """`tail` is behind_tail(r, best_nodes), when the caller keeps it: every job waiting for
    capacity gets one of these reasons, and a deep queue has few shapes."""
    text, best = tail or behind_tail(r, best_nodes)
    if gpus_ahead % 1 == 0:  # gpus_text and the rounding below, for the usual whole count
        # What f"{x:g}" prints for a whole x below a million, for less than float formatting.
        gpus = str(int(gpus_ahead)) if gpus_ahead < 1e6 else f"{gpus_ahead:g}"
        value = gpus_ahead
    else:
        gpus, value = gpus_text(gpus_ahead), round(gpus_ahead, 4)
    return Reason(
        "behind_higher_priority",
        f"{jobs_ahead} {'job ahead needs' if jobs_ahead == 1 else 'jobs ahead need'} {gpus}"
        f" {'GPU' if value == 1 else 'GPUs'}{text}",
        (("jobs_ahead", jobs_ahead), ("gpus_ahead", value), best),
    )


def reserved(r: JobRequest, holder: str, start: float, now: float) -> Reason:
    limit = "no time limit" if r.time_limit_s is None else f"a {r.time_limit_s:g} s limit"
    return Reason(
        "behind_higher_priority",
        f"the free GPUs it could use are reserved for job {holder}, which starts in"
        f" {max(0.0, start - now):.0f} s; with {limit} this job would delay it",
        (("reserved_for", holder), ("reservation_start", start), ("time_limit_s", r.time_limit_s)),
    )


# Why a job did not preempt lower classes that were in its way, or what a refusal adds:
# message tail and detail (with_note adds it to a reason).
Note = tuple[str, tuple[str, Any]]


def not_worth(lost_gpu_s: float, wait_gpu_s: float) -> Note:
    """A preemption refused because the victims would lose more work than the job waits."""
    return (
        f"; it does not preempt lower classes: they would lose {_gpu_time(lost_gpu_s)} of work,"
        f" more than the {_gpu_time(wait_gpu_s)} it waits",
        (
            "preemption_not_worth",
            {"lost_gpu_seconds": round(lost_gpu_s, 1), "wait_gpu_seconds": round(wait_gpu_s, 1)},
        ),
    )


def on_every_model(refusals: Sequence[Reason]) -> Reason:
    """A job for any GPU model that each of its team's quotas refuses: the first refusal's
    code and details, the words of each (each names its model), and the models."""
    words = list(dict.fromkeys(r.message for r in refusals))
    if len(words) == 1:
        return refusals[0]
    first = refusals[0]
    models = tuple(dict(r.details).get("gpu_model") for r in refusals)
    return Reason(first.code, "; and ".join(words), (*first.details, ("gpu_models", models)))


def passed_meanwhile(hold_after_s: float | None) -> Note:
    """What a whole-GPU job refused quota on its team's nominal is told of the team's smaller
    jobs (message tail and detail): whoever sees a gang wait for days while the team's later
    jobs start learns why, and until when (Policy.quota_hold_after_s; None: Kueue's
    BestEffortFIFO)."""
    until = "" if hold_after_s is None else f" until it has waited {hold_after_s:g} s"
    return (
        f"; a job refused quota holds none of its team's nominal quota{until}, so"
        f" {'until then ' if until else ''}the team's smaller jobs may start before it, later"
        " ones too",
        ("holds_nominal_after_s", hold_after_s),
    )


def holding_nominal(held: float, hold_after_s: float) -> Note:
    """What a job that has waited hold_after_s and now holds its team's nominal is told
    (message tail and detail)."""
    return (
        f"; having waited {hold_after_s:g} s, it holds {gpus_text(held)} GPUs of its team's"
        " nominal quota as they free: the team's later jobs take them only if their time limit"
        " ends before it can start",
        ("holds_nominal", round(held, 4)),
    )


def with_note(reason: Reason, note: Note) -> Reason:
    return Reason(reason.code, reason.message + note[0], (*reason.details, note[1]))


def keeping(reason: Reason, on_nodes: tuple[str, ...]) -> Reason:
    """A quota refusal of a job that preempted on `on_nodes` and keeps what its preemption
    freed there until its quota frees (the caller hands them back as for "preempting")."""
    return Reason(reason.code, reason.message, (*reason.details, ("on_nodes", on_nodes)))


def _gpu_time(gpu_s: float) -> str:
    return f"{gpu_s:.0f} GPU-seconds" if gpu_s < 3600 else f"{gpu_s / 3600:.1f} GPU-hours"


def fifo_blocked(blocker: str) -> Reason:
    return Reason(
        "behind_higher_priority",
        f"strict FIFO: job {blocker} ahead does not fit yet, and nothing passes it",
        (("blocked_by", blocker),),
    )


def preempting(victims: int, gpus: int, left_s: float, on_nodes: tuple[str, ...]) -> Reason:
    """`left_s`: until the last victim has left (victims decided in an earlier cycle have
    less of their grace left); `on_nodes`: where the job will run, which the caller hands
    back in the next cycles' snapshots (PendingJob.preempting_on)."""
    left = math.ceil(max(0.0, left_s))
    return Reason(
        "preempting",
        f"{victims} job(s) are being preempted to free {gpus} GPU(s); they have"
        f" {left} s left to checkpoint",
        (("victims", victims), ("gpus", gpus), ("grace_s", left), ("on_nodes", on_nodes)),
    )


def mig_unavailable(r: JobRequest, s: Shortage) -> Reason:
    """What holds the instances r may use (mig.MigIndex.shortage): running jobs, jobs ahead,
    jobs that preempted for them, relayouts for other jobs; or that none exists."""
    parts = []
    if s.running:
        parts.append(f"{s.running} held by running jobs")
    if s.taken:
        parts.append(f"{s.taken} taken by jobs ahead")
    for job, count, leaving in s.freed:
        parts.append(
            f"{count} held by a job being preempted for job {job}"
            if leaving
            else f"{count} free but held for job {job}, which preempted for it"
        )
    for node, gpu, jobs in s.held:
        who = (
            f"held for job {jobs[0]}, which preempted for it"
            if len(jobs) == 1
            else f"held for jobs {', '.join(jobs)}, which preempted for it"
            if jobs
            else "being emptied for a job that preempted its holders"
        )
        parts.append(f"GPU {gpu} on node {node} {who}")
    for node, gpu in s.relaid:
        parts.append(f"GPU {gpu} on node {node} being re-laid out for other jobs")
    if not parts:
        inner = "none exists"
    elif parts == [f"{s.running} held by running jobs"]:
        inner = f"{s.free} free, all held by running jobs"
    elif parts == [f"{s.taken} taken by jobs ahead"]:
        inner = f"{s.free} free, all taken by jobs ahead"
    else:
        inner = f"{s.free} free: " + "; ".join(parts)
    other = " other" if s.held or s.relaid else ""
    details: tuple[tuple[str, Any], ...] = (
        ("mig_profile", r.mig_profile),
        ("gpu_model", r.gpu_model),
        ("free_instances", s.free),
        ("held_by_running", s.running),
        ("taken_ahead", s.taken),
    )
    if s.freed:
        details += (("freed_for", tuple((job, count) for job, count, _ in s.freed)),)
    if s.held:
        details += (("gpus_held", s.held),)
    if s.relaid:
        details += (("gpus_relaid", s.relaid),)
    return Reason(
        "mig_unavailable",
        f"no free {r.mig_profile} MIG instance"
        + (f" on {r.gpu_model}" if r.gpu_model else "")
        + (f" in pool {r.pool}" if r.pool else "")
        + f" ({inner}), and no{other} idle MIG GPU can be re-laid out",
        details,
    )


def mig_unoffered(r: JobRequest) -> Reason:
    where = (f" {r.gpu_model}" if r.gpu_model else "") + (f" in pool {r.pool}" if r.pool else "")
    return Reason(
        "unsatisfiable",
        f"needs {shape_text(r)}, but no up{where} MIG GPU in the cluster offers that profile",
        (("mig_profile", r.mig_profile), ("gpu_model", r.gpu_model), ("max_nodes", 0)),
    )


def preempting_slice(
    victims: int, profile: str, left_s: float, on_nodes: tuple[str, ...] = ()
) -> Reason:
    """`left_s`: until the last victim has left, `on_nodes`: the node of the GPU they free an
    instance on, or empty, for it, as for preempting()."""
    left = math.ceil(max(0.0, left_s))
    details: tuple[tuple[str, object], ...] = (
        ("victims", victims),
        ("mig_profile", profile),
        ("grace_s", left),
    )
    return Reason(
        "preempting",
        f"{victims} job(s) are being preempted to free a {profile} MIG instance; they have"
        f" {left} s left to checkpoint",
        details + ((("on_nodes", on_nodes),) if on_nodes else ()),
    )


def preempting_for_quota_slice(
    victims: int, gpus: float, profile: str, left_s: float, on_nodes: tuple[str, ...]
) -> Reason:
    """A slice job displacing its own team's lower classes to fit its quota (`gpus`: what
    they free of it), the instance it will run on held for it on `on_nodes`'s node."""
    left = math.ceil(max(0.0, left_s))
    return Reason(
        "preempting",
        f"{victims} job(s) of its team's lower classes are being preempted to free"
        f" {gpus_text(gpus)} GPU(s) of its quota for a {profile} MIG instance; they have"
        f" {left} s left to checkpoint",
        (
            ("victims", victims),
            ("gpus", round(gpus, 4)),
            ("mig_profile", profile),
            ("grace_s", left),
            ("on_nodes", on_nodes),
        ),
    )


def mig_relayout(r: JobRequest, node: str, gpu: int, on_nodes: tuple[str, ...] = ()) -> Reason:
    """`on_nodes`: the GPU's node when it was emptied for this job (handed back as for
    preempting(), so it stays the job's until it starts there)."""
    details: tuple[tuple[str, object], ...] = (
        ("node", node),
        ("gpu", gpu),
        ("mig_profile", r.mig_profile),
    )
    return Reason(
        "mig_relayout",
        f"GPU {gpu} on node {node} is being re-laid out to create a {r.mig_profile} instance"
        " for this job",
        details + ((("on_nodes", on_nodes),) if on_nodes else ()),
    )


def bad_request(message: str) -> Reason:
    return Reason("invalid_request", message)


def quota_held(r: JobRequest, quota: Quota, used: float, held: float, holder: str) -> Reason:
    """A job that would take the nominal quota its team's earlier job is waiting to use."""
    return Reason(
        "quota_exhausted",
        f"team {r.team} uses {gpus_text(used)} of {gpus_text(quota.nominal)} {quota.gpu_model}"
        f" GPUs and holds {gpus_text(held)} more for its earlier job {holder}, which waits to"
        " start; within a team jobs start in submit order, so this one waits too unless its"
        " time limit ends before that start",
        (
            ("team", r.team),
            ("gpu_model", quota.gpu_model),
            ("used", round(used, 4)),
            ("nominal", quota.nominal),
            ("held_for", holder),
            ("held", round(held, 4)),
        ),
    )
