"""The pure status mappers, table-driven over the status shapes in data/status_shapes.json."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_sim import SHAPES, fill

from queue_service.backends.base import RemoteState as R
from queue_service.backends.kubernetes.manifests import FINALIZER
from queue_service.backends.kubernetes.status import observe

NOW = 1_750_000_000.0
CREATED = "2025-06-15T15:06:40Z"  # NOW - 200 s
LATER = "2025-06-15T15:08:00Z"  # NOW - 120 s
GRACE = 300.0
EID = "ns/job/j"


def pod(
    shape: str, name: str = "j-0-abcde", created: str = CREATED, **values: Any
) -> dict[str, Any]:
    status = fill(SHAPES[shape], time=CREATED, image="img:1", pod=name, namespace="ns", **values)
    return {"metadata": {"name": name, "creationTimestamp": created}, "status": status}


def job(shape: str | None, parallelism: int = 1, **extra: Any) -> dict[str, Any]:
    status = (
        fill(SHAPES[shape], time=CREATED, n=parallelism, pod="j-0-abcde", namespace="ns")
        if shape
        else {}
    )
    return {
        "metadata": {"name": "j", **extra},
        "spec": {"parallelism": parallelism},
        "status": status,
    }


def vcjob(shape: str, retries: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "v", **extra},
        "spec": {},
        "status": fill(SHAPES[shape], time=CREATED, n=2, retries=retries),
    }


BATCH = [
    ("no status yet", job(None), [], R.QUEUED, "waiting for the pod to start", None),
    (
        "unschedulable",
        job(None),
        [pod("pod_pending_unschedulable")],
        R.QUEUED,
        "Unschedulable: 0/4 nodes",
        None,
    ),
    (
        "image pull within grace",
        job(None),
        [pod("pod_image_pull_backoff")],
        R.QUEUED,
        "ImagePullBackOff in pod",
        None,
    ),
    (
        "image pull past grace",
        job(None),
        [pod("pod_image_pull_backoff", created="2025-06-15T14:00:00Z")],
        R.FAILED,
        "ImagePullBackOff",
        None,
    ),
    ("running", job("job_running"), [pod("pod_running")], R.RUNNING, "", None),
    (
        "gang half running",
        job("job_running", 2),
        [pod("pod_running"), pod("pod_pending_unschedulable", "j-1-xyz")],
        R.QUEUED,
        "Unschedulable",
        None,
    ),
    ("complete", job("job_complete"), [pod("pod_succeeded")], R.SUCCEEDED, "", 0),
    (
        "exit 3",
        job("job_failed_backoff"),
        [pod("pod_failed_error", exit_code=3, reason="Error")],
        R.FAILED,
        "exit code 3 in pod j-0-abcde",
        3,
    ),
    (
        "OOMKilled",
        job("job_failed_backoff"),
        [pod("pod_failed_error", exit_code=137, reason="OOMKilled")],
        R.FAILED,
        "out of memory (OOMKilled)",
        137,
    ),
    (
        "deadline",
        job("job_failed_deadline"),
        [],
        R.TIMEOUT,
        "Job was active longer than specified deadline",
        None,
    ),
    (
        # The pod's own activeDeadlineSeconds (gpuq's time limit): the kubelet ends it, and
        # the Job fails as for any pod failure (backoffLimit 0), killed with 137.
        "pod deadline",
        job("job_failed_backoff"),
        [pod("pod_deadline_exceeded")],
        R.TIMEOUT,
        "time limit reached in pod j-0-abcde: Pod was active on the node longer than",
        None,
    ),
    (
        "pod deadline, not yet counted by the Job controller",
        job("job_running"),
        [pod("pod_deadline_exceeded")],
        R.TIMEOUT,
        "time limit reached",
        None,
    ),
    (
        "pod deadline in a gang, its other pod stopped by the controller",
        job("job_failed_backoff", 2),
        [
            pod("pod_failed_error", "j-0-abcde", exit_code=143, reason="Error"),
            pod("pod_deadline_exceeded", "j-1-xyz"),
        ],
        R.TIMEOUT,
        "pod j-1-xyz",
        None,
    ),
    (
        "kubelet eviction",
        job("job_failed_pod_failure_policy"),
        [pod("pod_evicted_kubelet")],
        R.NODE_FAILURE,
        "The node was low on resource: memory",
        None,
    ),
    (
        "preempted, pod still there",
        job("job_failed_pod_failure_policy"),
        [pod("pod_preempted")],
        R.PREEMPTED,
        "preempting to accommodate",
        None,
    ),
    (
        "preempted, pod deleted",
        job("job_failed_pod_failure_policy"),
        [],
        R.PREEMPTED,
        "DisruptionTarget matching FailJob",
        None,
    ),
    ("kueue suspended", job("job_suspended"), [], R.QUEUED, "Kueue", None),
    (
        "being deleted",
        job("job_running", deletionTimestamp=CREATED),
        [],
        R.CANCELLED,
        "deleted",
        None,
    ),
    (
        "being deleted, a pod still in its grace period",
        job("job_running", 2, deletionTimestamp=CREATED),
        [pod("pod_running"), pod("pod_succeeded", "j-1-xyz")],
        R.RUNNING,
        "stopping: 1 pod not stopped yet",
        None,
    ),
    (
        "being deleted, failed by the stop while another pod still checkpoints",
        job("job_failed_backoff", 2, deletionTimestamp=CREATED),
        [pod("pod_failed_error", exit_code=143, reason="Error"), pod("pod_running", "j-1-xyz")],
        R.RUNNING,
        "stopping",
        None,
    ),
    (
        "failing: the controller is still deleting the gang's other pods",
        job("job_failed_backoff", 2),
        [pod("pod_failed_error", exit_code=3, reason="Error"), pod("pod_running", "j-1-xyz")],
        R.RUNNING,
        "stopping: 1 pod not stopped yet",
        None,
    ),
    (
        "failed: the gang's other pod stopped by the controller",
        job("job_failed_backoff", 2),
        [
            pod("pod_failed_error", exit_code=3, reason="Error"),
            pod("pod_failed_error", "j-1-xyz", exit_code=143, reason="Error"),
        ],
        R.FAILED,
        "exit code 3 in pod j-0-abcde",
        3,
    ),
    (
        "being deleted, failed by the stop",
        job("job_failed_backoff", deletionTimestamp=CREATED),
        [pod("pod_failed_error", exit_code=143, reason="Error")],
        R.FAILED,
        "exit code 143",
        143,
    ),
]


@pytest.mark.parametrize(
    ("title", "obj", "pods", "state", "reason", "exit_code"), BATCH, ids=[b[0] for b in BATCH]
)
def test_batch_job_maps_to_gpuq_states(
    title: str, obj: Any, pods: Any, state: str, reason: str, exit_code: int | None
) -> None:
    seen = observe(EID, "job", obj, pods, now=NOW, image_pull_grace_s=GRACE)
    assert seen.status.state == state
    assert reason in seen.status.reason
    assert seen.status.exit_code == exit_code


def test_an_image_that_never_pulls_fails_and_asks_the_backend_to_stop_it() -> None:
    stale = [pod("pod_image_pull_backoff", created="2025-06-15T14:00:00Z")]
    seen = observe(EID, "job", job(None), stale, now=NOW, image_pull_grace_s=GRACE)
    assert (seen.status.state, seen.stop, seen.status.native_state) == (
        R.FAILED,
        True,
        "ImagePullBackOff",
    )
    fresh = observe(
        EID, "job", job(None), [pod("pod_image_pull_backoff")], now=NOW, image_pull_grace_s=GRACE
    )
    assert fresh.stop is False


def test_a_missing_object_is_lost() -> None:
    assert observe(EID, "job", None, [], now=NOW, image_pull_grace_s=GRACE).status.state == R.LOST
    assert observe(EID, "vcjob", None, [], now=NOW, image_pull_grace_s=GRACE).status.state == R.LOST


VOLCANO = [
    (
        "pending",
        vcjob("vcjob_pending"),
        [pod("pod_pending_unschedulable")],
        R.QUEUED,
        "Unschedulable",
    ),
    ("running", vcjob("vcjob_running"), [], R.RUNNING, ""),
    (
        "restarting after eviction",
        vcjob("vcjob_restarting", 1),
        [pod("pod_evicted_kubelet")],
        R.QUEUED,
        "restarting in place (retry 1) after pod j-0-abcde evicted",
    ),
    ("completed", vcjob("vcjob_completed"), [], R.SUCCEEDED, ""),
    (
        "being deleted, pods still in their grace period",
        vcjob("vcjob_running", deletionTimestamp=CREATED),
        [pod("pod_running"), pod("pod_running", "v-worker-0")],
        R.RUNNING,
        "stopping: 2 pods not stopped yet",
    ),
    (
        "being deleted, pods gone",
        vcjob("vcjob_running", deletionTimestamp=CREATED),
        [],
        R.CANCELLED,
        "",
    ),
    (
        "aborting, a pod still in its grace period",
        {**vcjob("vcjob_running"), "status": {"state": {"phase": "Aborting"}}},
        [pod("pod_running")],
        R.RUNNING,
        "stopping",
    ),
    (
        # `vcctl job suspend`: gpuq's stops delete the workload, so this is the cluster's
        # hold, as a Kueue suspension, until `vcctl job resume`.
        "aborted, not deleted",
        {**vcjob("vcjob_running"), "status": {"state": {"phase": "Aborted"}}},
        [],
        R.QUEUED,
        "suspended on the cluster (Volcano Aborted)",
    ),
    (
        "aborted and being deleted",
        {
            **vcjob("vcjob_running"),
            "metadata": {
                **vcjob("vcjob_running")["metadata"],
                "deletionTimestamp": "2026-01-01T00:00:00Z",
            },
            "status": {"state": {"phase": "Aborted"}},
        },
        [],
        R.CANCELLED,
        "Aborted",
    ),
    (
        # The failure that used up maxRetry 4 is counted too: three restarts happened.
        "failed after retries",
        vcjob("vcjob_failed", 4),
        [pod("pod_failed_error", exit_code=2, reason="Error")],
        R.FAILED,
        "exit code 2 in pod j-0-abcde (Error) (after 3 in-place restarts)",
    ),
    (
        "failed by eviction",
        vcjob("vcjob_failed", 3),
        [pod("pod_evicted_kubelet")],
        R.FAILED,
        "evicted",
    ),
    ("timed out", vcjob("vcjob_failed"), [pod("pod_deadline_exceeded")], R.TIMEOUT, "time limit"),
]


@pytest.mark.parametrize(
    ("title", "obj", "pods", "state", "reason"), VOLCANO, ids=[v[0] for v in VOLCANO]
)
def test_volcano_phases_map_to_gpuq_states(
    title: str, obj: Any, pods: Any, state: str, reason: str
) -> None:
    seen = observe("ns/vcjob/v", "vcjob", obj, pods, now=NOW, image_pull_grace_s=GRACE)
    assert seen.status.state == state
    assert reason in seen.status.reason


def test_a_completed_job_held_by_the_finalizer_after_its_ttl_is_still_a_success() -> None:
    """kubernetes pkg/controller/ttlafterfinished deletes a finished Job (Foreground) once
    ttlSecondsAfterFinished has passed (0: at once); gpuq's finalizer holds it until a poll
    reports its end, which is its own."""
    done = job("job_complete", deletionTimestamp=LATER, finalizers=[FINALIZER])
    seen = observe(EID, "job", done, [], now=NOW, image_pull_grace_s=GRACE)
    assert (seen.status.state, seen.status.exit_code) == (R.SUCCEEDED, 0), seen.status


def test_a_completed_volcano_job_held_by_the_finalizer_after_its_ttl_is_still_a_success() -> None:
    done = vcjob("vcjob_completed", deletionTimestamp=LATER, finalizers=[FINALIZER])
    seen = observe("ns/vcjob/v", "vcjob", done, [], now=NOW, image_pull_grace_s=GRACE)
    assert (seen.status.state, seen.status.exit_code) == (R.SUCCEEDED, 0), seen.status


@pytest.mark.parametrize(
    ("kind", "shape"),
    [("job", "job_complete"), ("job", "job_failed_backoff"), ("vcjob", "vcjob_completed")],
)
def test_an_end_before_the_deletion_is_its_own_and_one_after_it_was_caused_by_the_stop(
    kind: str, shape: str
) -> None:
    make = job if kind == "job" else vcjob
    ended_at = CREATED  # the shapes' transition times
    for deleted, own in ((None, True), (LATER, True), (ended_at, False)):
        obj = make(shape, **({"deletionTimestamp": deleted} if deleted else {}))
        seen = observe(f"ns/{kind}/j", kind, obj, [], now=NOW, image_pull_grace_s=GRACE)
        assert seen.status.state in R.TERMINAL and seen.ended_first is own, (deleted, seen)


def test_the_jobs_own_container_is_read_when_a_sidecar_is_listed_first() -> None:
    """The kubelet sorts container statuses by name: an injected istio-proxy that exited 0
    comes before `main`, which failed with 3."""
    failed = pod("pod_failed_error", exit_code=3, reason="Error")
    (main,) = failed["status"]["containerStatuses"]
    sidecar = {**main, "name": "istio-proxy", "state": {"terminated": {"exitCode": 0}}}
    failed["status"]["containerStatuses"] = [sidecar, {**main, "name": "main"}]

    seen = observe(
        EID, "job", job("job_failed_backoff"), [failed], now=NOW, image_pull_grace_s=GRACE
    )

    assert (seen.status.state, seen.status.exit_code) == (R.FAILED, 3)


def _bound(p: dict[str, Any], node: str) -> dict[str, Any]:
    return {**p, "spec": {"nodeName": node}}


@pytest.mark.parametrize(
    ("kind", "obj", "pods"),
    [
        ("job", job("job_running"), [_bound(pod("pod_running"), "gone-1")]),
        ("job", job("job_running"), [{**pod("pod_running"), "status": {"phase": "Unknown"}}]),
        (
            "job",
            job(None),
            [
                {
                    **pod("pod_pending_unschedulable"),
                    "spec": {"nodeSelector": {"kubernetes.io/hostname": "gone-1"}},
                }
            ],
        ),
        ("vcjob", vcjob("vcjob_running"), [_bound(pod("pod_running"), "gone-1")]),
        ("vcjob", vcjob("vcjob_restarting", 1), [_bound(pod("pod_image_pull_backoff"), "gone-1")]),
    ],
    ids=["bound", "phase Unknown", "pinned, unbound", "volcano bound", "volcano restarted"],
)
def test_a_pod_whose_node_is_gone_is_a_node_failure_and_its_workload_is_stopped(
    kind: str, obj: Any, pods: Any
) -> None:
    seen = observe(
        f"ns/{kind}/j", kind, obj, pods, now=NOW, image_pull_grace_s=GRACE, gone_nodes={"gone-1"}
    )
    assert (seen.status.state, seen.stop) == (R.NODE_FAILURE, True), seen


def test_a_pod_on_a_node_still_there_is_not_lost() -> None:
    running = [_bound(pod("pod_running"), "h100-01")]
    seen = observe(
        EID, "job", job("job_running"), running, now=NOW, image_pull_grace_s=GRACE, gone_nodes={"x"}
    )
    assert seen.status.state == R.RUNNING


def test_a_stopped_workload_waits_for_no_pod_on_a_gone_node() -> None:
    """No kubelet will confirm that pod's end (PodGC force-deletes it later), and its GPUs
    went with the node."""
    obj = job("job_running", 2, deletionTimestamp=CREATED)
    pods = [_bound(pod("pod_running"), "gone-1"), _bound(pod("pod_running", "j-1-x"), "h100-01")]
    seen = observe(EID, "job", obj, pods, now=NOW, image_pull_grace_s=GRACE, gone_nodes={"gone-1"})
    assert seen.status.state == R.RUNNING and "1 pod not stopped yet" in seen.status.reason


def _evicted_on(node: str) -> dict[str, Any]:
    """A pod the taint eviction controller deleted; its kubelet never confirmed."""
    p = _bound(pod("pod_running"), node)
    p["metadata"] = {**p["metadata"], "deletionTimestamp": LATER}
    p["status"] = {
        **p["status"],
        "conditions": [
            *p["status"]["conditions"],
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "DeletionByTaintManager",
                "message": "Taint manager: deleting due to NoExecute taint",
            },
        ],
    }
    return p


def test_a_pod_on_an_unreachable_node_that_is_not_being_deleted_still_runs() -> None:
    """Within its toleration of the unreachable taint the node may come back."""
    running = [_bound(pod("pod_running"), "h100-02")]
    seen = observe(
        EID,
        "job",
        job("job_running"),
        running,
        now=NOW,
        image_pull_grace_s=GRACE,
        unreachable_nodes={"h100-02"},
    )
    assert seen.status.state == R.RUNNING


def test_a_pod_being_deleted_on_a_reachable_node_is_waited_for() -> None:
    """Its kubelet will stop it and confirm: not lost, whatever deleted it."""
    obj = job("job_running", deletionTimestamp=CREATED)
    seen = observe(
        EID,
        "job",
        obj,
        [_evicted_on("h100-01")],
        now=NOW,
        image_pull_grace_s=GRACE,
        unreachable_nodes={"h100-02"},
    )
    assert seen.status.state == R.RUNNING and "1 pod not stopped yet" in seen.status.reason


STARTED = [
    (
        "ran, pod there",
        "job",
        job("job_failed_backoff"),
        [pod("pod_failed_error", exit_code=3, reason="Error")],
        True,
    ),
    ("ran, pods gone", "job", job("job_running", deletionTimestamp=CREATED), [], True),
    ("never admitted by Kueue", "job", job("job_suspended", deletionTimestamp=CREATED), [], False),
    (
        "started by its controller, pods gone",
        "job",
        job("job_pods_created", deletionTimestamp=CREATED),
        [],
        None,
    ),
    (
        "stopped by gpuq before any pod started",
        "job",
        job(
            "job_pods_created",
            deletionTimestamp=CREATED,
            annotations={"gpuq.io/stopped-before-start": CREATED},
        ),
        [],
        False,
    ),
    (
        "image never pulled",
        "job",
        job("job_pods_created"),
        [pod("pod_image_pull_backoff", created="2025-06-15T14:00:00Z")],
        False,
    ),
    (
        "volcano, never Running",
        "vcjob",
        vcjob("vcjob_pending", deletionTimestamp=CREATED),
        [],
        False,
    ),
    (
        "volcano, was Running",
        "vcjob",
        vcjob("vcjob_restarting", 1, deletionTimestamp=CREATED),
        [],
        True,
    ),
]


@pytest.mark.parametrize(
    ("title", "kind", "obj", "pods", "started"), STARTED, ids=[s[0] for s in STARTED]
)
def test_an_end_says_whether_the_workload_ever_ran_where_its_objects_tell(
    title: str, kind: str, obj: Any, pods: Any, started: bool | None
) -> None:
    seen = observe(f"ns/{kind}/j", kind, obj, pods, now=NOW, image_pull_grace_s=GRACE)
    assert seen.status.state in R.TERMINAL
    assert seen.status.started is started, seen.status
