"""Read models for clusters: who holds which GPU and MIG slice, shaped for the API and UI.
Another team's job ids are not shown; its team name is (the GPU map is coloured by team)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.utils import timezone

from queue_service.jobs.models import Job

from .models import Cluster, Node

# Who holds a slice the inventory shows in use that no gpuq job is placed on, where a team is
# named (a team's slug has no space).
OUTSIDE_GPUQ = "outside gpuq"

# (gpu, start) of a MIG instance -> (the gpuq job placed on it, whether the cluster runs it).
Placed = Mapping[tuple[int, int], tuple[str, bool]]


def held_outside(mig: Sequence[Mapping[str, Any]], placed: Placed) -> dict[tuple[int, int], str]:
    """(gpu, start) -> the holder of each of a node's slices the inventory shows in use and
    no gpuq placement names (the job it names, else "external"). Kubernetes and Slurm tell
    how many slices of a profile are in use, not which: the inventory marks the first ones,
    so a gpuq job placed on another slice of the profile is read there too. Such a mark is
    the job's own when it names the job (Kubernetes), or, naming none (Slurm's GresUsed),
    one of a job the cluster runs whose own slice is not marked: each held once."""
    profiles = {(m["gpu"], m["start"]): m["profile"] for m in mig}
    marked = {(m["gpu"], m["start"]) for m in mig if m.get("in_use")}
    unmarked: dict[str, list[tuple[str, bool]]] = defaultdict(list)
    for key, held in sorted(placed.items()):
        if key in profiles and key not in marked:
            unmarked[profiles[key]].append(held)
    # Marks that name a job first: one naming none must not take a job a later mark names.
    extra = sorted(
        (m for m in mig if m.get("in_use") and (m["gpu"], m["start"]) not in placed),
        key=lambda m: (not m.get("external_job"), m["gpu"], m["start"]),
    )
    out = {}
    for m in extra:
        named, jobs = m.get("external_job"), unmarked[m["profile"]]
        mine = next((h for h in jobs if (h[0] == named if named else h[1])), None)
        if mine is not None:
            jobs.remove(mine)
        else:
            out[(m["gpu"], m["start"])] = named or "external"
    return out


def gpu_layouts(clusters: list[Cluster], user: Any) -> dict[int, list[dict[str, Any]]]:
    """node pk -> one entry per GPU: {gpu, team, job (if visible), mig: [{profile, start, size,
    team, job}]}. A slice in use outside gpuq's placements (held_outside) is held by
    OUTSIDE_GPUQ, no job shown."""
    visible = set(
        Job.objects.for_user(user).filter(state__in=Job.ACTIVE).values_list("pk", flat=True)
    )
    holders: dict[tuple[int, str], dict[tuple[int, int | None], dict[str, Any]]] = defaultdict(dict)
    placed: dict[tuple[int, str], dict[tuple[int, int], tuple[str, bool]]] = defaultdict(dict)
    active = Job.objects.filter(state__in=Job.ACTIVE, cluster__in=clusters).select_related("team")
    for job in active.only("id", "state", "placement", "cluster_id", "team__slug"):
        who = {"team": job.team.slug, "job": str(job.pk) if job.pk in visible else None}
        for a in job.placement:
            slot = holders[(job.cluster_id, a["node"])]  # type: ignore[index]
            if a.get("mig"):
                key = (a["mig"]["gpu"], a["mig"]["start"])
                slot[key] = who
                on_node = placed[(job.cluster_id, a["node"])]  # type: ignore[index]
                on_node[key] = (str(job.pk), job.state in Job.RUNNING_STATES)
            for g in a.get("gpus", []):
                slot[(g, None)] = who
    outside = {"team": OUTSIDE_GPUQ, "job": None}
    out: dict[int, list[dict[str, Any]]] = {}
    for node in Node.objects.filter(cluster__in=clusters):
        slot = holders.get((node.cluster_id, node.name), {})
        if node.mig_enabled:
            here = held_outside(node.mig, placed.get((node.cluster_id, node.name), {}))
            slot = {**slot, **dict.fromkeys(here, outside)}
        gpus = []
        for i in range(node.gpus):
            entry: dict[str, Any] = {"gpu": i, **slot.get((i, None), {"team": None, "job": None})}
            if node.mig_enabled:
                entry["mig"] = [
                    {
                        "profile": m["profile"],
                        "start": m["start"],
                        "size": m["size"],
                        **slot.get((i, m["start"]), {"team": None, "job": None}),
                    }
                    for m in sorted(node.mig, key=lambda m: m["start"])
                    if m["gpu"] == i
                ]
            gpus.append(entry)
        out[node.pk] = gpus
    return out


# --- a failed sync, as people see it --------------------------------------------------------

# What a backend's error says, as a short sentence naming no host, account, path or traceback
# (the stored text, for site staff, may hold all of them): the first pattern that matches.
_SYNC_ERRORS: tuple[tuple[str, str], ...] = (
    # paramiko's BadHostKeyException, as ssh.py words it: a key other than the one pinned
    (
        r"host key of .* changed|host key .*does not match",
        "the cluster's SSH host key does not match the one pinned",
    ),
    # ... while a host with no key pinned under its name ("not found in known_hosts": an
    # entry for port 22's `host` where the login node listens on `[host]:port`) is a setting
    (
        r"private.?key|known_hosts|kubeconfig|cluster settings|^accounts\b|accounts setting"
        r"|no connection can be made for the account",
        "gpuq's settings for the cluster are not usable",
    ),
    (r"authentication|HTTP 401|Unauthorized", "the cluster refused gpuq's credentials"),
    (r"HTTP 403|Forbidden", "the cluster denied gpuq access"),
    (r"HTTP 429|TooManyRequests", "the cluster's API is throttling gpuq (HTTP 429)"),
    (
        r"\bSSH\b.*(?:timed out|timeout)|(?:timed out|timeout).*\bSSH\b",
        "cannot reach the cluster (SSH timeout)",
    ),
    (r"timed out|timeout", "cannot reach the cluster (timeout)"),
    (r"refused", "cannot reach the cluster (connection refused)"),
    (
        r"name or service not known|nodename nor servname|getaddrinfo|name resolution",
        "cannot reach the cluster (its name does not resolve)",
    ),
    (r"\bSSH\b", "cannot reach the cluster (SSH)"),
    (r"HTTP (5\d\d)", "the cluster's API answered with an error (HTTP {0})"),
    (
        r"unreachable|no route|reset by peer|\bEOF\b|ConnectError|RemoteProtocolError|unavailable",
        "cannot reach the cluster",
    ),
    (r"HTTP (4\d\d)", "the cluster's API refused a request (HTTP {0})"),
)

# An error in how gpuq reaches a cluster (as the backends word it: SSH's connection, host key
# and login, a command's channel to the login node, an HTTP connection, credentials refused),
# or one of gpuq's settings for it that quotes them (a kubeconfig, a value, an account's
# entry): not the cluster's answer about a job (sbatch's "Invalid account", an API server's
# 422), which its owner needs to read, nor a setting's error that names only the setting
# ("known_hosts line 1 is not a host key").
_REACHING = re.compile(
    # user@host:port, the host a name, an IPv4 or an IPv6 address (bare or in brackets).
    r"\bSSH\b|\S@(?:\[[^\s\]]+\]|[^\s@/]+):\d+(?![\w.])|host key of|pinned host key"
    r"|(?i:host key for)"
    r"|HTTP 401|Unauthorized"
    r"|\b(?:Connect|Read|Write|Pool)(?:Error|Timeout)\b|\b(?:Remote|Local)ProtocolError\b"
    r"|\b(?:Network|Proxy|Close)Error\b|\bUnsupportedProtocol\b|\bTimeoutException\b"
    r"|kubeconfig|invalid Slurm cluster settings|^accounts\b|accounts setting"
    r"|no connection can be made for the account"
)


# The Kubernetes API server's 403 when its authorizer refuses gpuq (responsewriters.Forbidden:
# `User "<account>" cannot <verb> resource "<r>" in API group "<g>" in the namespace "<ns>"`,
# or `at the cluster scope`, or `cannot <verb> path "<p>"`, then `: <the authorizer's reason>`,
# which may name gpuq's roles). What was refused is shown, not who gpuq is there.
_K8S_DENIAL = re.compile(
    r'\bUser "(?:[^"\\]|\\.)*" cannot (?P<what>\S+ (?:resource "[^"]*" in API group "[^"]*"'
    r' (?:in the namespace "[^"]*"|at the cluster scope)|path "[^"]*"))',
)


def _summary(text: str) -> str | None:
    for pattern, sentence in _SYNC_ERRORS:
        found = re.search(pattern, text, re.IGNORECASE)
        if found:
            return sentence.format(*found.groups())
    return None


def reaching_error_summary(text: str) -> str | None:
    """The summary (as a failed sync's: no host, account or path) of an error in how gpuq
    reaches a cluster, to be shown in place of its own words in a job's reason and events,
    which every member of the job's team reads (an API server's refusal of gpuq's account:
    the words before it and what was refused); None for any other error (the cluster's
    answer about the job, shown as it is)."""
    denied = _K8S_DENIAL.search(text)
    if denied:
        return f"{text[: denied.start()]}gpuq's account cannot {denied['what']}"
    if not _REACHING.search(text):
        return None
    return _summary(text) or "cannot reach the cluster"


def can_read_sync_errors(user: Any) -> bool:
    """Site staff read a failed sync's own words; everyone else its summary."""
    return bool(getattr(user, "is_staff", False) or getattr(user, "is_superuser", False))


def sync_error_summary(cluster: Cluster) -> str:
    """The last failed sync, safe to show anyone: what went wrong in a few words, and since
    when (the last sync that worked), e.g. "cannot reach the cluster (SSH timeout) since
    07:31 UTC". Empty when the last sync worked."""
    text = cluster.last_sync_error
    if not text:
        return ""
    what = _summary(text) or "the cluster's last sync failed"
    if cluster.last_sync_at is None:
        return f"{what}; it has never synced"
    return f"{what} since {_moment(cluster.last_sync_at)}"


def _moment(at: datetime) -> str:
    """07:31 UTC today, else 12 Mar 07:31 UTC (and the year, if not this one)."""
    local, now = timezone.localtime(at), timezone.localtime()
    if local.date() == now.date():
        return local.strftime("%H:%M %Z")
    if local.year == now.year:
        return local.strftime("%d %b %H:%M %Z")
    return local.strftime("%d %b %Y %H:%M %Z")
