"""The inventory counts the GPUs and MIG slices every pod not ended holds, gpuq's or not."""

from __future__ import annotations

import copy
from typing import Any

from conftest import FakeClock, make_backend
from k8s_fakeapi import FakeApiServer
from k8s_sim import Sim


def _pods_type(sim: Sim) -> Any:
    return sim._t(("", "v1", "pods"))


def test_a_mig_slice_held_by_a_pod_outside_gpuq_is_reported_in_use(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """Slices held by pods that are not gpuq's (another namespace's inference server) are in
    use, naming no gpuq job, as kube-scheduler counts them; a pod that has ended holds none."""
    sim.node("a100-01", product="NVIDIA-A100-SXM4-40GB", gpus=1, mig={"1g.5gb": 7}, memory_mb=40960)
    sim.namespace("research")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "triton-0", "namespace": "research", "labels": {"app": "triton"}},
        "spec": {
            "nodeName": "a100-01",
            "restartPolicy": "Always",
            "containers": [
                {
                    "name": "server",
                    "image": "nvcr.io/nvidia/tritonserver:24.08-py3",
                    "resources": {
                        "limits": {"nvidia.com/mig-1g.5gb": "2"},
                        "requests": {"nvidia.com/mig-1g.5gb": "2"},
                    },
                }
            ],
        },
    }
    api.create(_pods_type(sim), "research", pod, "Strict", False)
    created = sim.store.get(_pods_type(sim), "research", "triton-0")
    sim._pod_status(created, "pod_running")
    ended = copy.deepcopy(pod)
    ended["metadata"]["name"] = "batch-0"
    api.create(_pods_type(sim), "research", ended, "Strict", False)
    sim._pod_status(sim.store.get(_pods_type(sim), "research", "batch-0"), "pod_succeeded")
    b = make_backend(api, clock)

    try:
        infos = {n.name: n for n in b.nodes()}
    finally:
        b.close()

    node = infos["a100-01"]
    assert len(node.mig_instances) == 7
    assert sum(m.in_use for m in node.mig_instances) == 2, node.mig_instances
    assert all(m.external_job is None for m in node.mig_instances)
