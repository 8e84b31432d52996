"""Inventory from Node objects: GPUs, GFD labels, states and canonical MIG placements."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_sim import SHAPES, fill

from queue_service.backends.base import MigInstanceInfo
from queue_service.backends.kubernetes.config import parse_settings
from queue_service.backends.kubernetes.inventory import A30, canonical_layout, inventory, node_info

SETTINGS = parse_settings(
    {
        "kubeconfig": "x",
        "mig_configs": {"all-balanced": [["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]]},
    }
)


def node(
    name: str = "n1",
    *,
    labels: dict[str, str] | None = None,
    alloc: dict[str, str] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": "2",
                "nvidia.com/gpu.memory": "81559",
                **(labels or {}),
            },
        },
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            **fill(SHAPES["node_ready" if ready else "node_not_ready"], time="t"),
            "allocatable": alloc or {"nvidia.com/gpu": "2"},
        },
    }


def test_whole_gpu_node() -> None:
    info = node_info(node(), SETTINGS)
    assert info is not None
    assert (info.gpu_model, info.gpus, info.mig, info.state) == ("H100-80GB-HBM3", 2, False, "up")
    assert info.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_mixed_mig_resources_get_deterministic_canonical_placements() -> None:
    alloc = {
        "nvidia.com/gpu": "0",
        "nvidia.com/mig-1g.10gb": "4",
        "nvidia.com/mig-2g.20gb": "2",
        "nvidia.com/mig-3g.40gb": "2",
    }
    info = node_info(node(alloc=alloc, labels={"nvidia.com/mig.strategy": "mixed"}), SETTINGS)
    assert info is not None and info.mig
    layout = [(m.gpu, m.profile, m.start, m.size) for m in info.mig_instances]
    assert layout == [
        (0, "2g.20gb", 0, 2),
        (0, "2g.20gb", 2, 2),
        (0, "3g.40gb", 4, 4),
        (1, "1g.10gb", 0, 1),
        (1, "1g.10gb", 1, 1),
        (1, "1g.10gb", 2, 1),
        (1, "1g.10gb", 3, 1),
        (1, "3g.40gb", 4, 4),
    ]
    again = node_info(node(alloc=alloc, labels={"nvidia.com/mig.strategy": "mixed"}), SETTINGS)
    assert again == info  # the same answer every sync


def test_a_known_mig_config_gives_its_exact_per_gpu_layout() -> None:
    alloc = {
        "nvidia.com/mig-1g.10gb": "4",
        "nvidia.com/mig-2g.20gb": "2",
        "nvidia.com/mig-3g.40gb": "2",
    }
    info = node_info(node(alloc=alloc, labels={"nvidia.com/mig.config": "all-balanced"}), SETTINGS)
    assert info is not None
    per_gpu = [
        sorted((m.profile, m.start) for m in info.mig_instances if m.gpu == g) for g in (0, 1)
    ]
    assert (
        per_gpu[0] == per_gpu[1] == [("1g.10gb", 2), ("1g.10gb", 3), ("2g.20gb", 0), ("3g.40gb", 4)]
    )


def test_double_memory_1g_slices_take_two_memory_slices() -> None:
    layout = canonical_layout(1, {"1g.10gb": 1, "1g.20gb": 2}, gpu_memory_gb=80)
    assert [(m.profile, m.start, m.size) for m in layout] == [
        ("1g.20gb", 0, 2),
        ("1g.20gb", 2, 2),
        ("1g.10gb", 4, 1),
    ]


def test_a30_geometry() -> None:
    layout = canonical_layout(1, {"2g.12gb": 1, "1g.6gb": 2}, geometry=A30)
    assert [(m.profile, m.start) for m in layout] == [("2g.12gb", 0), ("1g.6gb", 2), ("1g.6gb", 3)]


def test_single_strategy_counts_slices_as_gpus() -> None:
    n = node(
        labels={
            "nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb",
            "nvidia.com/gpu.count": "1",
            "nvidia.com/gpu.memory": "40960",
        },
        alloc={"nvidia.com/gpu": "7"},
    )
    info = node_info(n, SETTINGS)
    assert info is not None
    assert info.gpu_model == "A100-SXM4-40GB" and info.mig and len(info.mig_instances) == 7


@pytest.mark.parametrize(
    ("kwargs", "state", "reason"),
    [
        ({"ready": False}, "down", "Kubelet stopped posting node status."),
        ({"unschedulable": True}, "drain", "cordoned"),
        (
            {
                "labels": {
                    "nvidia.com/mig.config": "all-1g",
                    "nvidia.com/mig.config.state": "pending",
                }
            },
            "drain",
            "pending",
        ),
        (
            {
                "labels": {
                    "nvidia.com/mig.config": "all-1g",
                    "nvidia.com/mig.config.state": "failed",
                }
            },
            "drain",
            "failed",
        ),
        (
            {
                "labels": {
                    "nvidia.com/mig.config": "all-1g",
                    "nvidia.com/mig.config.state": "success",
                }
            },
            "up",
            "",
        ),
    ],
)
def test_node_state_from_readiness_cordon_and_mig_manager(
    kwargs: dict[str, Any], state: str, reason: str
) -> None:
    info = node_info(node(**kwargs), SETTINGS)
    assert info is not None
    assert info.state == state and reason in info.reason


def test_cpu_only_nodes_are_left_out_and_slices_held_by_gpuq_pods_are_in_use() -> None:
    cpu = {"metadata": {"name": "cp", "labels": {}}, "status": {"allocatable": {"cpu": "8"}}}
    gpu = node(alloc={"nvidia.com/mig-1g.10gb": "2"})
    holder = {
        "metadata": {"name": "p", "labels": {"gpuq.io/job-id": "j1"}},
        "spec": {
            "nodeName": "n1",
            "containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}],
        },
        "status": {"phase": "Running"},
    }
    infos = inventory([cpu, gpu], [holder], SETTINGS)
    assert [i.name for i in infos] == ["n1"]
    assert infos[0].mig_instances == (
        MigInstanceInfo(0, "1g.10gb", 0, 1, True, "j1"),
        MigInstanceInfo(0, "1g.10gb", 1, 1, False, None),
    )


ME_NODE = node(
    labels={"nvidia.com/gpu.count": "1"},
    alloc={"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb.me": "1", "nvidia.com/mig-1g.10gb": "6"},
)


def test_inventory_reports_the_media_extension_slices_a_node_offers() -> None:
    """The device plugin advertises profile 1g.10gb+me as nvidia.com/mig-1g.10gb.me ('+' is
    not allowed in a resource name): it is the slice a `1g.10gb+me` job needs."""
    info = node_info(ME_NODE, SETTINGS)
    assert info is not None
    assert sorted(m.profile for m in info.mig_instances) == ["1g.10gb"] * 6 + ["1g.10gb+me"]


def test_a_media_extension_slice_held_by_a_gpuq_pod_is_in_use() -> None:
    holder = {
        "metadata": {"name": "p", "labels": {"gpuq.io/job-id": "j1"}},
        "spec": {
            "nodeName": "n1",
            "containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb.me": "1"}}}],
        },
        "status": {"phase": "Running"},
    }
    (info,) = inventory([ME_NODE], [holder], SETTINGS)
    assert [(m.profile, m.external_job) for m in info.mig_instances if m.in_use] == [
        ("1g.10gb+me", "j1")
    ]
