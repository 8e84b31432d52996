"""Where reading finished logs from answers kept open, and taking a pod being deleted on an
unreachable node for a node failure, must stop: a gang that already succeeded, more
downloads than kept answers, and a backend closed during a read."""

from __future__ import annotations

import copy
import threading
from typing import Any

from conftest import FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer, now_rfc3339
from k8s_sim import Sim

from queue_service.backends.base import RemoteState as R
from queue_service.backends.kubernetes import KubernetesBackend
from queue_service.backends.kubernetes import backend as k8s

MIB = 1 << 20


def _agent(
    api: FakeApiServer, sim: Sim, clock: FakeClock, b: KubernetesBackend, i: int = 0
) -> tuple[str, Any]:
    job_id = f"3f2b8c1e-5d4a-4b7e-9c0f-1a2b3c4d5e{i:02d}"
    eid = b.submit(
        request(job_id=job_id, kind="agent", gpus_per_node=0, mig_profile="1g.10gb")
    ).external_id
    (pod,) = sim.run(eid)
    return eid, pod


# --- a pod being deleted on an unreachable node --------------------------------------------


def _volcano_completing(sim: Sim, eid: str, clock: FakeClock) -> None:
    """Volcano after the master's TaskCompleted -> CompleteJob (gpuq's policy): phase
    Completing, and killJob deletes, with their own grace, the pods that have not ended
    (PodRetainPhaseSoft keeps Succeeded and Failed ones); Completing turns into Completed only
    once no pod is terminating (state/completing.go)."""
    t, obj = sim.workload(eid)
    pt = sim._t(("", "v1", "pods"))
    for p in sim.pods(eid):
        if p["status"].get("phase") not in ("Succeeded", "Failed"):
            meta = p["metadata"]
            with sim.store.lock:
                sim.store.delete(pt, meta["namespace"], meta["name"], None, None)
    now = now_rfc3339(clock())
    status = copy.deepcopy(obj["status"])
    status["state"] = {"phase": "Completing", "lastTransitionTime": now}
    status["conditions"] = [
        *status.get("conditions", []),
        {"status": "Completing", "lastTransitionTime": now},
    ]
    status["running"], status["succeeded"] = 0, 1
    status["terminating"] = sum(1 for p in sim.pods(eid) if p["metadata"].get("deletionTimestamp"))
    sim._set_status(t, obj["metadata"]["namespace"], obj["metadata"]["name"], status)


def test_a_volcano_gang_whose_master_completed_is_no_node_failure_for_an_unreachable_worker(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    # Expected: the master (rank 0) ended with exit 0, and Volcano is Completing: it deleted
    # the worker. Its node being unreachable (a partition between the kubelet and the
    # control plane: no kubelet confirms the deletion, the pod stays terminating and Volcano
    # Completing) does not turn the run that succeeded into a node failure (which would
    # delete the workload and retry a run that had finished): SUCCEEDED, or RUNNING while
    # Completing.
    b = make_backend(api, clock, workload="volcano")
    eid = b.submit(request(nodes=2)).external_id  # master on h100-01, worker on h100-02
    master, worker = sim.run(eid)
    assert worker["spec"]["nodeName"] == "h100-02"
    sim.node_unreachable("h100-02")
    sim._pod_status(master, "pod_succeeded")
    _volcano_completing(sim, eid, clock)
    stuck = next(p for p in sim.pods(eid) if p["metadata"]["name"] == worker["metadata"]["name"])
    assert stuck["metadata"]["deletionTimestamp"] and stuck["status"]["phase"] == "Running"
    assert sim.workload(eid)[1]["status"]["state"]["phase"] == "Completing"
    b.nodes()  # the sync's inventory, just before its poll

    status = b.poll([eid])[eid]
    b.close()

    assert status.state != R.NODE_FAILURE, status


# --- finished logs read from kept answers ---------------------------------------------------


def test_nine_downloads_taking_turns_cost_no_more_than_the_resumed_reads_they_replaced(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    # Expected: a finished log downloads at about its length (docs/kubernetes.md: 1.00 x),
    # and in no case at more than the sinceTime + limitBytes reads (the walk, still used for
    # a running log). A backend keeps LOG_STREAMS_KEPT = 8 answers: were a ninth download to
    # push one out, each piece of each would open an answer to the log's end, which the
    # server writes into the socket buffers (megabytes) until the next keep closes it (9
    # logs of 2 MiB in 256 KiB pieces: 4.6 x sent, 8.0 x scanned, against 1.47 x and 4.9 x
    # for the walk). With every place taken, a read walks instead.
    b = make_backend(api, clock, workload="indexed")
    jobs = []
    for i in range(9):
        eid, pod = _agent(api, sim, clock, b, i)
        log = bytearray()
        t0, k = clock() - 10_000, 0
        while len(log) < 2 * MIB:
            line = f"{i} {k:06d} ".encode().ljust(4095, b".") + b"\n"
            sim.log(pod, line, at=t0 + k * 0.5)
            log += line
            k += 1
        jobs.append((eid, bytes(log)))

    def in_turns(backend: KubernetesBackend, piece: int) -> tuple[float, float]:
        sent, scanned = api.log_bytes_sent, api.log_bytes_scanned
        offsets = [0] * len(jobs)
        got = [bytearray() for _ in jobs]
        while any(o < len(log) for o, (_, log) in zip(offsets, jobs, strict=True)):
            for j, (eid, log) in enumerate(jobs):
                if offsets[j] < len(log):
                    chunk = backend.logs(eid, offset=offsets[j], limit=piece)
                    got[j] += chunk.data
                    offsets[j] = chunk.next_offset
        assert [bytes(g) for g in got] == [log for _, log in jobs]
        total = sum(len(log) for _, log in jobs)
        return (
            (api.log_bytes_sent - sent) / total,
            (api.log_bytes_scanned - scanned) / total,
        )

    walk = in_turns(b, 256 * 1024)  # the pods still run: resumed reads
    b.close()
    for eid, _ in jobs:
        sim.succeed(eid)
    b = make_backend(api, clock, workload="indexed")
    kept = in_turns(b, 256 * 1024)
    b.close()

    assert kept[0] <= walk[0] and kept[1] <= walk[1], (kept, walk)


def test_a_backend_closed_during_a_log_read_is_left_with_no_kept_answer_and_no_timer(
    api: FakeApiServer, sim: Sim, clock: FakeClock, monkeypatch: Any
) -> None:
    # Expected: once close() has returned (the registry closes a backend it replaced, while
    # calls may still be using it), the backend holds no kept answer and no timer thread,
    # even when a read under way finishes after it: its answer is closed, not kept, and no
    # reaper Timer keeps the closed backend alive for LOG_STREAM_IDLE_S.
    b = make_backend(api, clock, workload="indexed")
    eid, pod = _agent(api, sim, clock, b)
    for i in range(20_000):
        sim.log(pod, f"line {i:05d}\n".encode(), at=clock() - 500 + i * 0.01)
    sim.succeed(eid)
    first = b.logs(eid, offset=0, limit=1000)  # an answer kept open

    reading, closed = threading.Event(), threading.Event()
    real = k8s.StampedReader.read

    def read(self: k8s.StampedReader, skip: int, want: int) -> tuple[bytes, int]:
        reading.set()
        closed.wait(5)
        return real(self, skip, want)

    monkeypatch.setattr(k8s.StampedReader, "read", read)
    outcome: dict[str, Any] = {}

    def reader() -> None:
        try:
            outcome["chunk"] = b.logs(eid, offset=first.next_offset, limit=1000)
        except Exception as exc:  # a failed read is no leak
            outcome["error"] = exc

    t = threading.Thread(target=reader)
    t.start()
    assert reading.wait(5)
    b.close()  # another thread: the registry replacing this backend
    closed.set()
    t.join(10)

    kept, reaper = list(b._log_streams), b._log_reaper
    alive = reaper is not None and reaper.is_alive()
    for s in kept:  # not to leave them behind this test
        s.close()
    if reaper is not None:
        reaper.cancel()
    assert (len(kept), alive) == (0, False), sorted(outcome)
