"""Backends with a lazy registry: a kind's module is imported only when a cluster of that
kind is used, so `local` needs neither paramiko nor lightkube at import time."""

from __future__ import annotations

import importlib
import threading

from .base import Backend, BackendError, ClusterConfig

_MODULES = {
    "local": "queue_service.backends.local",
    "slurm": "queue_service.backends.slurm",
    "kubernetes": "queue_service.backends.kubernetes",
}
_cache: dict[tuple[int, str], Backend] = {}
_lock = threading.Lock()


def kinds() -> tuple[str, ...]:
    return tuple(_MODULES)


def get_backend(cluster: ClusterConfig) -> Backend:
    """One backend object per cluster per process (it may hold a connection); rebuilt
    when the cluster's settings change."""
    if cluster.kind not in _MODULES:
        raise BackendError(f"unknown cluster kind {cluster.kind!r}", permanent=True)
    key = (cluster.id, repr(sorted(cluster.settings.items())))
    with _lock:
        backend = _cache.get(key)
        if backend is None:
            module = importlib.import_module(_MODULES[cluster.kind])
            backend = module.create(cluster)
            replaced = [_cache.pop(k) for k in [k for k in _cache if k[0] == cluster.id]]
            _cache[key] = backend
        else:
            replaced = []
    # Nothing else holds a replaced backend's connections: a call still using one fails as
    # a transient error and is retried on the new backend.
    for old in replaced:
        old.close()
    return backend


__all__ = ["Backend", "BackendError", "ClusterConfig", "get_backend", "kinds"]
