"""A job whose node stops answering (a network partition, a hung or powered-off machine) and
is not deleted. The node lifecycle controller marks the node's conditions Unknown, taints it
node.kubernetes.io/unreachable (NoSchedule and NoExecute) and its pods not Ready; every pod
tolerates the NoExecute taint for 300 s (the DefaultTolerationSeconds admission plugin), then
the taint eviction controller deletes it. No kubelet confirms that deletion: the pod stays
Terminating, phase Running, until the node comes back or is deleted (PodGC), and Volcano,
which takes the deletionTimestamp for a deleted pod, stays Restarting behind it. The backend
reports NODE_FAILURE, as for a deleted node (test_k8s_node_loss.py), and deletes the
workload; a node that is unreachable for less than the toleration ends nothing."""

from __future__ import annotations

import pytest
from conftest import FakeClock, make_backend, request
from k8s_fakeapi import ApiError as NotFound
from k8s_fakeapi import FakeApiServer
from k8s_sim import Sim

from queue_service.backends.base import RemoteState as R
from queue_service.backends.kubernetes.backend import KubernetesBackend

WORKLOADS = ["volcano", "indexed"]
TOLERATION_S = 300  # --default-unreachable-toleration-seconds


def _deleted(sim: Sim, eid: str) -> bool:
    try:
        _, obj = sim.workload(eid)
    except NotFound:
        return True
    return bool(obj["metadata"].get("deletionTimestamp"))


def _running_gang(
    api: FakeApiServer, clock: FakeClock, sim: Sim, workload: str
) -> tuple[KubernetesBackend, str]:
    b = make_backend(api, clock, workload=workload)
    eid = b.submit(request(nodes=2)).external_id  # on h100-01 and h100-02
    sim.run(eid)
    return b, eid


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_gang_whose_pod_is_evicted_from_an_unreachable_node_is_a_node_failure(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    b, eid = _running_gang(api, clock, sim, workload)
    sim.node_unreachable("h100-02")
    clock.now += TOLERATION_S
    (evicted,) = sim.taint_eviction()
    # What the cluster shows from now on, for as long as the node stays away:
    assert evicted["metadata"]["deletionTimestamp"]
    assert evicted["status"]["phase"] == "Running"  # Terminating: no kubelet confirms
    b.nodes()  # the sync's inventory, just before its poll

    status = b.poll([eid])[eid]

    assert (status.state, status.native_state) == (R.NODE_FAILURE, "DeletionByTaintManager")
    assert "its node h100-02 is unreachable and the pod is being deleted" in status.reason
    assert "Taint manager: deleting due to NoExecute taint" in status.reason
    assert _deleted(sim, eid)  # its pod on h100-01 stops; the service places a new attempt
    assert [p["spec"]["nodeName"] for p in sim.pods(eid)] == ["h100-02"]


def test_a_volcano_gang_held_restarting_by_a_pod_stuck_terminating_is_a_node_failure(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b, eid = _running_gang(api, clock, sim, "volcano")
    sim.node_unreachable("h100-02")
    clock.now += TOLERATION_S
    sim.taint_eviction()
    sim.volcano_sees_deletions(eid)  # PodEvicted -> RestartJob, waiting for the terminating pod
    _, vcjob = sim.workload(eid)
    assert (vcjob["status"]["state"]["phase"], vcjob["status"]["terminating"]) == ("Restarting", 1)
    b.nodes()

    status = b.poll([eid])[eid]

    assert status.state == R.NODE_FAILURE, status  # not QUEUED "restarting in place" for ever
    assert "h100-02 is unreachable" in status.reason
    assert _deleted(sim, eid)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_node_unreachable_for_less_than_the_toleration_ends_nothing(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    b, eid = _running_gang(api, clock, sim, workload)
    sim.node_unreachable("h100-02")
    clock.now += TOLERATION_S - 1
    assert sim.taint_eviction() == []
    b.nodes()
    assert b.poll([eid])[eid].state == R.RUNNING  # its pods are not Ready, and not deleted

    sim.node_reachable("h100-02")
    clock.now += 60
    assert sim.taint_eviction() == []
    b.nodes()
    assert b.poll([eid])[eid].state == R.RUNNING
    assert not _deleted(sim, eid)


def test_a_stop_does_not_wait_for_a_pod_that_its_unreachable_node_cannot_confirm(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """A pod whose node is gone is not waited for; nor is one being deleted where no kubelet
    answers: the stop would stay 'stopping' until the node came back."""
    b, eid = _running_gang(api, clock, sim, "indexed")
    sim.node_unreachable("h100-02")
    b.nodes()

    assert b.cancel(eid, grace_s=30)
    assert [p["spec"]["nodeName"] for p in sim.pods(eid)] == ["h100-02"]  # terminating
    status = b.poll([eid])[eid]

    assert status.state == R.CANCELLED, status  # not RUNNING "stopping: 1 pod not stopped yet"


def test_the_unreachable_node_is_down_in_the_inventory(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = make_backend(api, clock, workload="indexed")
    sim.node_unreachable("h100-02")
    states = {n.name: (n.state, n.reason) for n in b.nodes()}
    assert states["h100-02"] == ("down", "Kubelet stopped posting node status.")
    assert states["h100-01"] == ("up", "")
