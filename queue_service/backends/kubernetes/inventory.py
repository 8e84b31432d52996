"""Pure inventory: Node objects (and the pods not ended, gpuq's and others') as the API server
returns them, in; NodeInfo out.

Kubernetes tells how many MIG devices of each profile a node offers, not where they sit. The
placements reported here are canonical: the per-GPU layout of the node's current
`nvidia.com/mig.config` from the cluster's `mig_configs` catalogue when known, otherwise a
first-fit-decreasing packing over the node's GPUs at the lowest legal start (a 3g slice
prefers start 4, as NVIDIA recommends). Deterministic, so two syncs agree."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..base import MigInstanceInfo, NodeInfo
from .config import K8sSettings
from .manifests import GPU_RESOURCE, JOB_ID_LABEL, MIG_RESOURCE, mig_profile

Obj = Mapping[str, Any]

PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"
MEMORY_LABEL = "nvidia.com/gpu.memory"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"  # GFD's: single | mixed (| none)
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"  # the node lifecycle controller's
NOT_READY_TAINT = "node.kubernetes.io/not-ready"  # its too, when the kubelet says NotReady
KEPT_LABEL_PREFIXES = ("nvidia.com/", "gpuq.io/")
_PROFILE = re.compile(r"^(\d)g\.(\d+)gb(\+me)?$")
_SINGLE_PRODUCT = re.compile(r"^(?P<model>.+)-MIG-(?P<profile>\dg\.\d+gb(\+me)?)$")
_MODEL_MEMORY = re.compile(r"(\d+)GB")


@dataclass(frozen=True)
class _Geometry:
    memory_slices: int
    compute_slices: int
    # compute slices -> (memory slices, legal starts in preference order)
    shapes: Mapping[int, tuple[int, tuple[int, ...]]]


SEVEN_SLICE = _Geometry(
    8,
    7,
    {7: (8, (0,)), 4: (4, (0,)), 3: (4, (4, 0)), 2: (2, (0, 2, 4)), 1: (1, tuple(range(7)))},
)
A30 = _Geometry(4, 4, {4: (4, (0,)), 2: (2, (0, 2)), 1: (1, (0, 1, 2, 3))})
DOUBLE_1G_STARTS = (0, 2, 4, 6)


def parse_quantity_int(value: Any) -> int:
    """Whole-number quantities only (extended resources are whole numbers)."""
    try:
        return int(str(value))
    except ValueError:
        return 0


# Kubernetes quantity suffixes (k8s.io/apimachinery resource.Quantity): binary, decimal.
_QUANTITY = re.compile(
    r"^([+]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E))?$"
)
_SUFFIX = {
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    **{s: 1024.0 ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}


def parse_quantity(value: Any) -> float | None:
    """A quantity (`96`, `95500m`, `1056374068Ki`, `512Gi`, `1e9`) as a number; None if it
    is not one."""
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        return None
    number, exponent, suffix = match.groups()
    if exponent:
        return float(number + exponent)
    return float(number) * _SUFFIX.get(suffix or "", 1.0)


def _cpus_and_memory(allocatable: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """Allocatable CPUs (whole: 95500m is 95) and memory in MiB; None: not reported."""
    cpu = parse_quantity(allocatable.get("cpu", ""))
    memory = parse_quantity(allocatable.get("memory", ""))
    cpus = int(cpu) if cpu is not None and cpu >= 1 else None
    mib = int(memory // 2**20) if memory is not None and memory >= 2**20 else None
    return cpus, mib


def _parse(profile: str) -> tuple[int, int] | None:
    m = _PROFILE.match(profile)
    return (int(m[1]), int(m[2])) if m else None


def _shape(
    profile: str, geometry: _Geometry, profiles: Sequence[str], gpu_memory_gb: float | None
) -> tuple[int, int, tuple[int, ...]] | None:
    """(compute, memory-slice size, starts) of a profile on this geometry."""
    parsed = _parse(profile)
    if parsed is None or parsed[0] not in geometry.shapes:
        return None
    compute, mem = parsed
    size, starts = geometry.shapes[compute]
    if compute == 1 and geometry is SEVEN_SLICE:
        smaller_1g = any(
            (p := _parse(other)) is not None and p[0] == 1 and p[1] < mem for other in profiles
        )
        per_slice = gpu_memory_gb / geometry.memory_slices if gpu_memory_gb else None
        if smaller_1g or (per_slice is not None and mem >= 1.5 * per_slice):
            return compute, 2, DOUBLE_1G_STARTS
    return compute, size, starts


class _Gpu:
    def __init__(self, geometry: _Geometry) -> None:
        self.used = [False] * geometry.memory_slices
        self.compute_left = geometry.compute_slices

    def take(self, compute: int, size: int, start: int) -> bool:
        span = range(start, start + size)
        if compute > self.compute_left or span.stop > len(self.used):
            return False
        if any(self.used[i] for i in span):
            return False
        for i in span:
            self.used[i] = True
        self.compute_left -= compute
        return True

    def give(self, compute: int, size: int, start: int) -> None:
        for i in range(start, start + size):
            self.used[i] = False
        self.compute_left += compute

    def place(self, compute: int, size: int, starts: Sequence[int]) -> int | None:
        return next((s for s in starts if self.take(compute, size, s)), None)


def canonical_layout(
    gpus: int,
    counts: Mapping[str, int],
    *,
    geometry: _Geometry = SEVEN_SLICE,
    per_gpu: Sequence[Sequence[str]] | None = None,
    gpu_memory_gb: float | None = None,
) -> tuple[MigInstanceInfo, ...]:
    """Deterministic placements for `counts` MIG devices on `gpus` GPUs. A per-GPU layout
    (from the mig_configs catalogue) is used when its totals match the counts."""
    profiles = sorted(counts)
    if per_gpu:
        layout = [per_gpu[0]] * gpus if len(per_gpu) == 1 else list(per_gpu)
        totals: dict[str, int] = {}
        for gpu_profiles in layout:
            for p in gpu_profiles:
                totals[p] = totals.get(p, 0) + 1
        if totals == {p: n for p, n in counts.items() if n} and len(layout) == gpus:
            return _place_per_gpu(layout, geometry, profiles, gpu_memory_gb)
    shapes = {p: _shape(p, geometry, profiles, gpu_memory_gb) for p in profiles}
    wanted = [
        (p, shape) for p in profiles if (shape := shapes[p]) is not None for _ in range(counts[p])
    ]
    wanted.sort(key=lambda w: (-w[1][1], -w[1][0], w[0]))
    cards = [_Gpu(geometry) for _ in range(gpus)]
    placed: list[MigInstanceInfo] = []
    budget = [20_000]

    def search(i: int) -> bool:
        """Backtracking, largest first: counts come from real GPUs, so a layout exists."""
        if i == len(wanted):
            return True
        budget[0] -= 1
        if budget[0] < 0:
            return False
        profile, (compute, size, starts) = wanted[i]
        tried_empty = False
        for index, card in enumerate(cards):
            empty = card.compute_left == geometry.compute_slices
            if empty and tried_empty:  # identical empty GPUs: trying one is enough
                continue
            tried_empty = tried_empty or empty
            for start in starts:
                if card.take(compute, size, start):
                    placed.append(
                        MigInstanceInfo(gpu=index, profile=profile, start=start, size=size)
                    )
                    if search(i + 1):
                        return True
                    placed.pop()
                    card.give(compute, size, start)
        return False

    if not search(0):  # inconsistent counts (a relayout in flight): place what fits
        placed.clear()
        cards = [_Gpu(geometry) for _ in range(gpus)]
        for profile, (compute, size, starts) in wanted:
            for index, card in enumerate(cards):
                start = next((s for s in starts if card.take(compute, size, s)), None)
                if start is not None:
                    placed.append(
                        MigInstanceInfo(gpu=index, profile=profile, start=start, size=size)
                    )
                    break
    return tuple(sorted(placed, key=lambda m: (m.gpu, m.start)))


def _place_per_gpu(
    layout: Sequence[Sequence[str]],
    geometry: _Geometry,
    profiles: Sequence[str],
    gpu_memory_gb: float | None,
) -> tuple[MigInstanceInfo, ...]:
    out: list[MigInstanceInfo] = []
    for index, gpu_profiles in enumerate(layout):
        card = _Gpu(geometry)
        shaped = [(p, _shape(p, geometry, profiles, gpu_memory_gb)) for p in gpu_profiles]
        for profile, shape in sorted(shaped, key=lambda x: (-(x[1] or (0, 0))[1], x[0])):
            if shape is None:
                continue
            start = card.place(shape[0], shape[1], shape[2])
            if start is not None:
                out.append(MigInstanceInfo(gpu=index, profile=profile, start=start, size=shape[1]))
    return tuple(sorted(out, key=lambda m: (m.gpu, m.start)))


def unreachable(node: Obj) -> bool:
    """Whether the node lifecycle controller found the node's kubelet gone silent: its Ready
    condition is not True and it carries the `node.kubernetes.io/unreachable` taint. No
    kubelet there confirms that a deleted pod stopped, so such a pod stays terminating."""
    ready, _ = _ready(node)
    taints = node.get("spec", {}).get("taints") or []
    return not ready and any(t.get("key") == UNREACHABLE_TAINT for t in taints)


def not_ready(node: Obj) -> bool:
    """Whether the node is not Ready and the node lifecycle controller has tainted it
    `node.kubernetes.io/not-ready:NoExecute`, as it does when the kubelet reports NotReady (a
    hung container runtime, PLEG, a network plugin): the taint manager deletes its pods once
    their toleration (300 s by default) runs out, and a hung runtime may never stop them."""
    ready, _ = _ready(node)
    taints = node.get("spec", {}).get("taints") or []
    return not ready and any(
        t.get("key") == NOT_READY_TAINT and t.get("effect") == "NoExecute" for t in taints
    )


def _ready(node: Obj) -> tuple[bool, str]:
    for cond in node.get("status", {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            ok = cond.get("status") == "True"
            return ok, "" if ok else (cond.get("message") or cond.get("reason") or "not ready")
    return False, "no Ready condition reported"


def _repelling_taint(node: Obj) -> str:
    """The first taint that keeps gpuq's pods off the node, as `key=value:effect`. They
    tolerate only GPU resource taints with NoSchedule (manifests._gpu_tolerations);
    PreferNoSchedule does not keep a pod away."""
    for taint in node.get("spec", {}).get("taints") or []:
        key, effect = taint.get("key", ""), taint.get("effect", "")
        if effect not in ("NoSchedule", "NoExecute"):
            continue
        if effect == "NoSchedule" and (key == GPU_RESOURCE or key.startswith(MIG_RESOURCE)):
            continue
        value = taint.get("value")
        return f"{key}={value}:{effect}" if value else f"{key}:{effect}"
    return ""


def _relayout_requested(
    labels: Mapping[str, str],
    mig_counts: Mapping[str, int],
    gpus: int,
    settings: K8sSettings,
) -> bool:
    """Whether the node still offers MIG devices its requested `nvidia.com/mig.config` does
    not have (or none it wants): the MIG manager has not answered yet, or the device plugin
    lags behind it. Fewer devices than the layout is not a relayout (an unhealthy slice)."""
    layout = settings.mig_configs.get(labels.get(MIG_CONFIG_LABEL, ""))
    if layout is None:
        return False
    wanted: dict[str, int] = {}
    for profiles in [layout[0]] * gpus if len(layout) == 1 else layout:
        for p in profiles:
            wanted[p] = wanted.get(p, 0) + 1
    offered = {p: n for p, n in mig_counts.items() if n}
    return any(n > wanted.get(p, 0) for p, n in offered.items()) or bool(wanted and not offered)


def _state(node: Obj, labels: Mapping[str, str], relayout: bool, withdrawn: str) -> tuple[str, str]:
    ready, why = _ready(node)
    if not ready:
        return "down", why
    if node.get("spec", {}).get("unschedulable"):
        return "drain", "cordoned (spec.unschedulable)"
    mig_state = labels.get(MIG_STATE_LABEL)
    config = labels.get(MIG_CONFIG_LABEL, "")
    if mig_state in ("pending", "rebooting"):
        return "drain", f"MIG reconfiguration to {config!r} {mig_state}"
    if mig_state == "failed":
        return "drain", f"MIG reconfiguration to {config!r} failed"
    if relayout:
        return "drain", f"MIG reconfiguration to {config!r} requested, not applied yet"
    taint = _repelling_taint(node)
    if taint:
        return "drain", f"tainted {taint}"
    if withdrawn:
        return "drain", withdrawn
    return "up", ""


# _usage's profile for an nvidia.com/gpu limit: a whole GPU, or a slice of a node running the
# device plugin's `single` strategy.
WHOLE_GPU = ""


def _usage(pods: Sequence[Obj]) -> dict[str, list[tuple[str, str]]]:
    """node -> [(mig profile or WHOLE_GPU, gpuq job id, "" outside gpuq)] for pods holding GPUs
    there."""
    used: dict[str, list[tuple[str, str]]] = {}
    for pod in sorted(pods, key=lambda p: p.get("metadata", {}).get("name", "")):
        node = pod.get("spec", {}).get("nodeName")
        if not node or pod.get("status", {}).get("phase") not in ("Pending", "Running"):
            continue
        job = pod.get("metadata", {}).get("labels", {}).get(JOB_ID_LABEL, "")
        for c in pod.get("spec", {}).get("containers") or []:
            limits = (c.get("resources") or {}).get("limits") or {}
            for key, value in limits.items():
                profile = WHOLE_GPU if key == GPU_RESOURCE else mig_profile(key)
                if profile is not None:
                    used.setdefault(node, []).extend([(profile, job)] * parse_quantity_int(value))
    return used


def _mark_used(
    instances: tuple[MigInstanceInfo, ...], used: Sequence[tuple[str, str]]
) -> tuple[MigInstanceInfo, ...]:
    out = list(instances)
    for profile, job in used:
        for i, inst in enumerate(out):
            if inst.profile == profile and not inst.in_use:
                out[i] = MigInstanceInfo(
                    inst.gpu, inst.profile, inst.start, inst.size, True, job or None
                )
                break
    return tuple(out)


def _model_memory_gb(model: str) -> float | None:
    """A GPU's memory from its product name (`A100-SXM4-40GB`, `H100-80GB-HBM3`)."""
    m = _MODEL_MEMORY.search(model)
    return float(m[1]) if m else None


def _physical_gpus(
    devices: int,
    profile: str,
    geometry: _Geometry,
    per_gpu: Sequence[Sequence[str]] | None,
    gpu_memory_gb: float | None,
) -> int:
    """GPUs behind `devices` identical MIG devices (the `single` strategy): the node's
    catalogue layout when it names them, else as many as fit on one GPU. Rounded up, so a
    GPU with a withdrawn (unhealthy) device still counts."""
    if per_gpu and len(per_gpu) > 1:
        return len(per_gpu)
    per = per_gpu[0].count(profile) if per_gpu else 0
    if not per:
        shape = _shape(profile, geometry, [profile], gpu_memory_gb)
        if shape is None:
            return max(devices, 1)
        card = _Gpu(geometry)
        # One set of media engines per GPU: a +me profile fits once.
        limit = 1 if profile.endswith("+me") else geometry.compute_slices
        while per < limit and card.place(*shape) is not None:
            per += 1
    return max(-(-devices // max(per, 1)), 1)


def node_mig_strategy(node: Obj) -> str | None:
    """The MIG strategy a node's device plugin runs, from GPU feature discovery's
    `nvidia.com/mig.strategy` label (single | mixed); None without it (the cluster's
    `mig_strategy` setting is the default)."""
    labels: Mapping[str, str] = node.get("metadata", {}).get("labels") or {}
    value = labels.get(MIG_STRATEGY_LABEL)
    return value if value in ("single", "mixed") else None


def node_info(
    node: Obj, settings: K8sSettings, used: Sequence[tuple[str, str]] = ()
) -> NodeInfo | None:
    """None for a node without GPUs (control plane, CPU pools)."""
    labels: Mapping[str, str] = node.get("metadata", {}).get("labels") or {}
    allocatable: Mapping[str, Any] = node.get("status", {}).get("allocatable") or {}
    product = labels.get(PRODUCT_LABEL, "")
    whole = parse_quantity_int(allocatable.get(GPU_RESOURCE, 0))
    counted = parse_quantity_int(labels.get(COUNT_LABEL, 0))
    mig_counts = {
        profile: parse_quantity_int(value)
        for key, value in allocatable.items()
        if (profile := mig_profile(key)) is not None and parse_quantity_int(value) > 0
    }
    per_gpu = settings.mig_configs.get(labels.get(MIG_CONFIG_LABEL, ""))
    withdrawn = ""
    single = _SINGLE_PRODUCT.match(product)
    if single:
        # Device plugin/GFD `single` strategy: every nvidia.com/gpu is one slice, and GFD
        # overrides gpu.count and gpu.memory with the MIG devices' count and memory
        # (k8s-device-plugin docs/gpu-feature-discovery/README.md).
        product = single["model"]
        geometry = A30 if "A30" in product else SEVEN_SLICE
        memory_gb = _model_memory_gb(product)
        mig_counts = {single["profile"]: whole}
        gpus = _physical_gpus(max(counted, whole), single["profile"], geometry, per_gpu, memory_gb)
        used = [(single["profile"] if p == WHOLE_GPU else p, j) for p, j in used]
        whole = 0
    else:
        geometry = A30 if "A30" in product else SEVEN_SLICE
        memory_mb = parse_quantity_int(labels.get(MEMORY_LABEL, 0))
        memory_gb = memory_mb / 1024 if memory_mb else _model_memory_gb(product)
        gpus = counted or whole or (1 if mig_counts else 0)
        if not mig_counts and counted > whole:
            # The device plugin withdraws unhealthy GPUs and kube-scheduler places by what it
            # offers; GFD counts them all.
            if whole:
                gpus = whole
            else:
                withdrawn = f"the device plugin offers none of its {counted} GPUs"
    if not whole and not mig_counts and not product:
        return None
    model = settings.gpu_model_map.get(product) or product.removeprefix("NVIDIA-") or "unknown"
    instances: tuple[MigInstanceInfo, ...] = ()
    if mig_counts:
        instances = canonical_layout(
            gpus,
            mig_counts,
            geometry=geometry,
            per_gpu=per_gpu,
            gpu_memory_gb=memory_gb,
        )
        instances = _mark_used(instances, used)
    relayout = _relayout_requested(labels, mig_counts, gpus, settings)
    state, reason = _state(node, labels, relayout, withdrawn)
    kept = {
        k: v
        for k, v in labels.items()
        if k.startswith(KEPT_LABEL_PREFIXES) or k == settings.pool_label
    }
    cpus, node_memory_mb = _cpus_and_memory(allocatable)
    return NodeInfo(
        name=node["metadata"]["name"],
        gpu_model=model,
        gpus=gpus,
        state=state,
        pool=labels.get(settings.pool_label),
        mig=bool(mig_counts),
        mig_instances=instances,
        labels=kept,
        reason=reason,
        cpus=cpus,
        memory_mb=node_memory_mb,
    )


def inventory(nodes: Sequence[Obj], pods: Sequence[Obj], settings: K8sSettings) -> list[NodeInfo]:
    used = _usage(pods)
    infos = (node_info(n, settings, used.get(n["metadata"]["name"], ())) for n in nodes)
    return sorted((i for i in infos if i is not None), key=lambda i: i.name)
