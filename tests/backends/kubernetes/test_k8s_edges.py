"""Edge cases of the Kubernetes backend where the cluster says less than it seems to: a gang
half created, objects too large for etcd, a Volcano gang restarted or failed while pods still
wait or terminate, and nodes whose labels overstate what kube-scheduler will place there
(taints, GPUs the device plugin withdrew, the MIG `single` strategy, a relayout in flight).

Each case states what gpuq must report or do so that no job waits for ever on a node that
cannot take it, and no GPU is busy while gpuq thinks it free."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from conftest import NAMESPACE, FakeClock, make_backend, request
from k8s_fakeapi import MAX_BODY_BYTES, MAX_STORED_BYTES, FakeApiServer, Fault
from k8s_sim import SHAPES, Sim, _tolerates, fill

from queue_service.backends.base import AllocatedNode, BackendError
from queue_service.backends.base import RemoteState as R
from queue_service.backends.kubernetes import manifests
from queue_service.backends.kubernetes.config import parse_settings
from queue_service.backends.kubernetes.inventory import inventory, node_info
from queue_service.backends.kubernetes.status import observe

SETTINGS = parse_settings({"kubeconfig": "x"})
CREATED = "2025-06-15T15:06:40Z"
NOW = 1_750_000_000.0  # CREATED + 200 s
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}


# --- submit: nothing left running when gpuq reports failure ---------------------------------


def _left(api: FakeApiServer, api_version: str = "batch/v1") -> list[str]:
    """Names of the Jobs still on the cluster, being deleted or not."""
    objects = api.store.objects[api.store.rtype(api_version, "jobs")]
    return [o["metadata"]["name"] for o in objects.values()]


@pytest.mark.parametrize(
    "code", [403, 400], ids=["403 exceeded quota on services", "400 denied by a webhook"]
)
def test_a_gang_whose_service_is_refused_leaves_no_workload_running(
    api: FakeApiServer, sim: Sim, clock: FakeClock, code: int
) -> None:
    """An Indexed Job is created first, then its headless Service. If the Service is refused
    for good, submit raises a permanent error and the service marks the job FAILED with no
    external id: nothing would ever poll or stop the Job, whose pods would hold their GPUs.
    So the Job is deleted, gpuq's finalizer released with it."""
    b = make_backend(api, clock, workload="indexed")
    api.inject(Fault("status", code=code, method="POST", path_contains="/services"))
    with pytest.raises(BackendError) as err:
        b.submit(request(nodes=2))
    assert err.value.permanent
    assert _left(api) == [], "a gang gpuq reports failed is still on the cluster"


def test_a_transient_service_error_keeps_the_workload_for_the_retry(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = make_backend(api, clock, workload="indexed", max_retries=0)
    api.inject(Fault("status", code=503, method="POST", path_contains="/services"))
    with pytest.raises(BackendError) as err:
        b.submit(request(nodes=2))
    assert not err.value.permanent
    assert len(_left(api)) == 1
    assert b.submit(request(nodes=2)).adopted


def test_a_workload_too_large_for_etcd_is_refused_for_good_not_retried(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """gpuq's spec accepts large env and argv. A Volcano gang carries the env once per task
    template: 40 variables of 32 KiB make ~2.6 MB, past etcd's 1.5 MiB per object. The
    backend refuses it itself, permanently, before any call."""
    b = make_backend(api, clock, workload="volcano")
    env = {f"BLOB_{i}": "x" * 32768 for i in range(40)}
    with pytest.raises(BackendError) as err:
        b.submit(request(nodes=2, env=env))
    assert err.value.permanent and "too large" not in str(err.value)
    assert "bytes" in str(err.value) and api.calls("POST") == []


def test_etcds_refusal_past_gpuqs_own_guard_is_permanent_not_retried(
    api: FakeApiServer, sim: Sim, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 500 "etcdserver: request is too large" looks transient but never succeeds
    (kubernetes#112152): it must not keep the job in dispatch retries for ever."""
    monkeypatch.setattr(manifests, "MAX_OBJECT_BYTES", 10 * 1024 * 1024)
    b = make_backend(api, clock, workload="indexed")
    env = {f"BLOB_{i}": "x" * 32768 for i in range(60)}
    with pytest.raises(BackendError) as err:
        b.submit(request(nodes=1, env=env))
    assert err.value.permanent and "request is too large" in str(err.value)
    assert clock.sleeps == []


@pytest.mark.parametrize(
    ("size", "code", "message"),
    [
        (MAX_STORED_BYTES + 1024, 500, "etcdserver: request is too large"),
        (MAX_BODY_BYTES + 1024, 413, "Request entity too large: limit is 3145728"),
    ],
    ids=["past etcd's limit", "past the request body limit"],
)
def test_the_fake_refuses_objects_by_size_as_a_real_server(
    api: FakeApiServer, sim: Sim, size: int, code: int, message: str
) -> None:
    container = {"name": "main", "image": "busybox", "env": [{"name": "B", "value": "x" * size}]}
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "big"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }
    with httpx2.Client(base_url=api.url, trust_env=False) as c:
        answer = c.post(
            f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs",
            json=body,
            headers={"Authorization": "Bearer t0ken"},
        )
    assert (answer.status_code, answer.json()["message"]) == (code, message)


# --- status: Volcano gangs restarted or failed while pods wait or terminate -----------------


def test_a_volcano_gang_restarted_in_place_whose_image_never_pulls_fails_after_the_grace(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """docs/kubernetes.md: ImagePullBackOff / ErrImagePull / CreateContainerConfigError stay
    QUEUED for image_pull_grace_s, then FAILED. The gang Volcano recreates after an in-place
    restart may land where the image cannot be pulled (registry rate limit, a node without
    pull credentials, a deleted Secret)."""
    b = make_backend(api, clock, workload="volcano", image_pull_grace_s=300)
    eid = b.submit(request(nodes=2, retries_max=3)).external_id
    sim.run(eid)
    sim.evict(eid, cause="preemption")  # PodEvicted -> RestartJob: retryCount 1, recreated
    sim.image_pull_backoff(eid)
    assert b.poll([eid])[eid].state == R.QUEUED
    clock.now += 3600
    status = b.poll([eid])[eid]
    assert status.state == R.FAILED and "ImagePullBackOff" in status.reason, status
    assert _left(api, "batch.volcano.sh/v1alpha1") == [], "the gang that never starts is deleted"


def _vcjob(shape: str, retries: int) -> dict[str, Any]:
    # Volcano keeps retryCount through the phases after a restart.
    status = {"retryCount": retries, **fill(SHAPES[shape], time=CREATED, n=2, retries=retries)}
    return {"metadata": {"name": "v"}, "spec": {}, "status": status}


def _pod(shape: str, name: str, created: str = CREATED, **meta: Any) -> dict[str, Any]:
    status = fill(SHAPES[shape], time=created, image="img:1", exit_code=3, reason="Error")
    return {"metadata": {"name": name, "creationTimestamp": created, **meta}, "status": status}


VOLCANO = [
    (
        "restarted in place, the new gang's image within its grace",
        _vcjob("vcjob_pending", 1),
        [_pod("pod_image_pull_backoff", "v-master-0")],
        R.QUEUED,
        "restarting in place (retry 1); ImagePullBackOff in pod v-master-0",
    ),
    (
        "restarted in place, the new gang's image past its grace",
        _vcjob("vcjob_pending", 1),
        [_pod("pod_image_pull_backoff", "v-master-0", created="2025-06-15T14:00:00Z")],
        R.FAILED,
        "ImagePullBackOff in pod v-master-0",
    ),
    (
        # Volcano's last retry deletes the running pods and marks the job Failed at once
        # (job_controller_actions.go killJob, state/restarting.go).
        "failed while another pod still terminates on its GPUs",
        _vcjob("vcjob_failed", 1),
        [
            _pod("pod_failed_error", "v-master-0"),
            _pod("pod_running", "v-worker-0", deletionTimestamp=CREATED),
        ],
        R.RUNNING,
        "stopping: 1 pod not stopped yet",
    ),
    (
        "failed, its pods gone",
        _vcjob("vcjob_failed", 1),
        [_pod("pod_failed_error", "v-master-0")],
        R.FAILED,
        "exit code 3 in pod v-master-0",
    ),
]


@pytest.mark.parametrize(
    ("title", "obj", "pods", "state", "reason"), VOLCANO, ids=[v[0] for v in VOLCANO]
)
def test_a_volcano_gang_is_over_only_when_its_pods_are_and_its_waits_end(
    title: str, obj: Any, pods: Any, state: str, reason: str
) -> None:
    seen = observe("ns/vcjob/v", "vcjob", obj, pods, now=NOW, image_pull_grace_s=300)
    assert seen.status.state == state and reason in seen.status.reason, seen.status
    assert seen.stop is (state == R.FAILED and "ImagePull" in reason)


# --- inventory: a node is up only if gpuq's pods can land there ----------------------------


def _node(
    labels: dict[str, str], alloc: dict[str, str], taints: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": "n1", "labels": labels},
        "spec": {"taints": taints} if taints else {},
        "status": {**fill(SHAPES["node_ready"], time="t"), "allocatable": alloc},
    }


def _taint(key: str, effect: str, value: str = "") -> dict[str, str]:
    return {"key": key, "effect": effect, **({"value": value} if value else {})}


NODES = [
    (
        "disk pressure",
        {"nvidia.com/gpu": "8"},
        [_taint("node.kubernetes.io/disk-pressure", "NoSchedule")],
        (8, "drain", "tainted node.kubernetes.io/disk-pressure:NoSchedule"),
    ),
    (
        "the cluster autoscaler scaling it down",
        {"nvidia.com/gpu": "8"},
        [_taint("ToBeDeletedByClusterAutoscaler", "NoSchedule", "1750000000")],
        (8, "drain", "tainted ToBeDeletedByClusterAutoscaler=1750000000:NoSchedule"),
    ),
    (
        "out of service",
        {"nvidia.com/gpu": "8"},
        [_taint("node.kubernetes.io/out-of-service", "NoExecute", "nodeshutdown")],
        (8, "drain", "tainted node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"),
    ),
    (
        "a soft taint (PreferNoSchedule) keeps no pod away",
        {"nvidia.com/gpu": "8"},
        [_taint("team", "PreferNoSchedule", "vision")],
        (8, "up", ""),
    ),
    (
        "a GPU-pool taint gpuq's pods tolerate",
        {"nvidia.com/gpu": "8"},
        [_taint("nvidia.com/gpu", "NoSchedule", "present")],
        (8, "up", ""),
    ),
    (
        "a GPU-pool taint that evicts (NoExecute) is not tolerated",
        {"nvidia.com/gpu": "8"},
        [_taint("nvidia.com/gpu", "NoExecute", "present")],
        (8, "drain", "tainted nvidia.com/gpu=present:NoExecute"),
    ),
    (
        # Unhealthy GPUs (an Xid error, a GPU fallen off the bus) leave allocatable; GFD's
        # gpu.count still names them and kube-scheduler places by allocatable.
        "the device plugin withdrew a GPU",
        {"nvidia.com/gpu": "7"},
        None,
        (7, "up", ""),
    ),
    (
        "the device plugin offers no GPU",
        {"nvidia.com/gpu": "0"},
        None,
        (8, "drain", "the device plugin offers none of its 8 GPUs"),
    ),
]


@pytest.mark.parametrize(("title", "alloc", "taints", "expected"), NODES, ids=[n[0] for n in NODES])
def test_a_node_is_offered_only_as_far_as_kube_scheduler_would_place_gpuq_pods_there(
    title: str, alloc: dict[str, str], taints: Any, expected: tuple[int, str, str]
) -> None:
    info = node_info(_node(H100, alloc, taints), SETTINGS)
    assert info is not None
    assert (info.gpus, info.state, info.reason) == expected


def test_gpuq_pods_tolerate_the_gpu_taints_inventory_counts_on_a_job_of_no_gpus_too() -> None:
    """ExtendedResourceToleration is an admission plugin that is off by default: the pods
    carry the tolerations themselves. A job of no GPUs tolerates `nvidia.com/gpu` as well:
    gpuq places every job on a GPU node (inventory lists no other), and counts it there."""

    def tolerations(**overrides: Any) -> list[dict[str, str]]:
        plan = manifests.build(request(**overrides), SETTINGS)
        return plan.objects[0]["spec"]["template"]["spec"].get("tolerations", [])

    whole = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    mig = {"key": "nvidia.com/mig-1g.10gb", "operator": "Exists", "effect": "NoSchedule"}
    assert tolerations(kind="agent", gpus_per_node=1) == [whole]
    assert tolerations(kind="agent", gpus_per_node=0, mig_profile="1g.10gb") == [whole, mig]
    assert tolerations(kind="agent", gpus_per_node=0) == [whole]


def test_a_job_of_no_gpus_tolerates_the_gpu_taint_of_the_node_inventory_offered_it() -> None:
    """A node tainted `nvidia.com/gpu:NoSchedule` (GKE taints every GPU node so; many pools
    do) is `up` for gpuq, which may place a job of no GPUs there (`gpus_per_node: 0`, its
    CPUs counted). kube-scheduler's TaintToleration filter binds its pod only if it tolerates
    the taint; else it waits for ever on a node gpuq counts it on."""
    taint = _taint("nvidia.com/gpu", "NoSchedule", "present")
    node = _node(H100, {"cpu": "128", "memory": "1056374068Ki", "nvidia.com/gpu": "8"}, [taint])
    info = node_info(node, SETTINGS)
    assert info is not None and info.state == "up"
    job = request(
        kind="agent", gpus_per_node=0, cpus_per_gpu=4, placement=(AllocatedNode(node="n1"),)
    )
    pod = manifests.build(job, SETTINGS).objects[0]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "n1"}
    assert any(_tolerates(t, taint) for t in pod["tolerations"])


# GPU Feature Discovery, MIG 'single' strategy (NVIDIA/k8s-device-plugin
# docs/gpu-feature-discovery/README.md): gpu.product gets "-MIG-<profile>", and gpu.count and
# gpu.memory are *overridden* to the number of MIG devices and the memory of each.
def _single(product: str, devices: int, memory_mb: int) -> dict[str, Any]:
    labels = {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(devices),
        "nvidia.com/gpu.memory": str(memory_mb),
    }
    return _node(labels, {"nvidia.com/gpu": str(devices)})


SINGLE_ONE_A100 = _single("A100-SXM4-40GB-MIG-1g.5gb", 7, 4864)

SINGLE = [
    (
        "one A100 split all-1g.5gb",
        SINGLE_ONE_A100,
        1,
        [(0, s, 1) for s in range(7)],
    ),
    (
        "two A100s split all-3g.20gb",
        _single("A100-SXM4-40GB-MIG-3g.20gb", 4, 19968),
        2,
        [(0, 0, 4), (0, 4, 4), (1, 0, 4), (1, 4, 4)],
    ),
    (
        "two A100s split all-1g.10gb: a 1g slice with two memory slices",
        _single("A100-SXM4-40GB-MIG-1g.10gb", 8, 9856),
        2,
        [(g, s, 2) for g in (0, 1) for s in (0, 2, 4, 6)],
    ),
]


@pytest.mark.parametrize(("title", "node", "gpus", "slices"), SINGLE, ids=[s[0] for s in SINGLE])
def test_a_single_strategy_node_reports_its_physical_gpus_and_true_slice_sizes(
    title: str, node: dict[str, Any], gpus: int, slices: list[tuple[int, int, int]]
) -> None:
    info = node_info(node, SETTINGS)
    assert info is not None and info.mig
    assert info.gpus == gpus, info
    assert sorted((m.gpu, m.start, m.size) for m in info.mig_instances) == slices


def test_a_slice_held_by_a_gpuq_pod_is_in_use_under_the_single_strategy() -> None:
    """docs/kubernetes.md: "Slices held by gpuq pods are marked in use". With
    mig_strategy: single a gpuq MIG job requests `nvidia.com/gpu: 1` (manifests._resources),
    and every nvidia.com/gpu of a single-strategy node is a slice."""
    holder = {
        "metadata": {"name": "p", "labels": {"gpuq.io/job-id": "j1"}},
        "spec": {
            "nodeName": "n1",
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }
    single = parse_settings({"kubeconfig": "x", "mig_strategy": "single"})
    (info,) = inventory([SINGLE_ONE_A100], [holder], single)
    assert [m.external_job for m in info.mig_instances if m.in_use] == ["j1"]


MIG_CONFIGS = {"all-7g.80gb": ["7g.80gb"], "all-1g.10gb": ["1g.10gb"] * 7}
LAYOUTS = {"all-7g.80gb": {"7g.80gb": 1}, "all-1g.10gb": {"1g.10gb": 7}}


def test_a_node_whose_relayout_is_requested_is_not_up_before_the_new_layout_is_offered(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """The service drains the node and sets nvidia.com/mig.config; its next sync stores
    whatever nodes() reports. Until the MIG manager has written `pending` (it may be slow,
    restarting, or not deployed on that node), the state label still says `success` for the
    old layout, whose 7g slice the MIG manager is about to destroy."""
    sim.node(
        "h100-mig",
        gpus=1,
        mig={"7g.80gb": 1},
        labels={"nvidia.com/mig.config": "all-7g.80gb", "nvidia.com/mig.config.state": "success"},
    )
    b = make_backend(api, clock, mig_configs=MIG_CONFIGS)

    def state() -> tuple[str, str]:
        (info,) = [n for n in b.nodes() if n.name == "h100-mig"]
        return info.state, info.reason

    assert state() == ("up", "")
    b.apply_mig_layout("h100-mig", "all-1g.10gb")
    assert state() == ("drain", "MIG reconfiguration to 'all-1g.10gb' requested, not applied yet")
    assert sim.mig_manager_step("h100-mig", layouts=LAYOUTS) == "pending"
    assert state() == ("drain", "MIG reconfiguration to 'all-1g.10gb' pending")
    assert sim.mig_manager_step("h100-mig", layouts=LAYOUTS) == "success"
    assert state() == ("up", "")
