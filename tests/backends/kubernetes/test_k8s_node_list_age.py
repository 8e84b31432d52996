"""Which nodes are unreachable (or not ready) is read from the last Node list, which the sync
takes just before its poll. A process that polls or stops jobs without such a list just
before (a stop's worker: one backend per cluster per process, listing nodes seldom) would
read the nodes as they were then: a pod being deleted on a node that has come back taken for
lost (the workload deleted as a node failure), one on a node that has become unreachable
waited for as long as the node stays away. A list older than a few seconds is not trusted for
the nodes pods being deleted are bound to: each is read again."""

from __future__ import annotations

import pytest
from conftest import FakeClock
from k8s_fakeapi import FakeApiServer, Fault
from k8s_sim import Sim
from test_k8s_node_loss import _node_calls
from test_k8s_node_unreachable import TOLERATION_S, WORKLOADS, _deleted, _running_gang

from queue_service.backends.base import RemoteState as R
from queue_service.backends.kubernetes.backend import KubernetesBackend


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_poll_long_after_the_last_node_list_sees_a_node_that_has_become_unreachable(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    b, eid = _running_gang(api, clock, sim, workload)
    b.nodes()  # its last list: every node Ready
    sim.node_unreachable("h100-02")
    clock.now += TOLERATION_S
    sim.taint_eviction()

    before = len(api.calls())
    status = b.poll([eid])[eid]  # no list since

    assert (status.state, status.native_state) == (R.NODE_FAILURE, "DeletionByTaintManager")
    assert _deleted(sim, eid)
    assert _node_calls(api, before) == ["GET /api/v1/nodes/h100-02"]


def _restarting_beside_a_node_that_came_back(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> tuple[KubernetesBackend, str]:
    """Volcano restarting a gang in place after a pod of it is deleted elsewhere (a drain of
    h100-01): the gang's pod on h100-02, a node that was unreachable at the backend's last
    list and has come back since, is being stopped by its kubelet."""
    api.store.pods_stop_at_once = False
    b, eid = _running_gang(api, clock, sim, "volcano")
    sim.node_unreachable("h100-02")
    b.nodes()  # its last list: h100-02 unreachable
    sim.node_reachable("h100-02")
    clock.now += 600
    drained = next(p for p in sim.pods(eid) if p["spec"]["nodeName"] == "h100-01")
    pods = api.store.types[("", "v1", "pods")]
    meta = drained["metadata"]
    with api.store.lock:
        api.store.delete(pods, meta["namespace"], meta["name"], None, None)
    sim.volcano_sees_deletions(eid)  # RestartJob: the pod on h100-02 deleted too
    return b, eid


def test_a_poll_long_after_the_last_node_list_does_not_take_a_node_that_came_back_for_lost(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b, eid = _restarting_beside_a_node_that_came_back(api, sim, clock)

    status = b.poll([eid])[eid]

    assert status.state == R.QUEUED and "restarting in place (retry 1)" in status.reason, status
    assert not _deleted(sim, eid)


def test_a_node_that_cannot_be_read_again_is_not_taken_for_lost_on_an_old_list(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """Acting on a node's old state deletes the workload; waiting costs one poll."""
    b, eid = _restarting_beside_a_node_that_came_back(api, sim, clock)
    api.inject(Fault("status", code=503, method="GET", path_contains="/nodes/", times=3))

    assert b.poll([eid])[eid].state == R.QUEUED
    assert not _deleted(sim, eid)


def test_a_poll_just_after_the_inventory_reads_no_node_again(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """The sync's own poll trusts the list it has just taken, pods being deleted or not."""
    b, eid = _running_gang(api, clock, sim, "indexed")
    sim.node_unreachable("h100-02")
    clock.now += TOLERATION_S
    sim.taint_eviction()
    b.nodes()

    before = len(api.calls())
    assert b.poll([eid])[eid].state == R.NODE_FAILURE
    assert _node_calls(api, before) == []
