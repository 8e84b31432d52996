"""A job whose node is deleted after dispatch (a failed machine its provider cleans up, a
scale-down, `kubectl delete node`). No kubelet will run or stop its pods there; PodGC marks
them Failed (DisruptionTarget DeletionByPodGC) and deletes them some 40 s later; Volcano
takes that deletion for an eviction and restarts the gang in place, pinned to the same
nodes, where it waits for ever. The backend reports NODE_FAILURE, as Slurm's NODE_FAIL (the
service requeues it per the job's retry policy), and deletes the workload."""

from __future__ import annotations

import pytest
from conftest import FakeClock, make_backend, request
from k8s_fakeapi import ApiError as NotFound
from k8s_fakeapi import FakeApiServer, Fault
from k8s_sim import Sim

from queue_service.backends.base import RemoteState as R

WORKLOADS = ["volcano", "indexed"]


def _deleted(sim: Sim, eid: str) -> bool:
    try:
        _, obj = sim.workload(eid)
    except NotFound:
        return True
    return bool(obj["metadata"].get("deletionTimestamp"))


def _node_calls(api: FakeApiServer, since: int) -> list[str]:
    return [f"{c.method} {c.path}" for c in api.calls()[since:] if "/nodes" in c.path]


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_gang_running_on_a_deleted_node_is_a_node_failure_before_pod_gc_acts(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    b = make_backend(api, clock, workload=workload)
    eid = b.submit(request(nodes=2)).external_id
    sim.run(eid)
    sim.delete_node("h100-02")
    b.nodes()  # the sync's inventory, just before its poll

    before = len(api.calls())
    status = b.poll([eid])[eid]

    assert status.state == R.NODE_FAILURE, status
    assert "node h100-02 no longer exists" in status.reason
    assert _deleted(sim, eid)  # its other pod stops; the service places a new attempt
    # The node missing from the last inventory is looked for once (it may have joined since).
    assert _node_calls(api, before) == ["GET /api/v1/nodes/h100-02"]


def test_a_volcano_gang_restarted_in_place_does_not_wait_for_its_deleted_node_for_ever(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = make_backend(api, clock, workload="volcano")
    eid = b.submit(request(nodes=2)).external_id
    sim.run(eid)
    sim.evict(eid, index=1, cause="preemption")  # PodEvicted -> RestartJob: gang recreated
    sim.delete_node("h100-02")
    sim.unschedulable(eid, "pod_pending_node_gone")  # pinned to h100-01 and h100-02
    b.nodes()

    status = b.poll([eid])[eid]

    assert status.state == R.NODE_FAILURE, status  # not QUEUED "restarting in place"
    assert "h100-02, which no longer exists" in status.reason
    assert b.poll([eid])[eid].state == R.LOST  # deleted, gpuq's finalizer released


def test_a_pod_pinned_to_a_node_deleted_before_it_was_bound_is_a_node_failure(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = make_backend(api, clock, workload="indexed")
    eid = b.submit(request(kind="agent", gpus_per_node=1)).external_id  # pinned to h100-01
    sim.delete_node("h100-01")
    sim.unschedulable(eid, "pod_pending_node_gone")
    b.nodes()

    status = b.poll([eid])[eid]

    assert status.state == R.NODE_FAILURE, status  # not QUEUED Unschedulable for ever
    assert "waits for node h100-01, which no longer exists" in status.reason
    assert status.started is False  # it never ran


def test_a_pod_pod_gc_failed_is_a_node_failure_before_the_job_controller_fails_the_job(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """Between PodGC's status write and the Job controller's verdict (the pod waits there on
    the Job's tracking finalizer), the Job is still active with one pod Failed."""
    b = make_backend(api, clock, workload="indexed")
    eid = b.submit(request(nodes=2)).external_id
    sim.run(eid)
    sim.delete_node("h100-02")
    sim.pod_gc(delete=False)

    status = b.poll([eid])[eid]  # no inventory yet in this process: one Node list

    assert (status.state, status.native_state) == (R.NODE_FAILURE, "DeletionByPodGC"), status
    assert "PodGC: node no longer exists" in status.reason


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_poll_looks_for_no_node_while_every_node_is_in_the_last_inventory(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    b = make_backend(api, clock, workload=workload)
    eid = b.submit(request(nodes=2)).external_id
    sim.run(eid)
    b.nodes()

    before = len(api.calls())
    assert b.poll([eid])[eid].state == R.RUNNING
    assert _node_calls(api, before) == []


def test_a_node_that_joined_after_the_last_inventory_is_no_loss(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = make_backend(api, clock, workload="indexed")
    b.nodes()
    sim.node("h100-09")
    eid = b.submit(
        request(kind="agent", gpus_per_node=1, placement=(), nodes=1)
    ).external_id  # unpinned: kube-scheduler binds it, here to the new node
    sim.run(eid, nodes=["h100-09"])

    before = len(api.calls())
    assert b.poll([eid])[eid].state == R.RUNNING
    assert b.poll([eid])[eid].state == R.RUNNING
    assert _node_calls(api, before) == ["GET /api/v1/nodes/h100-09"]  # once, then known


def test_a_failed_look_for_a_node_leaves_the_poll_to_report_what_it_saw(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = make_backend(api, clock, workload="indexed")
    eid = b.submit(request(nodes=2)).external_id
    sim.run(eid)
    sim.delete_node("h100-02")
    b.nodes()
    api.inject(Fault("status", code=503, method="GET", path_contains="/nodes/", times=3))

    assert b.poll([eid])[eid].state == R.RUNNING  # 3 tries failed; the next poll looks again
    assert b.poll([eid])[eid].state == R.NODE_FAILURE
