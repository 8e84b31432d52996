"""The MIG tables, placer, allocator and planner against brute force.

Exhaustive: an oracle that knows only the physical rules (valid starts, no memory-slice
overlap, compute within the GPU, max instances, one +me) enumerates every placed layout of
every model, and every realisable multiset must be placed, validated and planned.

Quality: on seeded request/release streams, allocator + planner must serve at least 99% of
what an exhaustive optimum serves from the same state, and never make an invalid layout.
The oracle, the optimum, the streams and the replay live in bench/mig_quality.py, which
reports the same figure on more streams.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from itertools import combinations_with_replacement
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.mig import (
    MigIndex,
    MigRequest,
    ModelTable,
    place,
    validate_layout,
)
from scheduler.mig_profiles import MODELS
from scheduler.types import MigInstance, Node
from tests.conftest import lab_missing

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO.parent / "shared" / "specs" / "mig-profiles.json"


def _load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mig_quality", REPO / "bench" / "mig_quality.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mig_quality", module)
    spec.loader.exec_module(module)
    return module


bench = _load_bench()

# The maximal seven-slice geometries without the double-memory 1g, as the reference lists them.
FOURTEEN = [
    {"7g": 1}, {"4g": 1, "3g": 1}, {"3g": 2}, {"3g": 1, "2g": 2}, {"3g": 1, "2g": 1, "1g": 2},
    {"3g": 1, "2g": 1, "1g": 1}, {"3g": 1, "1g": 4}, {"3g": 1, "1g": 3},
    {"4g": 1, "2g": 1, "1g": 1}, {"4g": 1, "1g": 3}, {"2g": 3, "1g": 1}, {"2g": 2, "1g": 3},
    {"2g": 1, "1g": 5}, {"1g": 7},
]  # fmt: skip
A30_MAXIMAL = [{"4g": 1}, {"2g": 2}, {"2g": 1, "1g": 2}, {"1g": 4}]

ALL_MODELS = sorted(MODELS)


def geometry_set(classes: list[dict[str, int]]) -> list[tuple[tuple[str, int], ...]]:
    return sorted(tuple(sorted(c.items())) for c in classes)


def class_of(table: ModelTable, name: str) -> str:
    spec = table.profile(name)
    assert spec is not None
    if spec.compute_slices == 1 and spec.memory_slices == 2:
        return "1g.2x"
    return f"{spec.compute_slices}g"


def placement_maximal_without_double_1g(model: str) -> list[dict[str, int]]:
    """Class multisets of the placed layouts to which no non-+me, non-1g.2x instance can be
    added - the reference's definition of its 14 geometries."""
    table = bench.table_of(model)
    allowed = [
        (s, start)
        for s in table.profiles
        if not s.media_extensions and class_of(table, s.name) != "1g.2x"
        for start in s.starts
    ]
    result = []
    for layout in bench.all_layouts(model):
        specs = [(table.profile(n), start) for n, start in layout]
        placed = [(s, start) for s, start in specs if s is not None]
        if any(s.media_extensions or class_of(table, s.name) == "1g.2x" for s, _ in placed):
            continue
        if any(bench.oracle_valid(table, [*placed, option]) for option in allowed):
            continue
        counts = dict(Counter(class_of(table, s.name) for s, _ in placed))
        if counts not in result:
            result.append(counts)
    return result


def names_for(table: ModelTable, classes: dict[str, int]) -> list[str]:
    by_class = {class_of(table, s.name): s.name for s in table.profiles if not s.media_extensions}
    return [by_class[c] for c, n in classes.items() for _ in range(n)]


def multisets(table: ModelTable) -> Iterator[tuple[str, ...]]:
    """Every multiset of the model's profiles with up to memory_slices + 1 members."""
    names = sorted(s.name for s in table.profiles)
    for size in range(table.memory_slices + 2):
        yield from combinations_with_replacement(names, size)


# --- the tables ------------------------------------------------------------------------------


def test_profile_tables_match_the_reference_json() -> None:
    if not REFERENCE.exists():
        lab_missing(f"{REFERENCE} (it lives beside the repository; CI always has ../shared)")
    reference = json.loads(REFERENCE.read_text())
    assert sorted(reference["models"]) == ALL_MODELS
    for model, data in reference["models"].items():
        layout = reference["layouts"][data["layout"]]
        ours = MODELS[model]
        assert ours["aliases"] == tuple(data["aliases"])
        assert ours["confidence"] == data["confidence"]
        assert (ours["compute_slices"], ours["memory_slices"]) == (
            layout["compute_slices"],
            layout["memory_slices"],
        )
        assert ours["profiles"] == tuple(
            (
                p["name"],
                p["compute_slices"],
                p["memory_slices"],
                p["max_instances"],
                tuple(p["placements"]["starts"]),
                p["placements"]["size"],
            )
            for p in data["profiles"]
        )
    listed = reference["derived_maximal_geometries_seven_slice"]["without_1g_2x"]
    assert listed == FOURTEEN
    assert reference["derived_maximal_geometries_a30"] == A30_MAXIMAL


@pytest.mark.parametrize("model", ALL_MODELS)
def test_every_model_resolves_by_its_name_and_every_alias(model: str) -> None:
    for name in (model, *MODELS[model]["aliases"]):
        assert bench.table_of(name).model == model


@pytest.mark.parametrize("model", [m for m in ALL_MODELS if MODELS[m]["compute_slices"] == 7])
def test_the_oracle_finds_the_fourteen_reference_geometries(model: str) -> None:
    assert geometry_set(placement_maximal_without_double_1g(model)) == geometry_set(FOURTEEN)


def test_the_oracle_finds_the_four_a30_geometries() -> None:
    found = placement_maximal_without_double_1g("A30-24GB")
    assert geometry_set(found) == geometry_set(A30_MAXIMAL)


# --- place / validate_layout against the oracle -----------------------------------------------


@pytest.mark.parametrize("model", ALL_MODELS)
def test_place_realises_exactly_the_realisable_multisets(model: str) -> None:
    table = bench.table_of(model)
    realisable = bench.realisable_multisets(model)
    checked = 0
    for profiles in multisets(table):
        layout = place(table, profiles)
        assert (layout is not None) == (tuple(sorted(profiles)) in realisable), profiles
        if layout is None:
            continue
        checked += 1
        assert sorted(i.profile for i in layout) == sorted(profiles)
        specs = [(table.profile(i.profile), i.start) for i in layout]
        assert bench.oracle_valid(table, [(s, start) for s, start in specs if s is not None])
        assert validate_layout(model, layout) == []
    assert checked == len(realisable)


@pytest.mark.parametrize("model", ALL_MODELS)
def test_validate_layout_accepts_every_valid_layout(model: str) -> None:
    sizes = {spec.name: spec.size for spec in bench.table_of(model).profiles}
    for layout in bench.all_layouts(model):
        instances = [MigInstance(name, start, sizes[name]) for name, start in layout]
        assert validate_layout(model, instances) == [], layout


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(ALL_MODELS),
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 8)), max_size=8),
)
def test_validate_layout_agrees_with_the_oracle(model: str, picks: list[tuple[int, int]]) -> None:
    table = bench.table_of(model)
    placed = [(table.profiles[i % len(table.profiles)], start) for i, start in picks]
    instances = [MigInstance(spec.name, start, spec.size) for spec, start in placed]
    assert (validate_layout(model, instances) == []) == bench.oracle_valid(table, placed)


# --- the planner -----------------------------------------------------------------------------


def serve_on_one_idle_gpu(model: str, profiles: Sequence[str]) -> tuple[MigInstance, ...]:
    """Plan the requests onto one blank GPU, take every slice; return the layout made."""
    index = MigIndex([Node("n", model, 1, mig=True)])
    requests = [MigRequest(f"j{i}", p) for i, p in enumerate(profiles)]
    relayouts = index.plan(requests)
    assert len(relayouts) == 1
    for request in requests:
        assert index.take(request.profile, None, None, request.job_id) is not None, request
    return relayouts[0].instances


@pytest.mark.parametrize("model", ALL_MODELS)
def test_planner_serves_every_realisable_multiset_with_a_valid_layout(model: str) -> None:
    table = bench.table_of(model)
    for profiles in sorted(bench.realisable_multisets(model) - {()}):
        layout = serve_on_one_idle_gpu(model, profiles)
        assert validate_layout(model, layout) == [], (profiles, layout)
        assert not Counter(profiles) - Counter(i.profile for i in layout)
        # The rest of the GPU is laid out too: nothing more fits in what is left.
        names = [i.profile for i in layout]
        assert all(
            place(table, [*names, s.name]) is None for s in table.profiles if not s.media_extensions
        ), layout


@pytest.mark.parametrize("model", [m for m in ALL_MODELS if MODELS[m]["compute_slices"] == 7])
@pytest.mark.parametrize(
    "geometry_classes", FOURTEEN, ids=lambda c: "+".join(f"{n}x{k}" for k, n in c.items())
)
def test_planner_reaches_each_of_the_fourteen_geometries(
    model: str, geometry_classes: dict[str, int]
) -> None:
    table = bench.table_of(model)
    profiles = names_for(table, geometry_classes)
    layout = serve_on_one_idle_gpu(model, profiles)
    assert validate_layout(model, layout) == []
    assert not Counter(profiles) - Counter(i.profile for i in layout)


@pytest.mark.parametrize("classes", A30_MAXIMAL)
def test_planner_reaches_each_a30_geometry(classes: dict[str, int]) -> None:
    profiles = names_for(bench.table_of("A30-24GB"), classes)
    layout = serve_on_one_idle_gpu("A30-24GB", profiles)
    assert sorted(i.profile for i in layout) == sorted(profiles)


# --- quality against the exhaustive optimum --------------------------------------------------


@pytest.mark.parametrize(
    ("model", "idle", "fixed", "demand", "expected"),
    [
        # One GPU: seven 1g beat one 7g when they are of one class.
        ("H100-80GB", 1, {}, [(0, "7g.80gb")] + [(0, "1g.10gb")] * 7, (7,)),
        # ... but the higher class comes first.
        ("H100-80GB", 1, {}, [(9, "7g.80gb")] + [(0, "1g.10gb")] * 7, (1, 0)),
        # 3g at start 4 leaves four 1g; the optimum knows.
        ("H100-80GB", 1, {}, [(0, "3g.40gb")] + [(0, "1g.10gb")] * 4, (5,)),
        # Two 4g never share a GPU; 4g + 3g do.
        ("H100-80GB", 1, {}, [(0, "4g.40gb"), (0, "4g.40gb"), (0, "3g.40gb")], (2,)),
        # Double-memory 1g: at most four per GPU.
        ("H100-80GB", 1, {}, [(0, "1g.20gb")] * 5, (4,)),
        # Free instances on busy GPUs serve first, with no idle GPU at all.
        ("H100-80GB", 0, {"1g.10gb": 2}, [(0, "1g.10gb")] * 3 + [(0, "2g.20gb")], (2,)),
        ("H100-80GB", 2, {"3g.40gb": 1}, [(0, "3g.40gb")] * 3 + [(0, "7g.80gb")], (4,)),
        # A30: 4 compute slices, 2g at 0 or 2.
        ("A30-24GB", 1, {}, [(0, "2g.12gb")] * 3, (2,)),
        ("A30-24GB", 2, {}, [(0, "4g.24gb"), (0, "2g.12gb"), (0, "1g.6gb"), (0, "1g.6gb")], (4,)),
        # Nothing asked, nothing served.
        ("H100-80GB", 3, {}, [], ()),
    ],
)
def test_the_optimum_matches_hand_counted_answers(
    model: str,
    idle: int,
    fixed: dict[str, int],
    demand: list[tuple[int, str]],
    expected: tuple[int, ...],
) -> None:
    assert bench.optimal_served(model, idle, Counter(fixed), demand) == expected


@pytest.mark.parametrize("flow", ["plan-first", "take-first"])
@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    gpus=st.integers(1, 8),
    model=st.sampled_from(bench.MODELS),
    two_classes=st.booleans(),
)
def test_streams_never_produce_an_invalid_layout_nor_beat_the_optimum(
    flow: str, seed: int, gpus: int, model: str, two_classes: bool
) -> None:
    priorities = (10, 1000) if two_classes else (0,)
    stream = bench.make_stream(seed, 12, gpus=gpus, model=model, priorities=priorities)
    result = bench.run_stream(stream, flow=flow)
    assert result.violations == []
    # The policy's choices are among the optimum's options: doing better than it in any
    # round would mean a bug in one of the two.
    assert result.rounds_beyond == 0


@pytest.mark.parametrize(
    ("priorities", "random_mix"),
    [((0,), False), ((10, 1000), False), ((0,), True)],
    ids=["one class", "two classes", "random mix"],
)
def test_plan_first_serves_at_least_99_percent_of_the_optimum(
    priorities: tuple[int, ...], random_mix: bool
) -> None:
    results = [
        bench.run_stream(bench.make_stream(seed, 30, priorities=priorities, random_mix=random_mix))
        for seed in range(40)
    ]
    served = sum(r.served for r in results)
    optimal = sum(r.optimal for r in results)
    assert optimal > 1000  # the streams are loaded enough for the figure to mean something
    assert sum(r.requests for r in results) > optimal  # and more is asked than fits
    assert all(r.violations == [] for r in results)
    if len(priorities) == 1:
        assert served >= 0.99 * optimal, f"served {served} of {optimal}"
    else:  # the optimum maximises the high class first; so must the planner
        high = sum(r.served_by_class[1000] for r in results)
        assert high >= 0.99 * sum(r.optimal_by_class[1000] for r in results)
