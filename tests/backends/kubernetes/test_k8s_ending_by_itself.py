"""A workload that is ending by itself (its Job failing, its Volcano gang completing) has
ended on its own: reported so before its controller has caught up, and not stopped by a
cancel."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from conftest import NAMESPACE, FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer, now_rfc3339
from k8s_sim import Sim

from queue_service.backends.base import RemoteState as R
from queue_service.backends.kubernetes.status import observe


def _pods_type(sim: Sim) -> Any:
    return sim._t(("", "v1", "pods"))


def test_cancel_of_a_volcano_gang_whose_master_already_succeeded_stops_nothing(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """Volcano `Completing` (the master exited 0, `TaskCompleted -> CompleteJob`; Volcano is
    deleting the worker) has succeeded on its own: cancel deletes nothing and returns False
    (base.py's contract), while the poll reports it RUNNING until the worker is gone."""
    b = make_backend(api, clock, workload="volcano", image_default="img:1")
    eid = b.submit(request(nodes=2)).external_id
    master, worker = sim.run(eid)
    api.store.pods_stop_at_once = False  # the worker's kubelet confirms its stop later
    sim._pod_status(master, "pod_succeeded")
    t, obj = sim.workload(eid)
    with sim.store.lock:
        sim.store.delete(_pods_type(sim), NAMESPACE, worker["metadata"]["name"], None, None)
    now = now_rfc3339(clock())
    status = copy.deepcopy(obj["status"])
    status["state"] = {"phase": "Completing", "lastTransitionTime": now}
    status["conditions"] = [
        *status.get("conditions", []),
        {"status": "Completing", "lastTransitionTime": now},
    ]
    status["running"], status["succeeded"], status["terminating"] = 0, 1, 1
    sim._set_status(t, NAMESPACE, obj["metadata"]["name"], status)
    stuck = next(p for p in sim.pods(eid) if p["metadata"]["name"] == worker["metadata"]["name"])
    assert stuck["metadata"]["deletionTimestamp"] and stuck["status"]["phase"] == "Running"

    try:
        stopped = b.cancel(eid, grace_s=30)
        seen = b.poll([eid])[eid]
    finally:
        b.close()

    assert stopped is False
    assert sim.workload(eid)[1]["metadata"].get("deletionTimestamp") is None
    assert seen.state == R.RUNNING, seen


def test_cancel_of_a_batch_job_already_failing_by_itself_stops_nothing(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """A Job marked `FailureTarget` (Kubernetes >= 1.31, kubernetes#123775: set at once when a
    pod of a backoffLimit-0 Job fails; `Failed` only once the other pods are gone) has failed
    on its own: cancel deletes nothing and returns False."""
    b = make_backend(api, clock, workload="indexed", image_default="img:1")
    eid = b.submit(request(nodes=2)).external_id
    p0, _ = sim.run(eid)
    sim.failing_by_itself(eid, now=clock())
    stuck = next(p for p in sim.pods(eid) if p["metadata"]["name"] == p0["metadata"]["name"])
    assert stuck["metadata"]["deletionTimestamp"] and stuck["status"]["phase"] == "Running"

    try:
        stopped = b.cancel(eid, grace_s=30)
        seen = b.poll([eid])[eid]
    finally:
        b.close()

    assert stopped is False
    assert sim.workload(eid)[1]["metadata"].get("deletionTimestamp") is None
    assert seen.state == R.RUNNING, seen


# --- a pod that has ended before the Job controller has caught up ----------------------------

START, END = "2025-06-15T15:06:41Z", "2025-06-15T15:07:41Z"


def _pod(name: str, phase: str, exit_code: int | None = None, reason: str = "") -> dict[str, Any]:
    main: dict[str, Any] = {"name": "main"}
    if phase == "Running":
        main["state"] = {"running": {"startedAt": START}}
    else:
        main["state"] = {
            "terminated": {
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": START,
                "finishedAt": END,
            }
        }
    return {
        "metadata": {"name": name, "creationTimestamp": "2025-06-15T15:06:40Z"},
        "spec": {"nodeName": "h100-01"},
        "status": {"phase": phase, "containerStatuses": [main]},
    }


@pytest.mark.parametrize(
    ("case", "parallelism", "pods", "state", "exit_code"),
    [
        ("only pod OOMKilled", 1, [_pod("j-0", "Failed", 137, "OOMKilled")], R.FAILED, 137),
        (
            "gang: one pod succeeded, one failed",
            2,
            [_pod("j-0", "Succeeded", 0, "Completed"), _pod("j-1", "Failed", 3, "Error")],
            R.FAILED,
            3,
        ),
        (
            "gang: one pod failed, one still runs",
            2,
            [_pod("j-0", "Running"), _pod("j-1", "Failed", 3, "Error")],
            R.RUNNING,
            None,
        ),
    ],
)
def test_a_job_with_a_failed_pod_is_failing_before_its_controller_says_so(
    case: str, parallelism: int, pods: list[dict[str, Any]], state: str, exit_code: int | None
) -> None:
    """gpuq's Jobs have backoffLimit 0 and FailJob as their pod failure policy's only action:
    a failed pod fails the Job, whether or not the Job controller has recorded it yet
    (pod-finalizer tracking and its queue make that a window a poll can fall in). Such a job
    is never "waiting for the pod to start": it is FAILED with the pod's exit code, or
    RUNNING while pods that still run stop; either way it ended by itself."""
    job = {
        "metadata": {"name": "j"},
        "spec": {"parallelism": parallelism, "completions": parallelism},
        "status": {"active": 1, "ready": 0, "startTime": "2025-06-15T15:06:40Z"},
    }

    seen = observe("ns/job/j", "job", job, pods, now=1_750_000_000.0, image_pull_grace_s=300)

    assert (seen.status.state, seen.status.exit_code) == (state, exit_code), (case, seen)
    assert seen.ended_first, case
