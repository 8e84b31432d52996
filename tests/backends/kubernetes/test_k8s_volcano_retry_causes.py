"""Volcano restarts a gang in place (`RestartJob`) up to `maxRetry` - 1 times, but its
events do not tell causes apart: `PodEvicted` is a pod deleted (preemption, a drain, the
taint manager), `PodFailed` a pod that turned Failed (the user's exit code, the time limit,
a kubelet's eviction or refusal). So only `PodEvicted` restarts in place, and only for a job
whose retries list a cause (`retries.on`) and have some left; any other end terminates the
gang (`TerminateJob`, which keeps the failed pod), read by its cause as a batch Job's is:
FAILED with the exit code, TIMEOUT, NODE_FAILURE or PREEMPTED, which the service retries
only as `retries.on` says. A batch/v1 Job never retries in place (`backoffLimit: 0`)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer
from k8s_sim import Sim
from test_k8s_manifests import _volcano_in_place_restarts

from queue_service.backends.base import RemoteState as R
from queue_service.backends.kubernetes import manifests
from queue_service.backends.kubernetes.config import parse_settings
from queue_service.backends.kubernetes.status import observe

SETTINGS = parse_settings({"kubeconfig": "x"})
RETRIES = [
    (3, (), 0),
    (0, (), 0),
    (0, ("node_failure", "preemption"), 0),
    (3, ("node_failure",), 3),
    (2, ("node_failure", "preemption"), 2),
]


def _spec(retries_max: int, retry_on: tuple[str, ...]) -> dict[str, Any]:
    plan = manifests.build(request(nodes=2, retries_max=retries_max, retry_on=retry_on), SETTINGS)
    assert plan.ref.kind == "vcjob"
    return dict(plan.objects[0]["spec"])


@pytest.mark.parametrize(("retries_max", "retry_on", "restarts"), RETRIES)
def test_a_volcano_gang_restarts_in_place_only_for_a_job_with_retry_causes(
    retries_max: int, retry_on: tuple[str, ...], restarts: int
) -> None:
    spec = _spec(retries_max, retry_on)
    assert _volcano_in_place_restarts(spec, "PodEvicted") == restarts, spec
    if not restarts:
        assert spec["maxRetry"] == 1  # 0 would be Volcano's default, 3
        assert {"event": "PodEvicted", "action": "TerminateJob"} in spec["policies"]


@pytest.mark.parametrize(("retries_max", "retry_on", "restarts"), RETRIES)
def test_a_volcano_gang_is_never_restarted_in_place_for_a_pod_that_failed_by_itself(
    retries_max: int, retry_on: tuple[str, ...], restarts: int
) -> None:
    """An exit 1, the time limit: no cause `retries.on` can list; a kubelet's eviction is
    one, retried by the service from the end's cause (a new attempt, placed by gpuq)."""
    spec = _spec(retries_max, retry_on)
    assert _volcano_in_place_restarts(spec, "PodFailed") == 0, spec
    assert {"event": "PodFailed", "action": "TerminateJob"} in spec["policies"]


def _gang(api: FakeApiServer, sim: Sim, clock: FakeClock, **job: Any) -> tuple[Any, str]:
    b = make_backend(api, clock, workload="volcano")
    eid = b.submit(request(nodes=2, **job)).external_id
    sim.run(eid)
    assert b.poll([eid])[eid].state == R.RUNNING
    return b, eid


def test_a_gang_whose_pod_exits_1_ends_failed_with_its_exit_code_after_one_run(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b, eid = _gang(api, sim, clock, retries_max=3, retry_on=("node_failure",))
    sim.fail(eid, exit_code=1, index=1)

    status = b.poll([eid])[eid]

    assert (status.state, status.exit_code) == (R.FAILED, 1), status
    assert "exit code 1 in pod" in status.reason and "in-place" not in status.reason
    vcjob = sim.workload(eid)[1]
    assert vcjob["status"]["state"]["phase"] == "Terminated"
    assert not vcjob["status"].get("retryCount")


def test_a_gang_its_time_limit_stopped_ends_timeout(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b, eid = _gang(api, sim, clock, time_limit_s=600)
    clock.now += 601
    assert sim.expire_deadlines(eid)

    status = b.poll([eid])[eid]

    assert status.state == R.TIMEOUT, status
    assert "time limit reached in pod" in status.reason
    assert sim.workload(eid)[1]["status"]["state"]["phase"] == "Terminated"


def test_a_gang_with_no_retries_whose_pod_was_deleted_ends_without_a_restart(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """PodEvicted -> TerminateJob: the deleted pod leaves nothing to read; the end is a
    disruption's, which the service does not retry for a job with no retries left."""
    b, eid = _gang(api, sim, clock, retries_max=0)
    sim.evict(eid, index=1, cause="preemption")

    status = b.poll([eid])[eid]

    assert status.state == R.NODE_FAILURE, status
    assert "was deleted" in status.reason
    assert sim.workload(eid)[1]["status"]["state"]["phase"] == "Terminated"
    assert sim.pods(eid) == []


def test_a_gang_whose_pod_pod_gc_failed_is_a_node_failure(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """PodGC marks the pod of a deleted node Failed (PodFailed -> TerminateJob), then
    force-deletes it: gone before gpuq looks, it was a node failure, which the service
    retries as `retries.on` says."""
    b, eid = _gang(api, sim, clock)
    sim.delete_node("h100-02")
    (lost,) = sim.pod_gc()
    sim.pod_lost(eid, lost)
    b.nodes()

    status = b.poll([eid])[eid]

    assert status.state == R.NODE_FAILURE, status
    assert sim.workload(eid)[1]["status"]["state"]["phase"] == "Terminated"


T = "2025-06-15T15:06:40Z"


def _vcjob(phase: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "v"},
        "spec": {},
        "status": {
            "state": {"phase": phase, "lastTransitionTime": T},
            "minAvailable": 2,
            "conditions": [
                {"status": "Running", "lastTransitionTime": T},
                {"status": phase, "lastTransitionTime": T},
            ],
            **status,
        },
    }


def test_a_gang_volcano_is_terminating_runs_until_its_pods_stop_and_ended_by_itself() -> None:
    """TerminateJob deletes the pods still running, then waits (Terminating): their GPUs
    are not free yet, and a stop that comes now meets a job that ended by itself."""
    failed = {
        "metadata": {"name": "v-worker-0"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "main", "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}
            ],
        },
    }
    stopping = {
        "metadata": {"name": "v-master-0", "deletionTimestamp": T},
        "spec": {"nodeName": "h100-01"},
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "main", "state": {"running": {"startedAt": T}}}],
        },
    }
    job = _vcjob("Terminating", failed=1, terminating=1)

    seen = observe("ns/vcjob/v", "vcjob", job, [failed, stopping], now=0, image_pull_grace_s=1)
    assert seen.status.state == R.RUNNING and "stopping" in seen.status.reason, seen
    assert seen.ended_first

    ended = observe(
        "ns/vcjob/v", "vcjob", _vcjob("Terminated", failed=1), [failed], now=0, image_pull_grace_s=1
    )
    assert (ended.status.state, ended.status.exit_code) == (R.FAILED, 2), ended
    assert ended.ended_first


def test_a_gang_terminated_for_a_pod_its_kubelet_refused_is_a_node_failure() -> None:
    refused = {
        "metadata": {"name": "v-worker-0"},
        "status": {
            "phase": "Failed",
            "reason": "UnexpectedAdmissionError",
            "message": "Pod was rejected: Allocate failed due to no healthy devices present",
        },
    }
    seen = observe(
        "ns/vcjob/v",
        "vcjob",
        _vcjob("Terminated", failed=1),
        [refused],
        now=0,
        image_pull_grace_s=1,
    )
    assert seen.status.state == R.NODE_FAILURE, seen
    assert "UnexpectedAdmissionError" in seen.status.reason


def test_a_gang_with_no_retries_held_terminating_by_a_pod_on_an_unreachable_node_ends(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """The taint manager deletes the pod of an unreachable node (PodEvicted -> TerminateJob)
    and nothing confirms its end: Volcano waits in Terminating for ever. The job ends a node
    failure, and the workload is deleted, as for a gang restarting there."""
    b, eid = _gang(api, sim, clock, retries_max=0)
    sim.node_unreachable("h100-02")
    clock.now += 300  # the pods' default toleration of the unreachable taint
    sim.taint_eviction()
    sim.volcano_sees_deletions(eid)
    vcjob = sim.workload(eid)[1]
    assert (vcjob["status"]["state"]["phase"], vcjob["status"]["terminating"]) == (
        "Terminating",
        1,
    )
    b.nodes()

    status = b.poll([eid])[eid]

    assert status.state == R.NODE_FAILURE, status
    assert "Taint manager" in status.reason
    assert sim.workload(eid)[1]["metadata"].get("deletionTimestamp")
