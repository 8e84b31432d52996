"""A log read lists the workload's pods, then asks for rank 0's log: the pod can go in between
(a stop, Volcano killing the gang to restart it, the workload deleted outright). The log's
404 is then the pod being gone, answered as a read begun after the deletion is: nothing yet
while the workload is there to make pods again (Volcano restarting its gang), `gone` once it
is being deleted (a stop's, no pod left) or gone. Against the fake API server, whose `race`
fault deletes the pod just before the log GET is served."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
from conftest import FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer, Fault
from k8s_sim import Sim

from queue_service.backends.kubernetes.backend import rank0_pod


def volcano_kills_the_gang(sim: Sim, eid: str) -> None:
    """RestartJob: Volcano deletes every pod of the gang; its new ones are not made yet."""
    sim._remove_pods(eid)


def stopped(sim: Sim, eid: str) -> None:
    """gpuq's stop (Foreground): the pods go, the workload stays, held by gpuq's finalizer
    until a poll reports the end."""
    t, obj = sim.workload(eid)
    with sim.store.lock:
        sim.store.delete(t, obj["metadata"]["namespace"], obj["metadata"]["name"], "Foreground", 0)


def deleted_outright(sim: Sim, eid: str) -> None:
    """The workload and its pods gone (its end reported, the finalizer released, deleted)."""
    t, obj = sim.workload(eid)
    meta = obj["metadata"]
    with sim.store.lock:
        held = copy.deepcopy(sim.store.get(t, meta["namespace"], meta["name"]))
        held["metadata"]["finalizers"] = []
        sim.store.replace(t, held, spec_changed=False)
        sim.store.delete(t, meta["namespace"], meta["name"], "Background", None)


# (how the pod goes, the workload's kind, the answer: data, eof, gone)
CASES = [
    (volcano_kills_the_gang, "volcano", (b"", False, False)),
    (stopped, "indexed", (b"", True, True)),
    (stopped, "volcano", (b"", True, True)),
    (deleted_outright, "indexed", (b"", True, True)),
]


@pytest.mark.parametrize("finished", [False, True], ids=["running", "finished"])
@pytest.mark.parametrize(
    ("delete", "workload", "answer"), CASES, ids=[f"{c[0].__name__}-{c[1]}" for c in CASES]
)
def test_a_pod_deleted_between_the_pod_list_and_the_log_read_is_read_as_gone(
    api: FakeApiServer,
    sim: Sim,
    clock: FakeClock,
    delete: Callable[[Sim, str], None],
    workload: str,
    answer: tuple[bytes, bool, bool],
    finished: bool,
) -> None:
    b = make_backend(api, clock, workload=workload, image_default="busybox")
    eid = b.submit(request(nodes=2)).external_id
    pod = rank0_pod(sim.run(eid))
    assert pod is not None
    sim.log(pod, b"epoch 1\n")
    first = b.logs(eid)
    assert first.data == b"epoch 1\n"
    sim.log(pod, b"epoch 2\n")
    if finished:  # its log is read from an answer that runs to its end (another path)
        sim.succeed(eid)

    api.inject(Fault("race", method="GET", path_contains="/log", action=lambda: delete(sim, eid)))
    chunk = b.logs(eid, offset=first.next_offset)

    assert (chunk.data, chunk.eof, chunk.gone) == answer
    assert chunk.next_offset == first.next_offset
    assert not api.faults[0].times  # the pod did go between the list and the log's GET
