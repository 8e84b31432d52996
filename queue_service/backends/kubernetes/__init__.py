"""The Kubernetes backend (docs/kubernetes.md): Volcano gang jobs or Indexed Jobs for
training, pinned Jobs on MIG slices for agents, through lightkube."""

from __future__ import annotations

from ..base import ClusterConfig
from .backend import KubernetesBackend, load_config
from .config import parse_settings


def create(cluster: ClusterConfig) -> KubernetesBackend:
    settings = parse_settings(cluster.settings)
    return KubernetesBackend(settings, load_config(settings))


__all__ = ["KubernetesBackend", "create"]
