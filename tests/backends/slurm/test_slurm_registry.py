"""The backend registry keeps one backend per cluster per process and builds a new one when
the cluster's settings change. The one it replaces must let go of what it holds: an SSH
connection per cluster account, each a socket, a paramiko thread and a session on the login
node, that nothing else would ever close."""

from __future__ import annotations

from queue_service.backends import get_backend
from queue_service.backends.base import ClusterConfig
from queue_service.backends.slurm import SlurmBackend
from queue_service.backends.slurm.ssh import SSHConnection

from .conftest import lab_settings, second_account


def connected(connection: SSHConnection) -> bool:
    client = connection._client
    transport = client.get_transport() if client is not None else None
    return transport is not None and transport.is_active()


def test_a_cluster_whose_settings_change_closes_the_replaced_backends_connections(
    slurm_lab: None,
) -> None:
    settings = lab_settings(accounts={"nlp": second_account()})
    old = get_backend(ClusterConfig(id=90_001, name="lab", kind="slurm", settings=settings))
    assert isinstance(old, SlurmBackend)
    old.nodes()
    old.account_connection("nlp").run("true")
    held = [old.connection, old.account_connection("nlp")]
    assert all(connected(c) for c in held)

    changed = {**settings, "command_timeout_s": 61}
    new = get_backend(ClusterConfig(id=90_001, name="lab", kind="slurm", settings=changed))
    try:
        assert new is not old
        assert [connected(c) for c in held] == [False, False]
        # The new backend connects again on its own.
        assert new.nodes()
    finally:
        new.close()
    assert not connected(new.connection)


def test_a_cluster_whose_settings_do_not_change_keeps_its_backend_and_connection(
    slurm_lab: None,
) -> None:
    cluster = ClusterConfig(id=90_002, name="lab", kind="slurm", settings=lab_settings())
    first = get_backend(cluster)
    try:
        first.nodes()
        assert get_backend(cluster) is first
        assert connected(first.connection)
    finally:
        first.close()
