"""A Kubernetes node's CPUs and memory: its `status.allocatable` cpu and memory (what
kube-scheduler places pods by, after system reservations), whole CPUs and MiB. What gpuq
charges CPU- and memory-heavy jobs by (in GPUs); unknown when not reported.

No API server runs here (docs/kubernetes.md): the quantities below are written in the forms
the API server returns them (resource.Quantity's canonical form: `95690m`, `1056374068Ki`,
`503Gi`, decimal exponents)."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_sim import SHAPES, fill

from queue_service.backends.kubernetes import KubernetesBackend
from queue_service.backends.kubernetes.config import parse_settings
from queue_service.backends.kubernetes.inventory import node_info, parse_quantity

SETTINGS = parse_settings({"kubeconfig": "x"})


def gpu_node(**allocatable: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "n1",
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": "8",
            },
        },
        "spec": {},
        "status": {
            **fill(SHAPES["node_ready"], time="t"),
            "allocatable": {"nvidia.com/gpu": "8", "pods": "110", **allocatable},
        },
    }


# (allocatable cpu and memory, the node's CPUs and MiB)
ALLOCATABLE = [
    ("whole CPUs, KiB", {"cpu": "128", "memory": "1056374068Ki"}, (128, 1031615)),
    ("millicores after system reservations", {"cpu": "95690m", "memory": "503Gi"}, (95, 515072)),
    ("decimal memory", {"cpu": "96", "memory": "1000G"}, (96, 953674)),
    ("an exponent", {"cpu": "64", "memory": "5e11"}, (64, 476837)),
    ("plain bytes", {"cpu": "8", "memory": "17179869184"}, (8, 16384)),
    ("not reported", {}, (None, None)),
    ("less than a CPU", {"cpu": "500m", "memory": "100Ki"}, (None, None)),
    ("not a quantity", {"cpu": "lots", "memory": "1 Gi"}, (None, None)),
]


@pytest.mark.parametrize(
    ("allocatable", "says"), [c[1:] for c in ALLOCATABLE], ids=[c[0] for c in ALLOCATABLE]
)
def test_a_nodes_cpus_and_memory_are_its_allocatable(
    allocatable: dict[str, str], says: tuple[int | None, int | None]
) -> None:
    info = node_info(gpu_node(**allocatable), SETTINGS)
    assert info is not None
    assert (info.cpus, info.memory_mb) == says


QUANTITIES = [("1", 1.0), ("1500m", 1.5), ("2Ki", 2048.0), ("1M", 1e6), ("1.5Gi", 1.5 * 2**30)]


@pytest.mark.parametrize(("text", "value"), QUANTITIES)
def test_quantities_read_as_numbers(text: str, value: float) -> None:
    assert parse_quantity(text) == value


def test_the_backend_reports_allocatable_cpus_and_memory(backend: KubernetesBackend) -> None:
    """Through the fake API server: its nodes offer 128 CPUs and 1056374068Ki."""
    assert {(n.name, n.cpus, n.memory_mb) for n in backend.nodes()} == {
        (f"h100-{i:02d}", 128, 1031615) for i in range(1, 5)
    }
