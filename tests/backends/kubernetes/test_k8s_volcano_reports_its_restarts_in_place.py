"""The Kubernetes backend reports how many times Volcano restarted a gang in place (its
vcjob's `status.retryCount`, PodEvicted -> RestartJob) on every status it reads of it: each
such restart uses one of the job's retries, which the service counts against retries.max
(docs/kubernetes.md). Volcano counts the failure that used up maxRetry too (RetryCount++,
then Failed): a Failed gang was restarted one time fewer."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import NAMESPACE
from k8s_sim import SHAPES, fill

from queue_service.backends.base import RemoteState as R
from queue_service.backends.kubernetes.status import observe

CREATED = "2025-06-15T15:06:40Z"
NOW = 1_750_000_000.0  # CREATED + 200 s


def _vcjob(shape: str, retries: int) -> dict[str, Any]:
    status = fill(SHAPES[shape], time=CREATED, n=2, retries=retries)
    if retries:  # Volcano keeps retryCount through the phases after a restart.
        status["retryCount"] = retries
    return {"metadata": {"name": "v", "namespace": NAMESPACE}, "spec": {}, "status": status}


def _pod(shape: str, name: str) -> dict[str, Any]:
    status = fill(SHAPES[shape], time=CREATED, image="img:1", exit_code=3, reason="Error")
    return {"metadata": {"name": name, "creationTimestamp": CREATED}, "status": status}


CASES = [
    ("never restarted", _vcjob("vcjob_running", 0), ["pod_running"], R.RUNNING, 0),
    ("restarting the first time", _vcjob("vcjob_restarting", 1), [], R.QUEUED, 1),
    ("running again after one restart", _vcjob("vcjob_running", 1), ["pod_running"], R.RUNNING, 1),
    # Ended by a pod's own failure (PodFailed -> TerminateJob) after a restart in place.
    (
        "terminated by a kubelet's eviction after one restart",
        _vcjob("vcjob_terminated", 1),
        ["pod_evicted_kubelet"],
        R.NODE_FAILURE,
        1,
    ),
    ("failed at maxRetry 3", _vcjob("vcjob_failed", 3), ["pod_failed_error"], R.FAILED, 2),
]


@pytest.mark.parametrize(
    ("title", "obj", "pods", "state", "restarts"), CASES, ids=[c[0] for c in CASES]
)
def test_a_volcano_gangs_status_counts_its_restarts_in_place(
    title: str, obj: Any, pods: list[str], state: str, restarts: int
) -> None:
    seen = observe(
        "ns/vcjob/v",
        "vcjob",
        obj,
        [_pod(shape, f"v-master-{i}") for i, shape in enumerate(pods)],
        now=NOW,
        image_pull_grace_s=300,
    )
    assert seen.status.state == state, seen.status
    assert seen.status.restarted_in_place == restarts, seen.status


def test_a_batch_job_reports_no_restart_in_place() -> None:
    job = {
        "metadata": {"name": "j"},
        "spec": {},
        "status": fill(SHAPES["job_running"], time=CREATED, n=1),
    }
    seen = observe("ns/job/j", "job", job, [], now=NOW, image_pull_grace_s=300)
    assert seen.status.restarted_in_place == 0
