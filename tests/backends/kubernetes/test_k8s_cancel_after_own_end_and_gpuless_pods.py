"""A cancel that meets a job already ended by itself (a Volcano gang failed at its last
retry, a batch Job whose pods succeeded before its controller said so) stops nothing; a pod
of a job of no GPUs sees none of its node's GPUs."""

from __future__ import annotations

from typing import Any

from conftest import NAMESPACE, FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer, now_rfc3339
from k8s_sim import SHAPES, Sim, fill

from queue_service.backends.kubernetes import manifests
from queue_service.backends.kubernetes.config import parse_settings


def _pods_type(sim: Sim) -> Any:
    return sim._t(("", "v1", "pods"))


# --- a cancel must not turn a job's own end into a cancellation ------------------------------


def test_cancel_of_a_volcano_gang_that_already_failed_by_itself_stops_nothing(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """At the last in-place retry Volcano marks the job `Failed` at once and deletes the
    gang's other pods (state/restarting.go), which stop within their grace. The job has
    ended on its own, as a batch Job marked `FailureTarget` or a Volcano Job `Completing`
    has: cancel must delete nothing and return False (base.py's contract), so that the job
    keeps its own end (failed, exit 3) instead of becoming `cancelled by alice`."""
    b = make_backend(api, clock, workload="volcano", image_default="img:1")
    # No retry causes: maxRetry 1, so the first failure is Volcano's last.
    eid = b.submit(request(nodes=2, retries_max=0, retry_on=())).external_id
    master, worker = sim.run(eid)
    api.store.pods_stop_at_once = False  # the master's kubelet confirms its stop later
    sim._pod_status(worker, "pod_failed_error", exit_code=3, reason="Error")
    with sim.store.lock:
        sim.store.delete(_pods_type(sim), NAMESPACE, master["metadata"]["name"], None, None)
    t, obj = sim.workload(eid)
    sim._set_status(
        t,
        NAMESPACE,
        obj["metadata"]["name"],
        fill(SHAPES["vcjob_failed"], time=now_rfc3339(clock()), n=2, retries=1),
    )
    stuck = next(p for p in sim.pods(eid) if p["metadata"]["name"] == master["metadata"]["name"])
    assert stuck["metadata"]["deletionTimestamp"] and stuck["status"]["phase"] == "Running"

    try:
        stopped = b.cancel(eid, grace_s=30)
    finally:
        b.close()

    assert stopped is False
    assert sim.workload(eid)[1]["metadata"].get("deletionTimestamp") is None


def test_cancel_of_a_batch_job_whose_pod_already_succeeded_stops_nothing(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """The pod exited 0 and the Job controller has not marked the Job `Complete` yet (it
    counts a pod's end some time after the kubelet reports it: pod-finalizer tracking and
    its queue). The job has succeeded on its own, as the same window is read for a pod that
    failed (test_k8s_ending_by_itself): cancel must delete nothing and return False, so the
    job ends `succeeded` with exit 0, not `cancelled`."""
    b = make_backend(api, clock, workload="indexed", image_default="img:1")
    eid = b.submit(request(kind="agent", gpus_per_node=1)).external_id
    (pod,) = sim.run(eid)
    sim._pod_status(pod, "pod_succeeded")  # the Job's own status still says it runs

    try:
        stopped = b.cancel(eid, grace_s=30)
    finally:
        b.close()

    assert stopped is False
    assert sim.workload(eid)[1]["metadata"].get("deletionTimestamp") is None


# --- manifests --------------------------------------------------------------------------------


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def test_a_job_of_no_gpus_is_not_handed_the_gpus_of_the_node_it_runs_on() -> None:
    """gpuq places every job on a GPU node, a job of no GPUs too (its pod tolerates the GPU
    taint). Without a GPU request the device plugin hands the container nothing, and the
    NVIDIA runtime then exposes what the image's `NVIDIA_VISIBLE_DEVICES` says: `all` in every
    CUDA image (nvcr.io/nvidia/pytorch included), i.e. the GPUs other jobs hold. The local
    backend gives such a job an empty CUDA_VISIBLE_DEVICES; here the pod must set
    NVIDIA_VISIBLE_DEVICES to `void` (or `none`), a name gpuq reserves for the backend."""
    settings = parse_settings({"kubeconfig": "x", "workload": "indexed"})
    plan = manifests.build(
        request(kind="agent", gpus_per_node=0, image="nvcr.io/nvidia/pytorch:24.08-py3"), settings
    )
    (container,) = plan.objects[0]["spec"]["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in (container.get("resources") or {}).get("limits", {})
    assert _env(container).get("NVIDIA_VISIBLE_DEVICES") in ("void", "none"), _env(container)
