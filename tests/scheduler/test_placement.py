"""Placement: best fit, gangs all-or-nothing on one pool, pools, models and node states."""

from __future__ import annotations

import pytest

from scheduler.types import Node, Policy

from .builders import (
    A100,
    H100,
    NOW,
    decide,
    gpus_of,
    job,
    nodes,
    running,
    snap,
    started,
    team,
    waits,
)

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
    assert waits(d)["gang"].reason.message == "needs 2 nodes x 8 free GPUs; the best now is 1 node"


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


# Single-node jobs go where they keep no node busy past its running jobs' time limits, so that
# nodes empty whole for gangs (capacity.fit_by_end). NOW + limit is when a job would end.


def test_a_job_goes_where_it_ends_before_the_jobs_already_there_rather_than_best_fit() -> None:
    busy = [
        running("soon", {"n1": range(7)}, started=NOW, limit=600.0),  # n1 empties at +600
        running("late", {"n2": range(4)}, started=NOW, limit=20_000.0),
    ]
    s = snap(nodes(2), [], [job("x", limit=3600.0)], busy)
    assert gpus_of(started(decide(s, NO_QUOTA))["x"]) == {"n2": (4,)}
    # Plain best fit, as the baselines place, would have kept n1 busy until +3600.
    best_fit_only = Policy(quotas=False, pack_by_end=False)
    assert gpus_of(started(decide(s, best_fit_only))["x"]) == {"n1": (7,)}


def test_among_nodes_it_outlasts_a_job_goes_where_it_outlasts_the_least() -> None:
    busy = [
        running("soon", {"n1": range(7)}, started=NOW, limit=600.0),
        running("later", {"n2": range(4)}, started=NOW, limit=3000.0),
    ]
    d = decide(snap(nodes(2), [], [job("x", limit=3600.0)], busy), NO_QUOTA)
    assert gpus_of(started(d)["x"]) == {"n2": (4,)}


def test_an_idle_node_is_opened_only_when_no_busy_node_fits() -> None:
    busy = [running("full", {"n1": range(8)}), running("most", {"n3": range(7)}, limit=600.0)]
    d = decide(
        snap(
            nodes(3), [], [job("one", limit=7200.0, submit=1), job("two", gpus=2, submit=2)], busy
        ),
        NO_QUOTA,
    )
    assert gpus_of(started(d)["one"]) == {"n3": (7,)}  # outlasts "most", but n2 stays whole
    assert gpus_of(started(d)["two"]) == {"n2": (0, 1)}


def test_a_job_without_a_time_limit_joins_jobs_without_one() -> None:
    busy = [
        running("bounded", {"n1": range(7)}, limit=3600.0),
        running("unbounded", {"n2": range(6)}, limit=None),
    ]
    d = decide(snap(nodes(2), [], [job("x", limit=None)], busy), NO_QUOTA)
    assert gpus_of(started(d)["x"]) == {"n2": (6,)}


def test_a_job_started_in_the_same_cycle_counts_for_where_the_next_one_goes() -> None:
    busy = [
        running("x1", {"n1": range(4)}, started=NOW, limit=1000.0),
        running("y1", {"n2": range(7)}, started=NOW, limit=5000.0),
    ]
    pending = [job("a", gpus=2, limit=40_000.0, submit=1), job("b", limit=20_000.0, submit=2)]
    d = decide(snap(nodes(2), [], pending, busy), NO_QUOTA)
    assert set(gpus_of(started(d)["a"])) == {"n1"}  # n2 has one GPU free
    # n1 now runs until +40,000 because of "a": "b" ends before that there, while on n2 it
    # would outlast y1 by 15,000 s.
    assert set(gpus_of(started(d)["b"])) == {"n1"}


def test_a_gang_started_earlier_in_the_cycle_counts_for_where_a_small_job_goes() -> None:
    busy = [running("short", {"n3": range(6)}, started=NOW, limit=600.0)]
    pending = [
        job("gang", gpus=4, nodes=2, limit=36_000.0, submit=1),
        job("x", limit=3600.0, submit=2),
    ]
    d = decide(snap(nodes(3), [], pending, busy), NO_QUOTA)
    assert set(gpus_of(started(d)["gang"])) == {"n1", "n2"}
    # The gang keeps n1 and n2 busy until +36,000: "x" ends well before that there, and
    # would keep n3 busy 3,000 s past "short".
    assert set(gpus_of(started(d)["x"])) <= {"n1", "n2"}
