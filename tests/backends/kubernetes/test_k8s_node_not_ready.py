"""A job whose node goes NotReady while its kubelet still reports (a hung container runtime,
PLEG not healthy, disk or memory pressure, a broken network plugin): the kubelet sets Ready
False, and the node lifecycle controller taints the node node.kubernetes.io/not-ready
(NoSchedule and NoExecute). Every pod tolerates the NoExecute taint for 300 s (the
DefaultTolerationSeconds admission plugin), then the taint eviction controller deletes it
(DisruptionTarget DeletionByTaintManager). A kubelet whose runtime hangs cannot stop it: the
pod stays Terminating, phase Running, and Volcano stays Restarting behind it. The backend
reports NODE_FAILURE, as for a pod the taint manager deleted from an unreachable node
(test_k8s_node_unreachable.py), and deletes the workload; a node NotReady for less than the
toleration ends nothing, and a pod deleted there for another reason is waited for: that
kubelet still confirms what it can stop."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from conftest import FakeClock, make_backend, request
from k8s_fakeapi import NOT_READY_TAINT, FakeApiServer, now_rfc3339
from k8s_sim import Sim
from test_k8s_node_unreachable import TOLERATION_S, WORKLOADS, _deleted, _running_gang
from test_k8s_status import CREATED, GRACE, NOW, _bound, _evicted_on, job, pod, vcjob

from queue_service.backends.base import RemoteState as R
from queue_service.backends.kubernetes import inventory
from queue_service.backends.kubernetes.status import observe

PLEG = "PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s"


def node_not_ready(api: FakeApiServer, name: str, message: str = PLEG) -> None:
    """The kubelet reporting its node NotReady (Ready False, saying why), and the node
    lifecycle controller's taints for it (the NoExecute one with timeAdded)."""
    store = api.store
    nt = store.types[("", "v1", "nodes")]
    now = now_rfc3339(store.clock())
    with store.lock:
        node = copy.deepcopy(store.get(nt, "", name))
        for cond in node["status"]["conditions"]:
            if cond["type"] == "Ready":
                cond.update(
                    status="False",
                    reason="KubeletNotReady",
                    message=message,
                    lastTransitionTime=now,
                )
        node["spec"]["taints"] = [
            *(node["spec"].get("taints") or []),
            {"key": NOT_READY_TAINT, "effect": "NoSchedule"},
            {"key": NOT_READY_TAINT, "effect": "NoExecute", "timeAdded": now},
        ]
        store.replace(nt, node)


def node_ready_again(api: FakeApiServer, name: str) -> None:
    store = api.store
    nt = store.types[("", "v1", "nodes")]
    with store.lock:
        node = copy.deepcopy(store.get(nt, "", name))
        for cond in node["status"]["conditions"]:
            if cond["type"] == "Ready":
                cond.update(status="True", reason="KubeletReady", message="kubelet is ready")
        node["spec"]["taints"] = [
            t for t in node["spec"].get("taints") or [] if t["key"] != NOT_READY_TAINT
        ]
        store.replace(nt, node)


# --- through the fake API server ------------------------------------------------------------


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_gang_whose_pod_the_taint_manager_deletes_from_a_not_ready_node_is_a_node_failure(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    api.store.pods_stop_at_once = False  # the kubelet there cannot stop it: its runtime hangs
    b, eid = _running_gang(api, clock, sim, workload)
    node_not_ready(api, "h100-02")
    clock.now += TOLERATION_S
    (evicted,) = sim.taint_eviction()
    assert evicted["metadata"]["deletionTimestamp"]
    assert evicted["status"]["phase"] == "Running"
    b.nodes()  # the sync's inventory, just before its poll

    status = b.poll([eid])[eid]

    assert (status.state, status.native_state) == (R.NODE_FAILURE, "DeletionByTaintManager")
    assert "its node h100-02 is not ready and the pod is being deleted" in status.reason
    assert "Taint manager: deleting due to NoExecute taint" in status.reason
    assert _deleted(sim, eid)


def test_a_volcano_gang_held_restarting_by_a_pod_deleted_from_a_not_ready_node_is_a_node_failure(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    api.store.pods_stop_at_once = False
    b, eid = _running_gang(api, clock, sim, "volcano")
    node_not_ready(api, "h100-02")
    clock.now += TOLERATION_S
    sim.taint_eviction()
    sim.volcano_sees_deletions(eid)  # PodEvicted -> RestartJob, waiting for the terminating pods
    b.nodes()

    status = b.poll([eid])[eid]

    assert status.state == R.NODE_FAILURE, status  # not QUEUED "restarting in place"
    assert "h100-02 is not ready" in status.reason
    assert _deleted(sim, eid)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_node_not_ready_for_less_than_the_toleration_ends_nothing(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    b, eid = _running_gang(api, clock, sim, workload)
    node_not_ready(api, "h100-02")
    clock.now += TOLERATION_S - 1
    assert sim.taint_eviction() == []
    b.nodes()
    assert b.poll([eid])[eid].state == R.RUNNING

    node_ready_again(api, "h100-02")
    clock.now += 60
    assert sim.taint_eviction() == []
    b.nodes()
    assert b.poll([eid])[eid].state == R.RUNNING
    assert not _deleted(sim, eid)


def test_a_stop_waits_for_a_pod_on_a_not_ready_node_that_the_taint_manager_has_not_deleted(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """Its kubelet still reports, and confirms the stop once the pod's containers stop."""
    api.store.pods_stop_at_once = False
    b = make_backend(api, clock, workload="indexed")
    eid = b.submit(request(nodes=2)).external_id
    sim.run(eid)
    node_not_ready(api, "h100-02")
    b.nodes()

    assert b.cancel(eid, grace_s=30)
    status = b.poll([eid])[eid]
    assert status.state == R.RUNNING and "2 pods not stopped yet" in status.reason, status

    sim.kubelet_confirms_stops()
    assert b.poll([eid])[eid].state == R.CANCELLED


# --- the pure mapping -------------------------------------------------------------------------


def _deleted_by_gpuq_on(node: str) -> dict[str, Any]:
    p = _bound(pod("pod_running"), node)
    p["metadata"] = {**p["metadata"], "deletionTimestamp": CREATED}
    return p


@pytest.mark.parametrize("node_state", ["unreachable_nodes", "not_ready_nodes"])
@pytest.mark.parametrize(
    ("kind", "obj"),
    [
        ("job", job("job_running")),
        ("vcjob", vcjob("vcjob_running")),
        ("vcjob", vcjob("vcjob_restarting", 1)),
    ],
    ids=["batch", "volcano", "volcano restarting"],
)
def test_a_pod_the_taint_manager_is_deleting_from_an_unreachable_or_not_ready_node_is_lost(
    kind: str, obj: Any, node_state: str
) -> None:
    seen = observe(
        f"ns/{kind}/j",
        kind,
        obj,
        [_evicted_on("h100-02")],
        now=NOW,
        image_pull_grace_s=GRACE,
        **{node_state: {"h100-02"}},
    )
    assert (seen.status.state, seen.stop) == (R.NODE_FAILURE, True), seen
    assert seen.status.native_state == "DeletionByTaintManager"


PODS_ON_A_NOT_READY_NODE = [
    ("running, within the toleration", job("job_running"), _bound(pod("pod_running"), "h100-02")),
    (
        "deleted by gpuq's stop",
        job("job_running", deletionTimestamp=CREATED),
        _deleted_by_gpuq_on("h100-02"),
    ),
]


@pytest.mark.parametrize(
    ("title", "obj", "on_node"),
    PODS_ON_A_NOT_READY_NODE,
    ids=[p[0] for p in PODS_ON_A_NOT_READY_NODE],
)
def test_a_pod_on_a_not_ready_node_that_the_taint_manager_is_not_deleting_is_no_loss(
    title: str, obj: Any, on_node: Any
) -> None:
    seen = observe(
        "ns/job/j",
        "job",
        obj,
        [on_node],
        now=NOW,
        image_pull_grace_s=GRACE,
        not_ready_nodes={"h100-02"},
    )
    assert (seen.status.state, seen.stop) == (R.RUNNING, False), seen


# --- which nodes are which ----------------------------------------------------------------------


def _node(ready: str, *taints: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "n"},
        "spec": {"taints": [{"key": k, "effect": "NoExecute"} for k in taints]},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


NODES = [
    ("ready", _node("True"), False, False),
    ("kubelet reports NotReady, tainted", _node("False", NOT_READY_TAINT), True, False),
    ("kubelet reports NotReady, not tainted yet", _node("False"), False, False),
    ("silent, tainted", _node("Unknown", "node.kubernetes.io/unreachable"), False, True),
    ("ready again, taint not removed yet", _node("True", NOT_READY_TAINT), False, False),
]


@pytest.mark.parametrize(
    ("title", "node", "is_not_ready", "is_unreachable"), NODES, ids=[n[0] for n in NODES]
)
def test_a_node_is_not_ready_when_the_lifecycle_controller_tainted_it_for_its_kubelets_report(
    title: str, node: Any, is_not_ready: bool, is_unreachable: bool
) -> None:
    assert (inventory.not_ready(node), inventory.unreachable(node)) == (
        is_not_ready,
        is_unreachable,
    )
