"""MIG GPU-instance profiles per GPU model, as data.

Transcribed from NVIDIA's MIG User Guide and real `nvidia-smi mig -lgip/-lgipp` output (via the
project's reference table) because the service may not read reference files at run time. Models
marked "names_verified" or "inferred" assume the A100/H100 placement rules; a cluster overrides a
table with what its nodes report (see scheduler.mig.geometry).

start/size are in memory-slice units (NVML placements). A profile row is
(name, compute slices, memory slices, max instances per GPU, valid starts, size).
"""

from __future__ import annotations

from typing import Final, TypedDict

ProfileRow = tuple[str, int, int, int, tuple[int, ...], int]


class ModelData(TypedDict):
    aliases: tuple[str, ...]
    compute_slices: int
    memory_slices: int
    confidence: str  # "verified" | "names_verified" | "inferred"
    profiles: tuple[ProfileRow, ...]


MODELS: Final[dict[str, ModelData]] = {
    "A100-SXM4-40GB": {
        "aliases": ("A100-PCIE-40GB", "A800-40GB"),
        "compute_slices": 7,
        "memory_slices": 8,
        "confidence": "verified",
        "profiles": (
            ("1g.5gb", 1, 1, 7, (0, 1, 2, 3, 4, 5, 6), 1),
            ("1g.5gb+me", 1, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
            ("1g.10gb", 1, 2, 4, (0, 2, 4, 6), 2),
            ("2g.10gb", 2, 2, 3, (0, 2, 4), 2),
            ("3g.20gb", 3, 4, 2, (0, 4), 4),
            ("4g.20gb", 4, 4, 1, (0,), 4),
            ("7g.40gb", 7, 8, 1, (0,), 8),
        ),
    },
    "A100-SXM4-80GB": {
        "aliases": ("A100-PCIE-80GB", "A800-80GB"),
        "compute_slices": 7,
        "memory_slices": 8,
        "confidence": "names_verified",
        "profiles": (
            ("1g.10gb", 1, 1, 7, (0, 1, 2, 3, 4, 5, 6), 1),
            ("1g.10gb+me", 1, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
            ("1g.20gb", 1, 2, 4, (0, 2, 4, 6), 2),
            ("2g.20gb", 2, 2, 3, (0, 2, 4), 2),
            ("3g.40gb", 3, 4, 2, (0, 4), 4),
            ("4g.40gb", 4, 4, 1, (0,), 4),
            ("7g.80gb", 7, 8, 1, (0,), 8),
        ),
    },
    "A30-24GB": {
        "aliases": ("A30-PCIE-24GB",),
        "compute_slices": 4,
        "memory_slices": 4,
        "confidence": "verified",
        "profiles": (
            ("1g.6gb", 1, 1, 4, (0, 1, 2, 3), 1),
            ("1g.6gb+me", 1, 1, 1, (0, 1, 2, 3), 1),
            ("2g.12gb", 2, 2, 2, (0, 2), 2),
            ("2g.12gb+me", 2, 2, 1, (0, 2), 2),
            ("4g.24gb", 4, 4, 1, (0,), 4),
        ),
    },
    "H100-80GB": {
        "aliases": ("H100-SXM5-80GB", "H100-PCIE-80GB", "H800-80GB", "NVIDIA H100 80GB HBM3"),
        "compute_slices": 7,
        "memory_slices": 8,
        "confidence": "verified",
        "profiles": (
            ("1g.10gb", 1, 1, 7, (0, 1, 2, 3, 4, 5, 6), 1),
            ("1g.10gb+me", 1, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
            ("1g.20gb", 1, 2, 4, (0, 2, 4, 6), 2),
            ("2g.20gb", 2, 2, 3, (0, 2, 4), 2),
            ("3g.40gb", 3, 4, 2, (0, 4), 4),
            ("4g.40gb", 4, 4, 1, (0,), 4),
            ("7g.80gb", 7, 8, 1, (0,), 8),
        ),
    },
    "H100-94GB": {
        "aliases": ("H100 NVL", "H800 NVL", "H100-SXM5-94GB", "H100-PCIE-94GB"),
        "compute_slices": 7,
        "memory_slices": 8,
        "confidence": "verified",
        "profiles": (
            ("1g.12gb", 1, 1, 7, (0, 1, 2, 3, 4, 5, 6), 1),
            ("1g.12gb+me", 1, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
            ("1g.24gb", 1, 2, 4, (0, 2, 4, 6), 2),
            ("2g.24gb", 2, 2, 3, (0, 2, 4), 2),
            ("3g.47gb", 3, 4, 2, (0, 4), 4),
            ("4g.47gb", 4, 4, 1, (0,), 4),
            ("7g.94gb", 7, 8, 1, (0,), 8),
        ),
    },
    "H100-96GB": {
        "aliases": ("GH200 (96GB HBM3)", "H20", "PG506-96GB"),
        "compute_slices": 7,
        "memory_slices": 8,
        "confidence": "inferred",
        "profiles": (
            ("1g.12gb", 1, 1, 7, (0, 1, 2, 3, 4, 5, 6), 1),
            ("1g.24gb", 1, 2, 4, (0, 2, 4, 6), 2),
            ("2g.24gb", 2, 2, 3, (0, 2, 4), 2),
            ("3g.48gb", 3, 4, 2, (0, 4), 4),
            ("4g.48gb", 4, 4, 1, (0,), 4),
            ("7g.96gb", 7, 8, 1, (0,), 8),
        ),
    },
    "H200-141GB": {
        "aliases": ("H200-SXM5-141GB", "H200 NVL", "NVIDIA H200 141GB HBM3e"),
        "compute_slices": 7,
        "memory_slices": 8,
        "confidence": "names_verified",
        "profiles": (
            ("1g.18gb", 1, 1, 7, (0, 1, 2, 3, 4, 5, 6), 1),
            ("1g.18gb+me", 1, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
            ("1g.35gb", 1, 2, 4, (0, 2, 4, 6), 2),
            ("2g.35gb", 2, 2, 3, (0, 2, 4), 2),
            ("3g.71gb", 3, 4, 2, (0, 4), 4),
            ("4g.71gb", 4, 4, 1, (0,), 4),
            ("7g.141gb", 7, 8, 1, (0,), 8),
        ),
    },
    "GH200-144GB": {
        "aliases": ("GH200 144G HBM3e",),
        "compute_slices": 7,
        "memory_slices": 8,
        "confidence": "inferred",
        "profiles": (
            ("1g.18gb", 1, 1, 7, (0, 1, 2, 3, 4, 5, 6), 1),
            ("1g.18gb+me", 1, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
            ("1g.36gb", 1, 2, 4, (0, 2, 4, 6), 2),
            ("2g.36gb", 2, 2, 3, (0, 2, 4), 2),
            ("3g.72gb", 3, 4, 2, (0, 4), 4),
            ("4g.72gb", 4, 4, 1, (0,), 4),
            ("7g.144gb", 7, 8, 1, (0,), 8),
        ),
    },
    "B200-180GB": {
        "aliases": ("NVIDIA B200",),
        "compute_slices": 7,
        "memory_slices": 8,
        "confidence": "names_verified",
        "profiles": (
            ("1g.23gb", 1, 1, 7, (0, 1, 2, 3, 4, 5, 6), 1),
            ("1g.23gb+me", 1, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
            ("1g.45gb", 1, 2, 4, (0, 2, 4, 6), 2),
            ("2g.45gb", 2, 2, 3, (0, 2, 4), 2),
            ("3g.90gb", 3, 4, 2, (0, 4), 4),
            ("4g.90gb", 4, 4, 1, (0,), 4),
            ("7g.180gb", 7, 8, 1, (0,), 8),
        ),
    },
    "GB200-186GB": {
        "aliases": ("GB200 HGX",),
        "compute_slices": 7,
        "memory_slices": 8,
        "confidence": "inferred",
        "profiles": (
            ("1g.23gb", 1, 1, 7, (0, 1, 2, 3, 4, 5, 6), 1),
            ("1g.23gb+me", 1, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
            ("1g.47gb", 1, 2, 4, (0, 2, 4, 6), 2),
            ("2g.47gb", 2, 2, 3, (0, 2, 4), 2),
            ("3g.93gb", 3, 4, 2, (0, 4), 4),
            ("4g.93gb", 4, 4, 1, (0,), 4),
            ("7g.186gb", 7, 8, 1, (0,), 8),
        ),
    },
}
