"""The SVG drawings: geometry from numbers, text escaped (pure, no browser)."""

from __future__ import annotations

import itertools
import math
import xml.etree.ElementTree as ET
from datetime import date, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frontend.charts import (
    BAR_W,
    CELL_W,
    SLICE_W,
    nice_ticks,
    node_map,
    quota_bar,
    team_colour,
    tick_text,
    usage_chart,
)


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # noqa: S314 - our own output


def rects(svg: str, cls: str) -> list[dict[str, str]]:
    return [
        r.attrib
        for r in parse(svg).iter("{http://www.w3.org/2000/svg}rect")
        if cls in r.get("class", "").split()
    ]


def width(svg: str, cls: str) -> float:
    return sum(float(r["width"]) for r in rects(svg, cls))


@pytest.mark.parametrize(
    ("used", "nominal", "borrowing", "used_w", "borrowed_w", "nominal_w"),
    [
        (0, 8, 8, 0, 0, 150),
        (4, 8, 8, 75, 0, 150),
        (12, 8, 8, 150, 75, 150),  # 4 over nominal: borrowed
        (20, 8, 8, 120, 180, 120),  # over the limit too: the scale grows to fit it
        (2, 4, None, 75, 0, 150),  # unlimited borrowing: drawn as much again as nominal
        (0, 0, 0, 0, 0, 0),
    ],
)
def test_a_quota_bar_draws_used_borrowed_and_nominal_to_scale(
    used: float, nominal: float, borrowing: Any, used_w: float, borrowed_w: float, nominal_w: float
) -> None:
    svg = quota_bar(used, nominal, borrowing)
    assert width(svg, "bar-used") == pytest.approx(used_w)
    assert width(svg, "bar-borrowed") == pytest.approx(borrowed_w)
    assert width(svg, "bar-nominal") == pytest.approx(nominal_w)
    assert width(svg, "bar-track") == BAR_W


def test_a_quota_bar_says_its_numbers_in_words() -> None:
    label = parse(quota_bar(10, 8, 4)).get("aria-label")
    assert label == "10 of 8 nominal GPUs in use, 2 borrowed; borrowing up to 4"


@given(top=st.floats(min_value=1e-4, max_value=1e7))
def test_ticks_are_evenly_spaced_round_numbers_reaching_the_top(top: float) -> None:
    ticks = nice_ticks(top)
    step = ticks[1] - ticks[0]
    assert ticks[0] == 0 and ticks[-1] >= top * (1 - 1e-9)
    assert all(b - a == pytest.approx(step) for a, b in itertools.pairwise(ticks))
    assert 2 <= len(ticks) <= 6
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
    assert round(mantissa, 6) in {1, 2, 2.5, 5, 10}


@pytest.mark.parametrize(
    ("value", "step", "text"),
    [(0.5, 0.25, "0.50"), (2, 1, "2"), (0.004, 0.002, "0.004"), (7.5, 2.5, "7.5")],
)
def test_tick_labels_have_the_decimals_their_step_needs(
    value: float, step: float, text: str
) -> None:
    assert tick_text(value, step) == text


def test_the_usage_chart_stacks_each_days_users_to_their_total() -> None:
    days = [date(2025, 3, 1) + timedelta(days=i) for i in range(3)]
    hours = {(days[0], "ann"): 3.0, (days[0], "bo"): 1.0, (days[2], "bo"): 2.0}
    svg = usage_chart(days, ["ann", "bo"], hours)
    bars = rects(svg, "usage")
    assert [(b["data-day"], b["data-user"], b["data-value"]) for b in bars] == [
        ("2025-03-01", "ann", "3"),
        ("2025-03-01", "bo", "1"),
        ("2025-03-03", "bo", "2"),
    ]
    ann, bo = bars[0], bars[1]
    # Stacked: bo's part sits on ann's, and heights are proportional to hours.
    assert float(bo["y"]) + float(bo["height"]) == pytest.approx(float(ann["y"]))
    assert float(ann["height"]) == pytest.approx(3 * float(bo["height"]))
    assert ann["fill"] == team_colour("ann")


def test_chart_and_map_text_is_escaped() -> None:
    evil = '<script>alert("x")</script>&'
    day = date(2025, 1, 1)
    for svg in (
        usage_chart([day], [evil], {(day, evil): 1.0}),
        node_map(evil, "up", [{"gpu": 0, "team": evil, "job": None}], 8),
    ):
        assert "<script>" not in svg
        texts = [t.text or "" for t in parse(svg).iter()]
        assert any(evil in t for t in texts)  # shown to people as text, intact


def gpu(i: int, team: str | None = None, job: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"gpu": i, "team": team, "job": job, **extra}


def test_a_node_map_colours_held_gpus_by_team_and_links_visible_jobs() -> None:
    svg = node_map("n1", "up", [gpu(0, "vision", "j1"), gpu(1, "language"), gpu(2)], 8)
    held = rects(svg, "held")
    assert [(r["data-team"], r["fill"]) for r in held] == [
        ("vision", team_colour("vision")),
        ("language", team_colour("language")),
    ]
    assert len(rects(svg, "free")) == 1
    links = [a.get("href") for a in parse(svg).iter("{http://www.w3.org/2000/svg}a")]
    assert links == ["/jobs/j1/"]
    assert not rects(svg, "node-off")


@pytest.mark.parametrize("state", ["down", "drain"])
def test_a_node_that_is_not_up_is_covered(state: str) -> None:
    svg = node_map("n1", state, [gpu(0), gpu(1)], 8)
    (cover,) = rects(svg, "node-off")
    assert float(cover["width"]) == pytest.approx(2 * CELL_W + 6)


def test_mig_slices_sit_at_their_memory_slice_positions() -> None:
    mig = [
        {"profile": "3g.40gb", "start": 0, "size": 4, "team": "vision", "job": None},
        {"profile": "1g.10gb", "start": 6, "size": 1, "team": None, "job": None},
    ]
    svg = node_map("m1", "up", [gpu(0), gpu(1, mig=mig)], 8)
    slices = rects(svg, "slice")
    unit = SLICE_W
    second_gpu = CELL_W + 6
    assert [(s["data-profile"], float(s["x"]), float(s["width"])) for s in slices] == [
        ("3g.40gb", pytest.approx(second_gpu + 0.75), pytest.approx(4 * unit - 1.5)),
        ("1g.10gb", pytest.approx(second_gpu + 6 * unit + 0.75), pytest.approx(unit - 1.5)),
    ]
    assert [s["class"] for s in slices] == ["slice held", "slice free"]


def test_team_colours_are_stable_and_differ_between_teams() -> None:
    assert team_colour("vision") == team_colour("vision")
    assert len({team_colour(t) for t in ("vision", "language", "speech", "robotics")}) == 4


def test_a_quota_bar_draws_no_borrowing_within_the_schedulers_tolerance_of_nominal() -> None:
    used = 0.0
    for _ in range(35):  # 35 1g slices summed one by one, as jobs' GPUs are: a hair over 5
        used += 1 / 7
    assert used > 5
    svg = quota_bar(used, 5, 0)
    assert rects(svg, "bar-borrowed") == []
    assert parse(svg).get("aria-label") == "5 of 5 nominal GPUs in use; borrowing up to 0"


def test_a_quota_bar_of_gpus_held_on_a_model_no_quota_covers_says_so() -> None:
    svg = quota_bar(4, 0, 0, quota=False)
    assert width(svg, "bar-borrowed") == BAR_W
    label = parse(svg).get("aria-label")
    assert label == "4 GPUs in use with no quota for their model, all borrowed"
