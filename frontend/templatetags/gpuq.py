"""Small presentation filters: a job's shape, times relative to now, team colours, bars,
array indices."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from itertools import groupby
from typing import Any

from django import template
from django.utils import timezone
from django.utils.safestring import SafeString

from frontend import charts, forms

register = template.Library()
TIMES = "\N{MULTIPLICATION SIGN}"
INDEX_CHARS = 64  # squeue's default SLURM_BITSTR_LEN


@register.filter
def shape(job: Any) -> str:
    """What a job asks for, e.g. "2 nodes x 8 A100-SXM4-80GB" or "MIG 1g.10gb slice"."""
    spec = job.spec if hasattr(job, "spec") else job
    model = spec.get("gpu_model") or (getattr(job, "gpu_model", "") or "any GPU")
    if spec.get("mig_profile"):
        return f"MIG {spec['mig_profile']} slice" + (
            f" of {spec['gpu_model']}" if spec.get("gpu_model") else ""
        )
    nodes, per_node = spec.get("nodes", 1), spec.get("gpus_per_node", 1)
    if nodes == 1:
        return f"{per_node} {TIMES} {model}"
    return f"{nodes} nodes {TIMES} {per_node} {model}"


@register.filter
def backend_id(job: Any) -> str:
    """The id people give the cluster's own tools: a Slurm job's `[user:]<id>` (what squeue
    -j and scancel take) without the `@<attempt>` that names its log files; others as they
    are."""
    external = job.external_id or ""
    cluster = getattr(job, "cluster", None)
    if cluster is not None and cluster.kind == "slurm":
        return external.rpartition("@")[0] or external
    return external


@register.filter
def gpus(value: float | None) -> str:
    if value is None:
        return "∞"
    return f"{value:.2f}".rstrip("0").rstrip(".")


@register.filter
def relative(moment: datetime | None) -> str:
    """'in 12 min', '3 h ago', 'now'."""
    if moment is None:
        return ""
    seconds = (moment - timezone.now()).total_seconds()
    text = span(abs(seconds))
    if text == "now":
        return text
    return f"in {text}" if seconds > 0 else f"{text} ago"


@register.filter
def span(seconds: float | None) -> str:
    """A duration the way people say it: '45 s', '12 min', '3 h 20 min', '2 d 4 h'."""
    if seconds is None:
        return ""
    s = int(seconds)
    if s < 5:
        return "now"
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(s // 3600, 24)
    return f"{d} d {h} h" if h else f"{d} d"


@register.filter
def exact(seconds: float | None) -> str:
    """A duration to the second, each unit that is not zero: a time limit or an interval,
    where span's '1 min' for 90 s would tell of a job killed sooner than it is."""
    if seconds is None:
        return ""
    left, parts = int(seconds), []
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count} {unit}")
    return " ".join(parts) or "0 s"


@register.filter
def team_colour(team: str | None) -> str:
    return charts.team_colour(team) if team else "transparent"


@register.simple_tag
def quota_bar(row: Any) -> SafeString:
    return charts.quota_bar(row.used, row.nominal, row.borrowing_limit, quota=row.quota)


@register.filter
def get(mapping: Any, key: Any) -> Any:
    return mapping.get(key) if mapping else None


@register.filter
def ticked(text: str | None) -> list[str]:
    """A group of checkboxes' values as the form keeps them ("start, end") -> a list, so
    `in` tests membership rather than a substring."""
    return forms.ticked({"v": text or ""}, "v")


@register.filter
def index_ranges(indices: Iterable[int], max_chars: int = INDEX_CHARS) -> str:
    """Array indices as Slurm writes them: runs of consecutive ones as first-last, in order
    ([3, 5, 7, 8, 9] is "3,5,7-9"). Past `max_chars` (0: no limit), the ranges that fit and
    ",…", as squeue cuts at SLURM_BITSTR_LEN: a stepped 10,000-task array is not 50 KB."""
    if isinstance(indices, range) and indices.step == 1 and len(indices) > 1:
        return f"{indices[0]}-{indices[-1]}"  # one run, however long, without sorting it
    parts = []
    # Within a run of consecutive indices, index minus rank is the same.
    for _, run in groupby(enumerate(sorted(set(indices))), key=lambda pair: pair[1] - pair[0]):
        first, *rest = (index for _, index in run)
        parts.append(f"{first}-{rest[-1]}" if rest else str(first))
    text = ",".join(parts)
    if not max_chars or len(text) <= max_chars:
        return text
    shown: list[str] = []
    size = 1  # n parts and ",…" take their lengths, n - 1 commas and 2
    for part in parts:
        size += len(part) + 1
        if shown and size > max_chars:
            break
        shown.append(part)
    return text if len(shown) == len(parts) else ",".join(shown) + ",…"
