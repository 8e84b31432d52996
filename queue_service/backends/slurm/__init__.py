"""The Slurm backend: a Celery worker reaches a login node over SSH and uses Slurm's own
commands, as an experienced user would (see docs/slurm.md)."""

from __future__ import annotations

import time
from collections.abc import Callable

import paramiko

from queue_service.backends.base import BackendError, ClusterConfig

from .backend import SlurmBackend, SlurmSettings, private_key_text
from .ssh import SSHConnection, load_private_key, parse_known_hosts


def create(cluster: ClusterConfig, *, clock: Callable[[], float] = time.monotonic) -> SlurmBackend:
    """A backend for the cluster; it connects on first use, not here (each account of the
    `accounts` setting too). Every key is read here, so a bad one fails at once, named.
    `clock` paces the reconnect backoff and cancel's grace (tests pass a fake one)."""
    settings = SlurmSettings.from_mapping(cluster.settings)
    default_key = load_private_key(private_key_text(cluster.settings))
    known_hosts = parse_known_hosts(settings.known_hosts)

    def connection(user: str, key: paramiko.PKey) -> SSHConnection:
        return SSHConnection(
            host=settings.host,
            port=settings.port,
            user=user,
            key=key,
            known_hosts=known_hosts,
            connect_timeout_s=settings.connect_timeout_s,
            command_timeout_s=settings.command_timeout_s,
            clock=clock,
        )

    keys: dict[str, paramiko.PKey] = {}
    for account in settings.accounts.values():
        if account.user not in keys:
            where = f"accounts.{account.team}."
            text = private_key_text(cluster.settings["accounts"][account.team], where)
            try:
                keys[account.user] = load_private_key(text)
            except BackendError as exc:
                raise BackendError(f"{where}private_key: {exc.message}", permanent=True) from None
    return SlurmBackend(
        cluster.name,
        settings,
        connection(settings.user, default_key),
        clock=clock,
        connect=lambda user: connection(user, keys[user]),
    )


__all__ = ["SlurmBackend", "SlurmSettings", "create"]
