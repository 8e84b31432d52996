"""Every pending job gets an estimated start when one can be computed: from the capacity
groups (GPU model, pool, cluster) it may use, its team's quota allowing, with a job ahead
that is reserved charged to the group of its reservation. A job is never estimated to
start on GPUs of a pool, cluster or model it may not use, nor at the instant and on the
node promised to a reserved job ahead of it.
"""

from __future__ import annotations

import pytest

from scheduler.types import Node, Policy, Snapshot

from .builders import A100, H100, NOW, decide, job, nodes, running, snap, started, team, waits


def _pool_bound() -> Snapshot:
    # Both jobs need the whole 8-GPU node of pool `train` (busy until NOW+1000); the idle
    # `infer` node is not theirs. j1 is reserved it at NOW+1000 and runs up to 1000 s.
    ns = (Node("t1", A100, 8, pool="train"), Node("i1", A100, 8, pool="infer"))
    pending = [
        job("j1", gpus=8, pool="train", submit=NOW - 50, limit=1000),
        job("j2", gpus=8, pool="train", submit=NOW - 40, limit=1000),
    ]
    busy = [running("r", {"t1": range(8)}, started=NOW - 600, limit=1600)]
    return snap(ns, [team("a", 100, None)], pending, busy)


def _any_model_behind_reserved() -> Snapshot:
    # The A100 node frees at NOW+600; the two H100 nodes each have 4 GPUs busy until
    # NOW+5000. j1 (any model, 8 GPUs, 1 h) is reserved the A100 node at NOW+600; j2, the
    # same shape, starts at min(NOW+4200 after j1, NOW+5000 on an H100 node).
    ns = nodes(1, model=A100, prefix="a") + nodes(2, model=H100, prefix="h")
    pending = [
        job("j1", gpus=8, limit=3600, submit=NOW - 60),
        job("j2", gpus=8, limit=3600, submit=NOW - 50),
    ]
    busy = [
        running("r", {"a1": range(8)}, started=NOW - 600, limit=1200),
        running("h1r", {"h1": range(4)}, started=NOW - 600, limit=5600, model=H100),
        running("h2r", {"h2": range(4)}, started=NOW - 600, limit=5600, model=H100),
    ]
    return snap(ns, [team("a", 100, None)], pending, busy)


def _model_without_quota() -> Snapshot:
    # Team a has A100 quota only: the idle H100 node is not for it. j0 (A100) is reserved
    # the only A100 node at NOW+600 for an hour, so j1 (any model) starts at NOW+4200.
    ns = nodes(1, model=A100, prefix="a") + nodes(1, model=H100, prefix="h")
    teams = [team("a", 16, 0, model=A100), team("b", 8, 0, model=H100), team("c", 0, None)]
    pending = [
        job("j0", gpus=8, limit=3600, submit=NOW - 60, model=A100),
        job("j1", gpus=8, limit=3600, submit=NOW - 50),
    ]
    busy = [running("r", {"a1": range(8)}, team="c", started=NOW - 600, limit=1200)]
    return snap(ns, teams, pending, busy)


@pytest.mark.parametrize(
    ("build", "policy", "reserved", "reserved_at", "later", "later_at"),
    [
        pytest.param(_pool_bound, None, "j1", NOW + 1000, "j2", NOW + 2000, id="pool"),
        pytest.param(
            _any_model_behind_reserved, None, "j1", NOW + 600, "j2", NOW + 4200, id="any-model"
        ),
        pytest.param(
            _model_without_quota,
            Policy(preemption=False),
            "j0",
            NOW + 600,
            "j1",
            NOW + 4200,
            id="no-quota-model",
        ),
    ],
)
def test_a_job_behind_a_reservation_is_estimated_on_capacity_it_may_use(
    build: object,
    policy: Policy | None,
    reserved: str,
    reserved_at: float,
    later: str,
    later_at: float,
) -> None:
    assert callable(build)
    d = decide(build(), policy)
    w = waits(d)
    assert later not in started(d)
    assert w[reserved].reserved and w[reserved].estimated_start == reserved_at
    assert w[later].estimated_start == later_at
