"""A Kueue-managed Job that Kueue evicts (a preemption by a higher-priority workload, a
waitForPodsReady timeout, a ClusterQueue stopped): Kueue sets `spec.suspend: true`, and the Job
controller marks the Job Suspended and deletes its active pods. A pod on an unreachable node
stays Terminating (no kubelet confirms), but it is the suspension that deleted it: the job
waits for Kueue to admit it again (QUEUED), it did not lose a node, and the workload is left
for Kueue to resume."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from conftest import FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer, now_rfc3339
from k8s_sim import SHAPES, Sim, fill
from test_k8s_node_unreachable import _deleted
from test_k8s_status import CREATED, GRACE, NOW, _bound, _evicted_on, job, pod

from queue_service.backends.base import RemoteState as R
from queue_service.backends.kubernetes.status import observe

SUSPENDED = "suspended: waiting for admission by Kueue"


def _suspend(api: FakeApiServer, eid: str, suspend: bool) -> dict[str, Any]:
    store = api.store
    namespace, _, name = eid.split("/")
    t = store.types[("batch", "v1", "jobs")]
    with store.lock:
        obj = copy.deepcopy(store.get(t, namespace, name))
        obj["spec"]["suspend"] = suspend
        return copy.deepcopy(store.replace(t, obj))


def kueue_admits(api: FakeApiServer, eid: str) -> None:
    _suspend(api, eid, False)


def kueue_evicts(api: FakeApiServer, sim: Sim, eid: str) -> None:
    """Kueue suspending the Job; the Job controller marking it Suspended and deleting its
    active pods with their own grace."""
    store = api.store
    obj = _suspend(api, eid, True)
    obj["status"] = fill(SHAPES["job_suspended"], time=now_rfc3339(store.clock()))
    pt = store.types[("", "v1", "pods")]
    with store.lock:
        store.replace(store.types[("batch", "v1", "jobs")], obj, spec_changed=False)
    for p in sim.pods(eid):
        with store.lock:
            store.delete(pt, p["metadata"]["namespace"], p["metadata"]["name"], None, None)


def test_a_job_kueue_suspends_while_its_pod_is_stuck_on_an_unreachable_node_waits_for_kueue(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = make_backend(api, clock, workload="indexed", kueue_queue="team-a")
    eid = b.submit(request(nodes=2)).external_id  # on h100-01 and h100-02
    kueue_admits(api, eid)
    sim.run(eid)
    sim.node_unreachable("h100-02")
    kueue_evicts(api, sim, eid)
    (stuck,) = sim.pods(eid)  # the pod on h100-01 went; no kubelet confirms the other
    assert (stuck["spec"]["nodeName"], bool(stuck["metadata"].get("deletionTimestamp"))) == (
        "h100-02",
        True,
    )
    b.nodes()

    status = b.poll([eid])[eid]

    assert (status.state, status.reason) == (R.QUEUED, SUSPENDED), status
    assert not _deleted(sim, eid)  # Kueue resumes it once it admits it again


def _deleted_on(node: str) -> dict[str, Any]:
    """A pod the Job controller deleted (no DisruptionTarget), not stopped yet."""
    p = _bound(pod("pod_running"), node)
    p["metadata"] = {**p["metadata"], "deletionTimestamp": CREATED}
    return p


SUSPENDED_WITH_A_POD_ON_A_LOST_NODE = [
    ("unreachable node", _deleted_on("h100-02"), {"unreachable_nodes": {"h100-02"}}),
    ("deleted node", _deleted_on("h100-02"), {"gone_nodes": {"h100-02"}}),
    ("not-ready node, taint manager", _evicted_on("h100-02"), {"not_ready_nodes": {"h100-02"}}),
]


@pytest.mark.parametrize(
    ("title", "on_node", "nodes"),
    SUSPENDED_WITH_A_POD_ON_A_LOST_NODE,
    ids=[s[0] for s in SUSPENDED_WITH_A_POD_ON_A_LOST_NODE],
)
def test_a_suspended_job_is_queued_for_kueue_whatever_node_its_last_pod_is_stuck_on(
    title: str, on_node: Any, nodes: Any
) -> None:
    """The suspension says why the pod is going: Kueue took the job back. A Job pinned to a
    node that no longer exists is a node failure once Kueue admits it again (its new pod waits
    for that node: test_k8s_node_loss.py)."""
    obj = job("job_suspended")
    obj["spec"]["suspend"] = True
    seen = observe("ns/job/j", "job", obj, [on_node], now=NOW, image_pull_grace_s=GRACE, **nodes)
    assert (seen.status.state, seen.status.reason, seen.stop) == (R.QUEUED, SUSPENDED, False)
