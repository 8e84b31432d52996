"""The Slurm backend: a Celery worker reaches a login node over SSH and uses Slurm's own
commands, as an experienced user would (see docs/slurm.md)."""

from __future__ import annotations

import time
from collections.abc import Callable

from queue_service.backends.base import ClusterConfig

from .backend import SlurmBackend, SlurmSettings, private_key_text
from .ssh import SSHConnection, load_private_key, parse_known_hosts


def create(cluster: ClusterConfig, *, clock: Callable[[], float] = time.monotonic) -> SlurmBackend:
    """A backend for the cluster; it connects on first use, not here. `clock` paces the
    reconnect backoff and cancel's grace (tests pass a fake one)."""
    settings = SlurmSettings.from_mapping(cluster.settings)
    connection = SSHConnection(
        host=settings.host,
        port=settings.port,
        user=settings.user,
        key=load_private_key(private_key_text(cluster.settings)),
        known_hosts=parse_known_hosts(settings.known_hosts),
        connect_timeout_s=settings.connect_timeout_s,
        command_timeout_s=settings.command_timeout_s,
        clock=clock,
    )
    return SlurmBackend(cluster.name, settings, connection, clock=clock)


__all__ = ["SlurmBackend", "SlurmSettings", "create"]
