"""A container the runtime refuses to create (`CreateContainerError`: on CRI-O a mistyped
program, "executable file not found in $PATH" at create time; CDI device injection failures)
is reported as its sibling `CreateContainerConfigError` is: QUEUED with the reason for
`image_pull_grace_s`, then FAILED and the workload deleted. The kubelet retries it for ever,
the pod staying Pending and bound, holding its GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.backends.base import RemoteState as R
from queue_service.backends.kubernetes.status import observe

NOW = 1_750_000_000.0
CREATED_RECENTLY = "2025-06-15T15:06:40Z"  # NOW - 200 s
CREATED_LONG_AGO = "2025-06-15T14:00:00Z"  # NOW - 4200 s
GRACE = 300.0
MESSAGE = (
    'container create failed: time="2025-06-15T15:06:45Z" level=error msg="runc create '
    'failed: unable to start container process: exec: \\"trian.py\\": executable file not '
    'found in $PATH"'
)


def pod(created: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "gpuq-x-1-abcde", "creationTimestamp": created},
        "spec": {"nodeName": "gpu-node-1"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
                {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"},
                {"type": "PodScheduled", "status": "True"},
            ],
            "hostIP": "10.0.0.11",
            "startTime": created,
            "containerStatuses": [
                {
                    "name": "main",
                    "state": {"waiting": {"reason": "CreateContainerError", "message": MESSAGE}},
                    "lastState": {},
                    "ready": False,
                    "restartCount": 0,
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "imageID": "",
                    "started": False,
                }
            ],
            "qosClass": "Burstable",
        },
    }


def job(created: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "j"},
        "spec": {"parallelism": 1},
        "status": {
            "active": 1,
            "ready": 0,
            "startTime": created,
            "terminating": 0,
            "uncountedTerminatedPods": {},
        },
    }


@pytest.mark.parametrize(
    ("created", "state", "stop"),
    [(CREATED_RECENTLY, R.QUEUED, False), (CREATED_LONG_AGO, R.FAILED, True)],
    ids=["within-the-grace", "after-the-grace"],
)
def test_a_container_the_runtime_cannot_create_waits_with_its_reason_then_fails(
    created: str, state: str, stop: bool
) -> None:
    seen = observe(
        "ns/job/j", "job", job(created), [pod(created)], now=NOW, image_pull_grace_s=GRACE
    )
    assert (seen.status.state, seen.stop) == (state, stop), seen.status
    assert "CreateContainerError" in seen.status.reason, seen.status
