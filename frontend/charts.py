"""Server-rendered SVG: quota bars, the usage bar chart and the node x GPU map.

Pure functions from numbers to markup; every text that reaches the SVG is escaped. Colours for
the page's own parts are CSS classes (so the light and dark themes restyle them); a team's
colour is derived from its name, the same on every page."""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import date
from html import escape
from typing import Any

from django.utils.safestring import SafeString, mark_safe


def team_colour(team: str) -> str:
    """A stable, distinguishable colour per team name (golden-angle hues)."""
    hue = (zlib.crc32(team.encode()) * 137.508) % 360
    return f"hsl({hue:.0f} 62% 52%)"


def _num(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _attrs(**attrs: Any) -> str:
    return "".join(
        f' {k.rstrip("_").replace("_", "-")}="{escape(str(v))}"' for k, v in attrs.items()
    )


def _svg(
    width: float,
    height: float,
    body: list[str],
    label: str,
    cls: str,
    stretch: bool = False,
    role: str = "img",
) -> SafeString:
    # A stretched drawing fills its box's width whatever the box's height (the quota bar).
    aspect = ' preserveAspectRatio="none"' if stretch else ""
    return mark_safe(  # noqa: S308 - every piece of text in body went through escape()
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_num(width)} {_num(height)}"'
        f"{aspect}{_attrs(class_=cls, role=role, aria_label=label)}>"
        f"<title>{escape(label)}</title>{''.join(body)}</svg>"
    )


# --- quota bar -------------------------------------------------------------------------------

BAR_W, BAR_H = 300.0, 18.0
BORROW_TOLERANCE = 1e-9  # as reports.BORROW_TOLERANCE, the scheduler's (scheduler/quota.py)


def quota_bar(
    used: float, nominal: float, borrowing_limit: float | None, *, quota: bool = True
) -> SafeString:
    """Used GPUs against the nominal quota, with the part over nominal (borrowed from other
    teams' idle quota) drawn apart, on a scale that reaches nominal + borrowing limit.
    `quota` False: GPUs held on a model no quota covers (reports.QuotaUsage), all borrowed."""
    ceiling = nominal + (borrowing_limit if borrowing_limit is not None else nominal)
    scale = max(ceiling, used, 1.0)

    def x(v: float) -> float:
        return BAR_W * min(v, scale) / scale

    # Within the scheduler's tolerance of nominal is not borrowing: 35 slices of 1/7 add up
    # to a hair over a nominal of 5.
    over = used - nominal if used - nominal > BORROW_TOLERANCE else 0.0
    within = min(used, nominal)
    limit = "unlimited" if borrowing_limit is None else f"up to {_num(borrowing_limit)}"
    if not quota:
        label = f"{_num(used)} GPUs in use with no quota for their model, all borrowed"
    else:
        label = (
            f"{_num(used)} of {_num(nominal)} nominal GPUs in use"
            + (f", {_num(over)} borrowed" if over else "")
            + f"; borrowing {limit}"
        )
    body = [
        f'<rect class="bar-track" x="0" y="0" width="{_num(BAR_W)}" height="{_num(BAR_H)}"/>',
        f'<rect class="bar-nominal" x="0" y="0" width="{_num(x(nominal))}" '
        f'height="{_num(BAR_H)}"/>',
        f'<rect class="bar-used" x="0" y="0" width="{_num(x(within))}" height="{_num(BAR_H)}"'
        f' data-value="{_num(within)}"/>',
    ]
    if over:
        body.append(
            f'<rect class="bar-borrowed" x="{_num(x(nominal))}" y="0" '
            f'width="{_num(x(nominal + over) - x(nominal))}" height="{_num(BAR_H)}"'
            f' data-value="{_num(over)}"/>'
        )
    body.append(
        f'<line class="bar-mark" x1="{_num(x(nominal))}" x2="{_num(x(nominal))}" y1="0" '
        f'y2="{_num(BAR_H)}" vector-effect="non-scaling-stroke"/>'
    )
    return _svg(BAR_W, BAR_H, body, label, "quota-bar", stretch=True)


# --- usage chart -----------------------------------------------------------------------------


def nice_ticks(top: float, count: int = 4) -> list[float]:
    """0 and round steps (1, 2, 2.5 or 5 x 10^n) up to at least `top`."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    n = math.ceil(top / step - 1e-9)
    # Rounded to the step's own precision: a fixed count of decimals made every tick of a
    # tiny top 0 (and the chart divided by it).
    decimals = max(0, 3 - math.floor(math.log10(step)))
    return [round(i * step, decimals) for i in range(n + 1)]


def tick_text(value: float, step: float) -> str:
    """A tick's label with as many decimals as the step needs (0.25, not 0.2 or 0.250)."""
    decimals = next((d for d in range(24) if abs(round(step, d) - step) < 1e-6 * step), 24)
    return f"{value:.{decimals}f}"


CHART_W, CHART_H = 720.0, 260.0
PAD_L, PAD_R, PAD_T, PAD_B = 48.0, 8.0, 10.0, 34.0


def usage_chart(
    days: Sequence[date],
    users: Sequence[str],
    gpu_hours: Mapping[tuple[date, str], float],
) -> SafeString:
    """GPU-hours per day, one bar per day stacked by user (users in the given order)."""
    totals = [sum(gpu_hours.get((d, u), 0.0) for u in users) for d in days]
    ticks = nice_ticks(max(totals, default=0.0))
    top, step = ticks[-1], ticks[1] - ticks[0]
    plot_w, plot_h = CHART_W - PAD_L - PAD_R, CHART_H - PAD_T - PAD_B
    slot = plot_w / max(len(days), 1)
    bar_w = max(slot * 0.7, 1.0)
    body = []
    for t in ticks:
        y = PAD_T + plot_h - plot_h * t / top
        body.append(
            f'<line class="grid" x1="{_num(PAD_L)}" x2="{_num(CHART_W - PAD_R)}" '
            f'y1="{_num(y)}" y2="{_num(y)}"/>'
            f'<text class="axis" x="{_num(PAD_L - 6)}" y="{_num(y + 4)}" '
            f'text-anchor="end">{escape(tick_text(t, step))}</text>'
        )
    label_every = max(1, math.ceil(len(days) / 12))
    for i, day in enumerate(days):
        x = PAD_L + i * slot + (slot - bar_w) / 2
        y = PAD_T + plot_h
        for user in users:
            value = gpu_hours.get((day, user), 0.0)
            if value <= 0:
                continue
            h = plot_h * value / top
            y -= h
            body.append(
                f'<rect class="usage" x="{_num(x)}" y="{_num(y)}" width="{_num(bar_w)}" '
                f'height="{_num(h)}" fill="{team_colour(user)}"'
                f"{_attrs(data_day=day.isoformat(), data_user=user, data_value=_num(value))}>"
                f"<title>{escape(f'{user} on {day.isoformat()}: {value:.2f} GPU-hours')}</title>"
                "</rect>"
            )
        if i % label_every == 0:
            body.append(
                f'<text class="axis" x="{_num(PAD_L + i * slot + slot / 2)}" '
                f'y="{_num(CHART_H - PAD_B + 16)}" text-anchor="middle">'
                f"{escape(day.strftime('%b %d'))}</text>"
            )
    body.append(
        f'<text class="axis" x="12" y="{_num(PAD_T + plot_h / 2)}" text-anchor="middle" '
        f'transform="rotate(-90 12 {_num(PAD_T + plot_h / 2)})">GPU-hours</text>'
    )
    total = sum(totals)
    label = (
        f"GPU-hours per day from {days[0].isoformat()} to {days[-1].isoformat()}: "
        f"{total:.2f} in total"
        if days
        else "no days"
    )
    return _svg(CHART_W, CHART_H, body, label, "usage-chart")


# --- node x GPU map --------------------------------------------------------------------------

CELL_W, CELL_H, GAP = 56.0, 34.0, 6.0
SLICE_W = 14.0  # one MIG memory slice: a MIG GPU is drawn wider, so its slices can be read


def node_map(
    node_name: str,
    state: str,
    layout: Sequence[Mapping[str, Any]],
    memory_slices: int,
    job_url: str = "/jobs/{}/",
    compact: bool = False,
) -> SafeString:
    """One node's GPUs left to right, coloured by the team holding each. A MIG GPU is drawn
    as its memory slices (0..memory_slices) with each instance at its physical placement.
    A down or drained node is hatched. `job_url` links the jobs the viewer may see.
    Its name says in words who holds how many (the colours say it only to the eye); one that
    holds links is a group of them, since an image's children are hidden from screen readers."""
    scale = 0.5 if compact else 1.0
    h, gap = CELL_H * scale, GAP * scale
    body: list[str] = []
    x = 0.0
    whole: Counter[str] = Counter()
    slices: Counter[str] = Counter()
    for gpu in layout:
        if gpu.get("mig") is not None:
            w = memory_slices * SLICE_W * scale
            body += _mig_gpu(gpu, x, w, h, memory_slices, job_url, labels=not compact)
            slices.update(inst["team"] for inst in gpu["mig"] if inst.get("team"))
        else:
            w = CELL_W * scale
            body += _whole_gpu(gpu, x, w, h, job_url, labels=not compact)
            if gpu.get("team"):
                whole[gpu["team"]] += 1
        x += w + gap
    width = max(x - gap, CELL_W * scale)
    if state != "up":
        body.append(
            f'<rect class="node-off" x="0" y="0" width="{_num(width)}" height="{_num(h)}"/>'
        )
    label = (
        f"node {node_name} ({state}): {len(layout)} GPUs, {whole.total()} whole GPUs in use"
        + (f" ({_holders(whole)})" if whole else "")
        + (f"; MIG slices in use: {_holders(slices)}" if slices else "")
    )
    links = any(who.get("job") for gpu in layout for who in [gpu, *(gpu.get("mig") or [])])
    return _svg(
        width,
        h,
        body,
        label,
        "node-map" + (" compact" if compact else ""),
        role="group" if links else "img",
    )


def _holders(counts: Counter[str]) -> str:
    """Who holds how many, most first, then by name: vision 2, language 1."""
    return ", ".join(
        f"{team} {n}" for team, n in sorted(counts.items(), key=lambda tn: (-tn[1], tn[0]))
    )


def _whole_gpu(
    gpu: Mapping[str, Any], x: float, w: float, h: float, job_url: str, labels: bool
) -> list[str]:
    team = gpu.get("team")
    title = f"GPU {gpu['gpu']}: {team or 'free'}"
    rect = (
        f'<rect class="{"gpu held" if team else "gpu free"}" x="{_num(x)}" y="0" '
        f'width="{_num(w)}" height="{_num(h)}" rx="3"'
        + (f' fill="{team_colour(team)}"' if team else "")
        + _attrs(data_team=team or "", data_gpu=gpu["gpu"])
        + f"><title>{escape(title)}</title></rect>"
    )
    out = [_link(rect, gpu.get("job"), job_url, f"GPU {gpu['gpu']}: a job of {team}")]
    if labels:
        out.append(
            f'<text class="{"gpu-label" if team else "gpu-label free"}" '
            f'x="{_num(x + w / 2)}" y="{_num(h / 2 + 4)}" '
            f'text-anchor="middle">{escape(team or str(gpu["gpu"]))}</text>'
        )
    return out


def _mig_gpu(
    gpu: Mapping[str, Any],
    x: float,
    w: float,
    h: float,
    memory_slices: int,
    job_url: str,
    labels: bool,
) -> list[str]:
    instances = gpu["mig"]
    title = f"GPU {gpu['gpu']}: MIG, {len(instances)} instances"
    out = [
        f'<rect class="gpu mig-gpu" x="{_num(x)}" y="0" width="{_num(w)}" height="{_num(h)}" '
        f'rx="3"><title>{escape(title)}</title></rect>'
    ]
    unit = w / max(memory_slices, 1)
    for inst in instances:
        team = inst.get("team")
        start, size = inst["start"], inst["size"]
        where = f"GPU {gpu['gpu']} {inst['profile']} (memory slices {start}-{start + size - 1})"
        sx, sw = x + start * unit + 0.75, max(size * unit - 1.5, 0.5)
        rect = (
            f'<rect class="{"slice held" if team else "slice free"}" x="{_num(sx)}" y="1.5" '
            f'width="{_num(sw)}" height="{_num(h - 3)}" rx="1.5"'
            + (f' fill="{team_colour(team)}"' if team else "")
            + _attrs(data_team=team or "", data_profile=inst["profile"])
            + f"><title>{escape(where + ': ' + (team or 'free'))}</title></rect>"
        )
        out.append(_link(rect, inst.get("job"), job_url, f"{where}: a job of {team}"))
        if labels:
            out.append(
                f'<text class="{"slice-label held" if team else "slice-label"}" '
                f'x="{_num(sx + sw / 2)}" y="{_num(h / 2 + 3.5)}" text-anchor="middle">'
                f"{escape(inst['profile'].split('.')[0])}</text>"
            )
    if not instances and labels:
        out.append(
            f'<text class="slice-label" x="{_num(x + w / 2)}" y="{_num(h / 2 + 3.5)}" '
            'text-anchor="middle">no instances</text>'
        )
    return out


def _link(markup: str, job: str | None, job_url: str, name: str) -> str:
    if not job:
        return markup
    return f"<a{_attrs(href=job_url.format(job), aria_label=name)}>{markup}</a>"
