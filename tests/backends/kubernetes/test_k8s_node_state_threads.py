"""The threads of a process share one backend (the sync, and in the embedded mode each stop
in a thread of its own, dispatch.send_stop_again). A node read again with a GET by a stop's
poll on an old Node list is not written over a list the sync took while that GET's answer
was on its way: the sync's poll would read a node that came back as still unreachable and
delete a gang restarting beside it."""

from __future__ import annotations

import threading
from typing import Any

from conftest import FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer
from k8s_sim import Sim
from lightkube.resources.core_v1 import Node
from test_k8s_node_unreachable import _deleted

from queue_service.backends.base import AllocatedNode
from queue_service.backends.base import RemoteState as R

OTHER_JOB = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"


def test_a_node_read_before_a_newer_node_list_is_not_written_over_it(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    api.store.pods_stop_at_once = False
    b = make_backend(api, clock, workload="volcano")
    gang = b.submit(request(nodes=2)).external_id  # on h100-01 and h100-02
    sim.run(gang)
    other = b.submit(
        request(job_id=OTHER_JOB, nodes=1, placement=(AllocatedNode(node="h100-02"),))
    ).external_id
    sim.run(other)

    sim.node_unreachable("h100-02")
    b.nodes()  # h100-02 unreachable
    assert b.cancel(other, grace_s=30)  # its pod stays terminating: nothing confirms there
    clock.now += 600  # the list is old now

    # A stop's poll (a thread of its own) reads h100-02 again; its answer (unreachable) is
    # on its way back while the node comes back and the sync lists the nodes.
    real_get = b.client.get
    answered, go_on = threading.Event(), threading.Event()
    stopper: list[threading.Thread] = []

    def get(resource: Any, name: str, **kw: Any) -> Any:
        obj = real_get(resource, name, **kw)
        if resource is Node and stopper and threading.current_thread() is stopper[0]:
            answered.set()
            go_on.wait(10)
        return obj

    b.client.get = get
    stopper.append(threading.Thread(target=lambda: b.poll([other]), daemon=True))
    stopper[0].start()
    assert answered.wait(10)

    sim.node_reachable("h100-02")  # the kubelet is back: it stops what was deleted there
    drained = next(p for p in sim.pods(gang) if p["spec"]["nodeName"] == "h100-01")
    pods = api.store.types[("", "v1", "pods")]
    meta = drained["metadata"]
    with api.store.lock:
        api.store.delete(pods, meta["namespace"], meta["name"], None, None)
    sim.volcano_sees_deletions(gang)  # RestartJob: the gang's pod on h100-02 deleted too

    sync = threading.Thread(target=b.nodes, daemon=True)  # the sync's inventory
    sync.start()
    sync.join(3)
    go_on.set()
    stopper[0].join(10)
    sync.join(10)

    status = b.poll([gang])[gang]  # the sync's poll, just after its nodes()

    assert status.state == R.QUEUED and "restarting in place" in status.reason, status
    assert not _deleted(sim, gang)
