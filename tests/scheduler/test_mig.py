"""MIG tables, parser, layout validation, allocator (MigIndex.take/release) and planner."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.mig import (
    MigIndex,
    MigRequest,
    ModelTable,
    ProfileName,
    ProfileSpec,
    geometry,
    gpu_fraction,
    parse_profile,
    validate_layout,
)
from scheduler.types import Gpu, MigInstance, MigSlot, Node


def inst(text: str, model: str = "H100-80GB") -> MigInstance:
    """A MigInstance from "3g.40gb@4" (free) or "1g.10gb@0:job-1" (held), sized as the
    model's table says (size 1 for a profile the model does not have)."""
    spec, _, job = text.partition(":")
    profile, _, start = spec.partition("@")
    table = geometry(model)
    assert table is not None
    found = table.profile(profile)
    return MigInstance(profile, int(start), found.size if found else 1, job or None)


def mig_node(
    name: str,
    gpus: int = 1,
    *,
    model: str = "H100-80GB",
    pool: str | None = None,
    state: str = "up",
    layouts: dict[int, list[str]] | None = None,
    unusable: tuple[int, ...] = (),
) -> Node:
    layouts = layouts or {}
    return Node(
        name=name,
        gpu_model=model,
        gpus=gpus,
        pool=pool,
        mig=True,
        state=state,
        mig_gpus=tuple(
            Gpu(i, tuple(inst(t, model) for t in layouts.get(i, [])), usable=i not in unusable)
            for i in range(gpus)
        ),
    )


# --- parse_profile ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("1g.10gb", ProfileName(1, 10, False)),
        ("7g.79gb", ProfileName(7, 79, False)),
        ("1g.10gb+me", ProfileName(1, 10, True)),
        ("3g.141gb", ProfileName(3, 141, False)),
        (" 2G.20GB ", ProfileName(2, 20, False)),
    ],
)
def test_parse_profile_reads_compute_memory_and_media_extensions(
    name: str, expected: ProfileName
) -> None:
    assert parse_profile(name) == expected


@pytest.mark.parametrize(
    "name",
    [
        "",
        "1g",
        "1g.10",
        "g.10gb",
        "1g.10gb+",
        "1g.10gb+mex",
        "0g.10gb",
        "1g.0gb",
        "mig-1g.10gb",
        "1g.10gb;rm -rf /",
        "1.5g.10gb",
        "1g.10gb\nx",
        "\uff11g.10gb",
    ],
)
def test_parse_profile_rejects_anything_else_with_a_clear_message(name: str) -> None:
    with pytest.raises(ValueError, match="invalid MIG profile"):
        parse_profile(name)


@given(st.integers(1, 64), st.integers(1, 999), st.booleans())
def test_parse_profile_round_trips_its_string_form(compute: int, memory: int, me: bool) -> None:
    parsed = ProfileName(compute, memory, me)
    assert parse_profile(str(parsed)) == parsed


# --- geometry and profile lookup -------------------------------------------------------------


@pytest.mark.parametrize(
    ("spelling", "model"),
    [
        ("A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("A100-PCIE-80GB", "A100-SXM4-80GB"),
        ("A100 80GB PCIe", "A100-SXM4-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "A100-SXM4-40GB"),  # GFD single strategy
        ("H100-SXM5-80GB", "H100-80GB"),
        ("NVIDIA-H100-80GB-HBM3", "H100-80GB"),
        ("H100 NVL", "H100-94GB"),
        ("H200-SXM5-141GB", "H200-141GB"),
        ("H200-140GB", "H200-141GB"),
        ("GH200 144G HBM3e", "GH200-144GB"),
        ("GH200-96GB", "H100-96GB"),
        ("A30", "A30-24GB"),
        ("NVIDIA B200", "B200-180GB"),
    ],
)
def test_geometry_resolves_aliases_and_spelling_variants(spelling: str, model: str) -> None:
    table = geometry(spelling)
    assert table is not None
    assert table.model == model


@pytest.mark.parametrize("spelling", ["V100-SXM2-32GB", "T4", "L40S", "H100", "", "A100-SXM4-60GB"])
def test_geometry_is_none_for_models_without_mig_or_ambiguous_names(spelling: str) -> None:
    assert geometry(spelling) is None


def custom_table(model: str = "H100-80GB") -> ModelTable:
    return ModelTable(
        model=model,
        compute_slices=7,
        memory_slices=8,
        profiles=(
            ProfileSpec("1g.11gb", 1, 1, 7, (0, 1, 2, 3, 4, 5, 6), 1),
            ProfileSpec("7g.79gb", 7, 8, 1, (0,), 8),
        ),
        aliases=("Site-H100",),
    )


def test_geometry_prefers_a_cluster_override_by_name_or_alias() -> None:
    overrides = {"H100-80GB": custom_table()}
    assert geometry("H100-80GB", overrides) == custom_table()
    assert geometry("site h100", overrides) == custom_table()
    assert geometry("A100-SXM4-80GB", overrides) == geometry("A100-SXM4-80GB")


def test_model_table_rejects_placements_outside_the_gpu() -> None:
    with pytest.raises(ValueError, match="outside the GPU"):
        ModelTable("X", 7, 8, (ProfileSpec("3g.40gb", 3, 4, 2, (0, 5), 4),))


@pytest.mark.parametrize(
    ("model", "name", "found"),
    [
        ("H100-80GB", "1g.10gb", "1g.10gb"),
        ("H100-80GB", "7g.79gb", "7g.80gb"),  # the driver's spelling of the same profile
        ("H100-80GB", "3g.40gb+me", None),
        ("H100-80GB", "1g.10gb+me", "1g.10gb+me"),
        ("H100-80GB", "1g.9gb", None),
        ("H100-80GB", "1g.20gb", "1g.20gb"),
        ("A100-SXM4-40GB", "1g.20gb", None),
        ("A100-SXM4-40GB", "1g.10gb", "1g.10gb"),
        ("A30-24GB", "4g.24gb", "4g.24gb"),
        ("A30-24GB", "4g.20gb", None),
        ("H100-80GB", "nonsense", None),
    ],
)
def test_profile_lookup_matches_by_parsed_compute_and_memory(
    model: str, name: str, found: str | None
) -> None:
    table = geometry(model)
    assert table is not None
    spec = table.profile(name)
    assert (spec.name if spec else None) == found


@pytest.mark.parametrize(
    ("model", "profile", "fraction"),
    [
        ("H100-80GB", "1g.10gb", 1 / 7),
        ("H100-80GB", "1g.20gb", 1 / 7),
        ("A100-SXM4-80GB", "3g.40gb", 3 / 7),
        ("A100-SXM4-40GB", "7g.40gb", 1.0),
        ("A30-24GB", "1g.6gb", 1 / 4),
        ("A30-24GB", "2g.12gb", 2 / 4),
        ("H100-80GB", "7g.79gb", 1.0),
        ("V100-SXM2-32GB", "2g.10gb", 2 / 7),  # no table: still charged, as a 7-slice GPU
    ],
)
def test_gpu_fraction_is_compute_slices_over_the_gpus(
    model: str, profile: str, fraction: float
) -> None:
    assert gpu_fraction(model, profile) == pytest.approx(fraction)


def test_gpu_fraction_rejects_an_invalid_profile() -> None:
    with pytest.raises(ValueError, match="invalid MIG profile"):
        gpu_fraction("H100-80GB", "big")


# --- validate_layout -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "layout",
    [
        [],
        ["7g.80gb@0"],
        ["4g.40gb@0", "3g.40gb@4"],
        ["3g.40gb@4", "1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3"],
        ["2g.20gb@0", "2g.20gb@2", "2g.20gb@4", "1g.10gb@6"],
        ["1g.20gb@6", "3g.40gb@0", "1g.10gb@4", "1g.10gb@5"],
        ["1g.10gb+me@0", "1g.10gb@1"],
    ],
)
def test_validate_layout_accepts_valid_layouts(layout: list[str]) -> None:
    assert validate_layout("H100-80GB", [inst(t) for t in layout]) == []


@pytest.mark.parametrize(
    ("layout", "problem"),
    [
        (["3g.40gb@2"], "invalid start"),
        (["1g.10gb@7"], "invalid start"),
        (["1g.20gb@1"], "invalid start"),
        (["3g.40gb@4", "2g.20gb@4"], "overlaps"),
        (["4g.40gb@0", "3g.40gb@0"], "overlaps"),
        (["3g.40gb@0", "3g.40gb@4", "1g.10gb@4"], "overlaps"),
        (["1g.10gb+me@0", "1g.10gb+me@1"], "+me"),
        (["2g.20gb@0", "4g.40gb@0"], "overlaps"),
        (["5g.50gb@0"], "not a MIG profile"),
    ],
)
def test_validate_layout_names_what_is_wrong(layout: list[str], problem: str) -> None:
    problems = validate_layout("H100-80GB", [inst(t) for t in layout])
    assert any(problem in p for p in problems), problems


def test_validate_layout_counts_compute_and_max_instances() -> None:
    # Memory slices do not overlap but 4 x 2g would be 8 compute slices on a 7-slice GPU.
    four_2g = [MigInstance("2g.20gb", s, 2) for s in (0, 2, 4, 6)]
    problems = validate_layout("H100-80GB", four_2g)
    assert any("8 compute slices used" in p for p in problems)
    assert any("at most 3 per GPU" in p for p in problems)
    wrong_size = validate_layout("H100-80GB", [MigInstance("3g.40gb", 4, 2)])
    assert wrong_size == ["3g.40gb@4: size 2, must be 4"]


def test_validate_layout_reports_an_unknown_model() -> None:
    assert validate_layout("V100-SXM2-32GB", []) == [
        "V100-SXM2-32GB: no MIG profile table for this GPU model"
    ]


# --- MigIndex.take / release / free_count ----------------------------------------------------


def test_take_prefers_a_gpu_already_in_use_over_an_idle_one() -> None:
    node = mig_node(
        "h100-01",
        2,
        layouts={0: ["1g.10gb@0", "1g.10gb@1"], 1: ["3g.40gb@4:busy", "1g.10gb@0"]},
    )
    index = MigIndex([node])
    assert index.take("1g.10gb", None, None, "j1") == (
        "h100-01",
        MigSlot(gpu=1, profile="1g.10gb", start=0, size=1),
    )
    assert index.layout("h100-01", 1)[1].job_id == "j1"


def test_take_picks_the_tightest_busy_gpu_so_larger_free_regions_stay_whole() -> None:
    roomy = mig_node("roomy", layouts={0: ["1g.10gb@0:a", "3g.40gb@4", "1g.10gb@1"]})
    tight = mig_node("tight", layouts={0: ["4g.40gb@0:b", "2g.20gb@4:c", "1g.10gb@6"]})
    index = MigIndex([roomy, tight])
    taken = index.take("1g.10gb", None, None, "j")
    assert taken is not None and taken[0] == "tight"


@pytest.mark.parametrize(
    ("gpu_model", "pool", "expected_node"),
    [
        (None, None, "a100"),  # both match; a100 sorts first
        ("H100-80GB", None, "h100"),
        ("NVIDIA H100 80GB", None, "h100"),  # same model, vendor spelling
        (None, "inference", "h100"),
        ("*", "inference", "h100"),
        ("A100-SXM4-80GB", "inference", None),
        ("H200-141GB", None, None),
    ],
)
def test_take_honours_model_and_pool(
    gpu_model: str | None, pool: str | None, expected_node: str | None
) -> None:
    nodes = [
        mig_node("a100", model="A100-SXM4-80GB", pool="training", layouts={0: ["1g.10gb@0"]}),
        mig_node("h100", pool="inference", layouts={0: ["1g.10gb@0"]}),
    ]
    taken = MigIndex(nodes).take("1g.10gb", gpu_model, pool, "j")
    assert (taken[0] if taken else None) == expected_node


def test_take_matches_the_drivers_spelling_of_a_profile() -> None:
    index = MigIndex([mig_node("n", layouts={0: ["7g.79gb@0"]})])
    assert index.free_count("7g.80gb", None, None) == 1
    assert index.take("7g.80gb", None, None, "j") == ("n", MigSlot(0, "7g.79gb", 0, 8))


def test_index_leaves_out_nodes_not_up_and_unusable_gpus() -> None:
    nodes = [
        mig_node("drained", state="drain", layouts={0: ["1g.10gb@0"]}),
        mig_node("down", state="down", layouts={0: ["1g.10gb@0"]}),
        mig_node("broken", 2, layouts={0: ["1g.10gb@0"], 1: ["1g.10gb@0"]}, unusable=(0,)),
    ]
    index = MigIndex(nodes)
    assert index.free_count("1g.10gb", None, None) == 1
    assert index.take("1g.10gb", None, None, "j") == ("broken", MigSlot(1, "1g.10gb", 0, 1))
    assert index.take("1g.10gb", None, None, "k") is None


def test_a_mig_node_reported_without_gpu_state_has_blank_gpus() -> None:
    node = Node("fresh", "H100-80GB", 2, mig=True)
    index = MigIndex([node])
    assert index.free_count("1g.10gb", None, None) == 0
    relayouts = index.plan([MigRequest("j", "1g.10gb")])
    assert [(r.node, r.gpu) for r in relayouts] == [("fresh", 0)]


def test_release_frees_the_instance_and_free_count_follows() -> None:
    index = MigIndex([mig_node("n", layouts={0: ["3g.40gb@4:j1", "3g.40gb@0"]})])
    assert index.free_count("3g.40gb", None, None) == 1
    index.release("n", MigSlot(0, "3g.40gb", 4, 4))
    assert index.free_count("3g.40gb", None, None) == 2
    index.release("elsewhere", MigSlot(0, "3g.40gb", 4, 4))  # a node the index left out
    with pytest.raises(ValueError, match="no MIG instance"):
        index.release("n", MigSlot(0, "1g.10gb", 3, 1))


# --- MigIndex.plan ---------------------------------------------------------------------------


def test_plan_never_touches_a_gpu_with_an_instance_in_use() -> None:
    busy = mig_node("busy", layouts={0: ["1g.10gb@0:running"]})
    index = MigIndex([busy])
    assert index.plan([MigRequest("j", "3g.40gb")]) == []
    assert index.layout("busy", 0) == (MigInstance("1g.10gb", 0, 1, "running"),)


def test_plan_places_3g_at_start_4_and_explains_itself() -> None:
    index = MigIndex(
        [
            mig_node(
                "h100-02", 4, layouts={0: ["7g.80gb@0:x"], 1: ["7g.80gb@0:y"], 2: ["7g.80gb@0:z"]}
            )
        ]
    )
    requests = [
        MigRequest("a", "3g.40gb", kind="agent"),
        MigRequest("b", "2g.20gb", kind="agent"),
        MigRequest("c", "1g.10gb", kind="agent"),
    ]
    [relayout] = index.plan(requests)
    assert (relayout.node, relayout.gpu) == ("h100-02", 3)
    assert relayout.instances[0] == MigInstance("3g.40gb", 4, 4)
    assert validate_layout("H100-80GB", relayout.instances) == []
    assert relayout.message == (
        "GPU 3 on node h100-02 re-laid out as 3g.40gb+2g.20gb+1g.10gb+1g.10gb "
        "for 3 pending agent jobs"
    )
    for request in requests:
        assert index.planned_for(request.job_id) == ("h100-02", 3)
        assert index.take(request.profile, None, None, request.job_id) is not None


def test_plan_keeps_an_idle_layout_that_already_serves_the_requests() -> None:
    index = MigIndex([mig_node("n", 2, layouts={1: ["3g.40gb@4", "3g.40gb@0"]})])
    assert index.plan([MigRequest("j", "3g.40gb")]) == []
    assert index.planned_for("j") == ("n", 1)


def test_plan_uses_free_instances_on_busy_gpus_before_relaying_out() -> None:
    index = MigIndex([mig_node("n", 2, layouts={0: ["1g.10gb@0:x", "1g.10gb@1"]})])
    assert index.plan([MigRequest("j", "1g.10gb")]) == []
    # The free instance is claimed for j: a take for another job leaves it alone.
    assert index.planned_for("j") == ("n", 0)


def test_plan_lays_out_a_blank_gpu_before_destroying_an_idle_layout() -> None:
    index = MigIndex([mig_node("n", 2, layouts={0: ["1g.10gb@0"]})])
    [relayout] = index.plan([MigRequest("j", "7g.80gb")])
    assert relayout.gpu == 1
    assert index.layout("n", 0) == (MigInstance("1g.10gb", 0, 1),)


def test_plan_serves_higher_priority_classes_first() -> None:
    # One GPU: seven low-priority 1g jobs or one high-priority 7g job.
    requests = [MigRequest("big", "7g.80gb", priority=1000)] + [
        MigRequest(f"small{i}", "1g.10gb", priority=10) for i in range(7)
    ]
    index = MigIndex([mig_node("n")])
    [relayout] = index.plan(requests)
    assert [i.profile for i in relayout.instances] == ["7g.80gb"]
    assert relayout.message.endswith("for 1 pending job")


def test_plan_serves_the_most_requests_within_a_priority_class() -> None:
    requests = [MigRequest("big", "7g.80gb")] + [
        MigRequest(f"small{i}", "1g.10gb") for i in range(7)
    ]
    index = MigIndex([mig_node("n")])
    [relayout] = index.plan(requests)
    assert [i.profile for i in relayout.instances] == ["1g.10gb"] * 7
    assert index.planned_for("big") is None


def test_plan_skips_requests_no_gpu_can_serve() -> None:
    index = MigIndex([mig_node("n", pool="inference")])
    requests = [
        MigRequest("wrong-pool", "1g.10gb", pool="training"),
        MigRequest("wrong-model", "1g.10gb", gpu_model="A30-24GB"),
        MigRequest("unknown-profile", "5g.50gb"),
        MigRequest("bad-name", "lots"),
    ]
    assert index.plan(requests) == []


def test_plan_packs_small_requests_together_to_keep_a_gpu_whole() -> None:
    # Both idle GPUs hold a 1g already; keeping both layouts would leave no room for the 7g.
    layout = ["2g.20gb@4", "2g.20gb@2", "2g.20gb@0", "1g.10gb@6"]
    index = MigIndex([mig_node("n", 2, layouts={0: layout, 1: layout})])
    requests = [MigRequest("a", "1g.10gb"), MigRequest("b", "1g.10gb"), MigRequest("c", "7g.80gb")]
    relayouts = index.plan(requests)
    assert {index.planned_for(r.job_id) for r in requests} == {("n", 0), ("n", 1)}
    assert index.planned_for("a") == index.planned_for("b") != index.planned_for("c")
    assert len(relayouts) == 2
    for request in requests:
        assert index.take(request.profile, None, None, request.job_id) is not None


def test_plan_repacks_largest_first_when_small_first_leaves_no_room() -> None:
    # Small first would put three 2g on one GPU; 2g+2g+3g twice and a 7g serve all.
    index = MigIndex([mig_node("n", 3)])
    profiles = ["2g.20gb"] * 4 + ["3g.40gb"] * 2 + ["7g.80gb"]
    requests = [MigRequest(f"j{i}", p) for i, p in enumerate(profiles)]
    relayouts = index.plan(requests)
    assert sorted(sorted(i.profile for i in r.instances) for r in relayouts) == [
        ["2g.20gb", "2g.20gb", "3g.40gb"],
        ["2g.20gb", "2g.20gb", "3g.40gb"],
        ["7g.80gb"],
    ]
    assert all(index.planned_for(r.job_id) is not None for r in requests)


def test_plan_moves_a_planned_set_onto_a_gpu_whose_layout_already_holds_it() -> None:
    # GPU 0 is blank, GPU 1 already has 3g+3g: the two 3g jobs need no relayout at all.
    index = MigIndex([mig_node("n", 2, layouts={1: ["3g.40gb@4", "3g.40gb@0"]})])
    requests = [MigRequest("a", "3g.40gb"), MigRequest("b", "3g.40gb")]
    assert index.plan(requests) == []
    assert index.planned_for("a") == index.planned_for("b") == ("n", 1)
    assert index.relayout_for("a") is None


def test_take_follows_the_plan_and_can_skip_layouts_not_yet_applied() -> None:
    index = MigIndex([mig_node("n", 2, layouts={0: ["7g.80gb@0:x"]})])
    [relayout] = index.plan([MigRequest("j", "3g.40gb")])
    assert index.relayout_for("j") == relayout
    assert index.take("3g.40gb", None, None, "j", include_relaid=False) is None
    assert index.take("3g.40gb", None, None, "j") == ("n", MigSlot(1, "3g.40gb", 4, 4))


def test_take_prefers_the_gpu_planned_for_the_job() -> None:
    # GPU 1 is busy with a free 1g (take's usual first choice); the plan meant GPU 0 for j.
    index = MigIndex(
        [mig_node("n", 2, layouts={0: ["3g.40gb@4"], 1: ["3g.40gb@4:x", "3g.40gb@0"]})]
    )
    index.plan([MigRequest("other", "3g.40gb"), MigRequest("j", "3g.40gb")])
    planned = index.planned_for("j")
    assert planned is not None
    taken = index.take("3g.40gb", None, None, "j")
    assert taken is not None and (taken[0], taken[1].gpu) == planned


def test_a_cluster_override_table_drives_the_index_and_the_planner() -> None:
    # The site's nodes report 1g.11gb and 7g.79gb; the override says so, names and all.
    node = Node("site-01", "Site-H100", 1, mig=True)
    index = MigIndex([node], overrides={"H100-80GB": custom_table()})
    [relayout] = index.plan([MigRequest("j", "7g.80gb")])
    assert relayout.instances == (MigInstance("7g.79gb", 0, 8),)
    assert index.take("7g.80gb", None, None, "j") == ("site-01", MigSlot(0, "7g.79gb", 0, 8))
    assert validate_layout("Site-H100", relayout.instances, {"x": custom_table()}) == []
    assert gpu_fraction("Site-H100", "1g.11gb", {"x": custom_table()}) == pytest.approx(1 / 7)


# --- the index's bookkeeping under random operation sequences --------------------------------

PROFILES = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "7g.79gb", "2g.12gb"]
SAME = {"7g.79gb": "7g.80gb"}  # two spellings of one H100 profile


@settings(max_examples=200, deadline=None)
@given(
    gpus=st.integers(1, 2),  # few GPUs: plans and takes compete for the same ones
    operations=st.lists(
        st.tuples(st.sampled_from(["take", "release", "plan"]), st.sampled_from(PROFILES)),
        max_size=40,
    ),
)
def test_take_release_and_plan_keep_the_index_consistent(
    gpus: int, operations: list[tuple[str, str]]
) -> None:
    index = MigIndex([mig_node("a", gpus, pool="p"), mig_node("b", 1, model="A30-24GB")])
    held: dict[str, tuple[str, MigSlot]] = {}
    for step, (operation, profile) in enumerate(operations):
        before = {
            (n, g): index.layout(n, g) for n, g in [("b", 0)] + [("a", g) for g in range(gpus)]
        }
        if operation == "take":
            taken = index.take(profile, None, None, f"j{step}")
            if taken is not None:
                held[f"j{step}"] = taken
        elif operation == "release" and held:
            node, slot = held.pop(sorted(held)[0])
            index.release(node, slot)
        elif operation == "plan":
            relayouts = index.plan([MigRequest(f"p{step}", profile)])
            for relayout in relayouts:
                assert all(i.job_id is None for i in before[(relayout.node, relayout.gpu)])
        layouts = {key: index.layout(*key) for key in before}
        for (node, gpu), layout in layouts.items():
            assert validate_layout("A30-24GB" if node == "b" else "H100-80GB", layout) == []
            if any(i.job_id for i in before[(node, gpu)]):  # a GPU in use keeps its layout
                assert [(i.profile, i.start) for i in layout] == [
                    (i.profile, i.start) for i in before[(node, gpu)]
                ]
        # Every held slot is held by exactly its job, and nothing else is held.
        holders = {
            i.job_id: (node, gpu, i.start)
            for (node, gpu), layout in layouts.items()
            for i in layout
            if i.job_id
        }
        assert holders == {job: (node, s.gpu, s.start) for job, (node, s) in held.items()}
        for name in PROFILES:
            free = [
                node
                for (node, _), layout in layouts.items()
                for i in layout
                if i.job_id is None and SAME.get(i.profile, i.profile) == SAME.get(name, name)
            ]
            assert index.free_count(name, None, None) == len(free)
            assert index.free_count(name, "H100-80GB", "p") == free.count("a")


def test_the_repack_ignores_existing_layouts_to_find_room() -> None:
    # Keeping GPU 0's 3g+3g strands a slice; 3g+2g+2g and 3g+2g+1g+1g serve all seven.
    model = "A100-SXM4-40GB"
    index = MigIndex(
        [mig_node("n", 2, model=model, layouts={0: ["3g.20gb@4", "3g.20gb@0"], 1: ["7g.40gb@0"]})]
    )
    profiles = ["1g.5gb"] * 2 + ["2g.10gb"] * 3 + ["3g.20gb"] * 2
    requests = [MigRequest(f"j{i}", p) for i, p in enumerate(profiles)]
    relayouts = index.plan(requests)
    assert sorted(sorted(i.profile for i in r.instances) for r in relayouts) == [
        ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"],
        ["2g.10gb", "2g.10gb", "3g.20gb"],
    ]
    assert all(index.take(r.profile, None, None, r.job_id) for r in requests)
