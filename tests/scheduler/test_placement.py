"""Placement: best fit, gangs all-or-nothing on one pool, pools, models and node states."""

from __future__ import annotations

import pytest

from scheduler.types import Node, Policy

from .builders import A100, H100, decide, gpus_of, job, nodes, running, snap, started, team, waits

NO_QUOTA = Policy(quotas=False)


def test_single_gpu_job_goes_to_the_fullest_node_that_fits() -> None:
    busy = [running("r1", {"n2": range(6)}), running("r2", {"n3": range(3)})]
    d = decide(snap(nodes(3), [], [job("x", gpus=2)], busy), NO_QUOTA)
    assert gpus_of(started(d)["x"]) == {"n2": (6, 7)}


def test_gang_starts_all_or_nothing() -> None:
    busy = [running("r1", {"n1": range(4)})]
    d = decide(snap(nodes(2), [], [job("gang", gpus=8, nodes=2)], busy), NO_QUOTA)
    assert not d.starts
    assert waits(d)["gang"].reason.code == "no_capacity"
    assert waits(d)["gang"].reason.message == "needs 2 nodes x 8 free GPU; the best now is 1 node"


def test_gang_gets_the_same_gpus_on_distinct_nodes() -> None:
    busy = [running("r1", {"n1": range(5)})]
    d = decide(snap(nodes(4), [], [job("gang", gpus=4, nodes=3)], busy), NO_QUOTA)
    alloc = gpus_of(started(d)["gang"])
    assert len(alloc) == 3 and all(len(g) == 4 for g in alloc.values())
    assert "n1" not in alloc  # only 3 free there


def test_eight_gpu_jobs_take_whole_nodes_and_leave_partial_nodes_to_small_jobs() -> None:
    busy = [running("r1", {"n1": [0]})]
    d = decide(
        snap(nodes(2), [], [job("big", gpus=8, submit=1), job("small", gpus=1, submit=2)], busy),
        NO_QUOTA,
    )
    assert gpus_of(started(d)["big"]) == {"n2": tuple(range(8))}
    assert gpus_of(started(d)["small"]) == {"n1": (1,)}


def test_job_with_a_pool_runs_only_in_its_pool() -> None:
    cluster = nodes(1, pool="inference", prefix="inf") + nodes(1, pool="training", prefix="tr")
    d = decide(
        snap(cluster, [], [job("t", gpus=2, pool="training"), job("i", gpus=2, pool="inference")]),
        NO_QUOTA,
    )
    assert set(gpus_of(started(d)["t"])) == {"tr1"}
    assert set(gpus_of(started(d)["i"])) == {"inf1"}


def test_gang_stays_within_one_pool() -> None:
    cluster = nodes(1, pool="p1", prefix="a") + nodes(1, pool="p2", prefix="b")
    d = decide(snap(cluster, [], [job("gang", gpus=8, nodes=2)]), NO_QUOTA)
    assert not d.starts
    assert waits(d)["gang"].reason.code == "unsatisfiable"


@pytest.mark.parametrize("state", ["drain", "down"])
def test_drained_and_down_nodes_take_no_new_work(state: str) -> None:
    cluster = (Node("n1", A100, 8, state=state),)
    d = decide(snap(cluster, [], [job("x")]), NO_QUOTA)
    assert not d.starts


@pytest.mark.parametrize(("model", "node"), [(A100, "a1"), (H100, "h1")])
def test_model_constraint_is_respected(model: str, node: str) -> None:
    cluster = nodes(1, model=A100, prefix="a") + nodes(1, model=H100, prefix="h")
    d = decide(snap(cluster, [], [job("x", model=model)]), NO_QUOTA)
    assert set(gpus_of(started(d)["x"])) == {node} and started(d)["x"].gpu_model == model


def test_a_shape_no_node_can_ever_hold_is_reported_unsatisfiable() -> None:
    d = decide(snap(nodes(2, gpus=4), [team("a", 8)], [job("x", gpus=8)]))
    reason = waits(d)["x"].reason
    assert reason.code == "unsatisfiable" and dict(reason.details)["max_nodes"] == 0
    assert waits(d)["x"].estimated_start is None


def test_cpu_only_job_needs_no_gpu() -> None:
    busy = [running("r1", {"n1": range(8)})]
    d = decide(snap(nodes(1), [], [job("cpu", gpus=0)], busy), NO_QUOTA)
    assert gpus_of(started(d)["cpu"]) == {"n1": ()}


def test_a_failed_shape_is_not_retried_for_equivalent_jobs() -> None:
    busy = [running("r1", {"n1": range(7)})]
    pending = [job(f"g{i}", gpus=2, submit=i) for i in range(50)]
    d = decide(snap(nodes(1), [team("a", 8)], pending, busy))
    assert dict(d.stats)["groups_failed"] == 1
    assert len(d.waits) == 50


def test_a_job_pinned_to_a_cluster_runs_only_there() -> None:
    cluster = nodes(1, prefix="a", cluster="east") + nodes(1, prefix="b", cluster="west")
    busy = [running("r1", {"a1": range(6)})]  # best fit alone would pick a1
    d = decide(snap(cluster, [], [job("x", gpus=2, cluster="west")], busy), NO_QUOTA)
    assert set(gpus_of(started(d)["x"])) == {"b1"}


def test_a_gang_never_spans_clusters() -> None:
    cluster = nodes(1, prefix="a", cluster="east") + nodes(1, prefix="b", cluster="west")
    d = decide(snap(cluster, [], [job("gang", gpus=8, nodes=2)]), NO_QUOTA)
    assert not d.starts
    assert waits(d)["gang"].reason.code == "unsatisfiable"


def test_a_mig_job_pinned_to_a_cluster_gets_a_slice_there() -> None:
    from scheduler.types import MigInstance

    from .builders import mig_node

    slices = [[MigInstance("1g.10gb", 0, 1)]]
    cluster = (
        mig_node("m-east", slices, cluster="east"),
        mig_node("m-west", slices, cluster="west"),
    )
    d = decide(snap(cluster, [], [job("agent", mig="1g.10gb", cluster="west")]), NO_QUOTA)
    assert started(d)["agent"].placement.allocs[0].node == "m-west"
