"""The Kubernetes cluster settings (`ClusterConfig.settings`), parsed once and checked.

Every key is documented in docs/kubernetes.md. A bad value is a permanent BackendError:
retrying cannot fix a cluster's configuration."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..base import BackendError

WORKLOADS = ("volcano", "indexed")
MIG_STRATEGIES = ("mixed", "single")
_TEMPLATE_FIELDS = re.compile(r"\{(\w*)\}")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# ttlSecondsAfterFinished is an int32 in batch/v1 and in Volcano's CRD: the API server cannot
# decode more, and would refuse every job of the cluster instead of the setting.
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class K8sSettings:
    kubeconfig: str | None = None
    in_cluster: bool = False
    context: str | None = None
    namespace: str = "gpuq-{team}"
    workload: str = "volcano"
    volcano_queue: str = "{team}"
    kueue_queue: str | None = None
    priority_class_map: Mapping[str, str] = field(default_factory=dict)
    request_timeout_s: float = 10.0
    image_default: str | None = None
    mig_strategy: str = "mixed"
    # config name -> one profile list per GPU (a single list applies to every GPU)
    mig_configs: Mapping[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    # beyond the lead's list: small knobs with safe defaults
    checkpoint_grace_s: int = 120
    ttl_after_finished_s: int = 7 * 86400
    image_pull_grace_s: float = 300.0
    max_retries: int = 2
    retry_after_cap_s: float = 30.0
    pool_label: str = "gpuq.io/pool"
    gpu_model_map: Mapping[str, str] = field(default_factory=dict)
    master_port: int = 23456


def _template(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise BackendError(f"kubernetes setting {key!r} must be a non-empty string", permanent=True)
    unknown = {f for f in _TEMPLATE_FIELDS.findall(value) if f != "team"}
    if unknown:
        raise BackendError(
            f"kubernetes setting {key!r} may only use {{team}}, not {sorted(unknown)}",
            permanent=True,
        )
    return value


def _positive(
    key: str,
    value: Any,
    kind: type[int] | type[float],
    *,
    nonzero: bool = False,
    maximum: int | None = None,
) -> Any:
    bad = isinstance(value, bool) or not isinstance(value, int | float)
    if bad or value < 0 or (nonzero and value <= 0):
        bound = "> 0" if nonzero else ">= 0"
        raise BackendError(f"kubernetes setting {key!r} must be a number {bound}", permanent=True)
    if maximum is not None and value > maximum:
        raise BackendError(f"kubernetes setting {key!r} must be at most {maximum}", permanent=True)
    return kind(value)


def _label_value(key: str, value: Any) -> str:
    # Copied verbatim into a label of every batch Job: the API server would refuse them all.
    if not isinstance(value, str) or not _LABEL_VALUE.match(value):
        raise BackendError(
            f"kubernetes setting {key!r} must be a valid label value (at most 63 letters, "
            f"digits, '-', '_' or '.', starting and ending with a letter or digit), not {value!r}",
            permanent=True,
        )
    return value


def _port(key: str, value: Any) -> int:
    # The headless Service's port and Volcano's pytorch --port: the API server takes 1-65535
    # only, and would refuse the Service of every multi-node job instead of the setting.
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise BackendError(
            f"kubernetes setting {key!r} must be a port number, from 1 to 65535",
            permanent=True,
        )
    return value


def _mig_configs(value: Any) -> dict[str, tuple[tuple[str, ...], ...]]:
    if not isinstance(value, Mapping):
        raise BackendError("kubernetes setting 'mig_configs' must be a mapping", permanent=True)
    out: dict[str, tuple[tuple[str, ...], ...]] = {}
    for name, layouts in value.items():
        if isinstance(layouts, list) and all(isinstance(p, str) for p in layouts):
            layouts = [layouts]
        if not isinstance(layouts, list) or not all(
            isinstance(gpu, list) and all(isinstance(p, str) for p in gpu) for gpu in layouts
        ):
            raise BackendError(
                f"mig_configs[{name!r}] must be a list of profile names per GPU", permanent=True
            )
        out[str(name)] = tuple(tuple(gpu) for gpu in layouts)
    return out


def _str_map(key: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise BackendError(
            f"kubernetes setting {key!r} must map strings to strings", permanent=True
        )
    return dict(value)


def _priority_classes(value: Any) -> dict[str, str]:
    out = _str_map("priority_class_map", value)
    # Each value is a pod's priorityClassName, a DNS-1123 subdomain to the API server.
    bad = sorted(v for v in out.values() if len(v) > 253 or not _DNS_SUBDOMAIN.match(v))
    if bad:
        raise BackendError(
            f"kubernetes setting 'priority_class_map' names no valid PriorityClass: {bad} "
            "(lower-case DNS subdomains)",
            permanent=True,
        )
    return out


def parse_settings(raw: Mapping[str, Any]) -> K8sSettings:
    known = set(K8sSettings.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise BackendError(f"unknown kubernetes settings: {', '.join(unknown)}", permanent=True)
    s = dict(raw)
    if not s.get("kubeconfig") and not s.get("in_cluster"):
        raise BackendError(
            "a kubernetes cluster needs 'kubeconfig' (YAML text) or 'in_cluster: true'",
            permanent=True,
        )
    if s.get("workload", "volcano") not in WORKLOADS:
        raise BackendError(f"'workload' must be one of {WORKLOADS}", permanent=True)
    if s.get("mig_strategy", "mixed") not in MIG_STRATEGIES:
        raise BackendError(f"'mig_strategy' must be one of {MIG_STRATEGIES}", permanent=True)
    kwargs: dict[str, Any] = {}
    for key in ("namespace", "volcano_queue"):
        if key in s:
            kwargs[key] = _template(key, s[key])
    if "request_timeout_s" in s:  # 0 would be no call at all
        kwargs["request_timeout_s"] = _positive(
            "request_timeout_s", s["request_timeout_s"], float, nonzero=True
        )
    for key in ("image_pull_grace_s", "retry_after_cap_s"):
        if key in s:
            kwargs[key] = _positive(key, s[key], float)
    for key in ("checkpoint_grace_s", "max_retries"):
        if key in s:
            kwargs[key] = _positive(key, s[key], int)
    if "ttl_after_finished_s" in s:
        kwargs["ttl_after_finished_s"] = _positive(
            "ttl_after_finished_s", s["ttl_after_finished_s"], int, maximum=INT32_MAX
        )
    if s.get("kueue_queue") is not None:
        kwargs["kueue_queue"] = _label_value("kueue_queue", s["kueue_queue"])
    if "priority_class_map" in s:
        kwargs["priority_class_map"] = _priority_classes(s["priority_class_map"])
    if "master_port" in s:
        kwargs["master_port"] = _port("master_port", s["master_port"])
    if "gpu_model_map" in s:
        kwargs["gpu_model_map"] = _str_map("gpu_model_map", s["gpu_model_map"])
    if "mig_configs" in s:
        kwargs["mig_configs"] = _mig_configs(s["mig_configs"])
    for key in ("kubeconfig", "context", "image_default", "workload"):
        if s.get(key) is not None:
            kwargs[key] = str(s[key])
    if "mig_strategy" in s:
        kwargs["mig_strategy"] = str(s["mig_strategy"])
    if "pool_label" in s:
        kwargs["pool_label"] = str(s["pool_label"])
    kwargs["in_cluster"] = bool(s.get("in_cluster", False))
    return K8sSettings(**kwargs)
