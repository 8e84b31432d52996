"""A pod the kubelet refuses at admission: the GPU device plugin fails to allocate
(`UnexpectedAdmissionError`), or the node has fewer devices than the scheduler counted
(`OutOfnvidia.com/gpu`). `rejectPod` (pkg/kubelet/kubelet.go) sets the pod to phase Failed
with that reason and "Pod was rejected: ...", and nothing else (no container statuses, no
DisruptionTarget condition). The job never ran and the cause is the node's: like a kubelet
eviction it is a node failure (retried per `retries.on: node_failure`), and its reason says
what happened, not "Job has reached the specified backoff limit"; a Volcano job whose
in-place retries the node kept refusing says so too."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.backends.base import RemoteState as R
from queue_service.backends.kubernetes.status import observe

NOW = 1_750_000_000.0
T = "2025-06-15T15:06:40Z"
GRACE = 300.0

REJECTIONS = [
    (
        "UnexpectedAdmissionError",
        "Pod was rejected: Allocate failed due to no healthy devices present; cannot allocate "
        "unhealthy devices nvidia.com/gpu, which is unexpected",
    ),
    (
        "OutOfnvidia.com/gpu",
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 8, "
        "used: 8, capacity: 8",
    ),
]


def rejected_pod(name: str, reason: str, message: str) -> dict[str, Any]:
    """The status kubelet.rejectPod writes (phase, reason, message; the status manager adds
    startTime and keeps the scheduler's PodScheduled condition)."""
    return {
        "metadata": {"name": name, "creationTimestamp": T},
        "spec": {"nodeName": "gpu-node-1"},
        "status": {
            "phase": "Failed",
            "reason": reason,
            "message": message,
            "qosClass": "Burstable",
            "startTime": T,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": T},
            ],
        },
    }


def failed_batch_job() -> dict[str, Any]:
    cond = {
        "status": "True",
        "lastProbeTime": T,
        "lastTransitionTime": T,
        "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit",
    }
    return {
        "metadata": {"name": "j"},
        "spec": {"parallelism": 1},
        "status": {
            "conditions": [{"type": "FailureTarget", **cond}, {"type": "Failed", **cond}],
            "startTime": T,
            "failed": 1,
            "ready": 0,
            "terminating": 0,
            "uncountedTerminatedPods": {},
        },
    }


def failed_vcjob(retries: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "v"},
        "spec": {},
        "status": {
            "state": {"phase": "Failed", "lastTransitionTime": T},
            "minAvailable": 1,
            "failed": 1,
            "retryCount": retries,
            "conditions": [
                {"status": "Pending", "lastTransitionTime": T},
                {"status": "Restarting", "lastTransitionTime": T},
                {"status": "Failed", "lastTransitionTime": T},
            ],
        },
    }


@pytest.mark.parametrize(("why", "message"), REJECTIONS, ids=[r[0] for r in REJECTIONS])
def test_a_batch_job_whose_pod_the_kubelet_rejected_is_a_node_failure(
    why: str, message: str
) -> None:
    pod = rejected_pod("gpuq-x-1-abcde", why, message)
    seen = observe("ns/job/j", "job", failed_batch_job(), [pod], now=NOW, image_pull_grace_s=GRACE)
    assert seen.status.state == R.NODE_FAILURE, seen.status


@pytest.mark.parametrize(("why", "message"), REJECTIONS, ids=[r[0] for r in REJECTIONS])
def test_a_batch_job_whose_pod_the_kubelet_rejected_says_why(why: str, message: str) -> None:
    pod = rejected_pod("gpuq-x-1-abcde", why, message)
    seen = observe("ns/job/j", "job", failed_batch_job(), [pod], now=NOW, image_pull_grace_s=GRACE)
    assert why in f"{seen.status.reason} {seen.status.native_state}", seen.status
    assert "Allocate failed" in seen.status.reason or "enough resource" in seen.status.reason


def test_a_volcano_job_whose_pods_the_kubelet_kept_rejecting_says_why() -> None:
    # At the last retry Volcano keeps Failed pods (PodRetainPhaseSoft), so the rejected
    # master is still there when the job is Failed.
    why, message = REJECTIONS[0]
    pod = rejected_pod("gpuq-x-1-master-0", why, message)
    seen = observe("ns/vcjob/v", "vcjob", failed_vcjob(2), [pod], now=NOW, image_pull_grace_s=GRACE)
    assert why in f"{seen.status.reason} {seen.status.native_state}", seen.status
