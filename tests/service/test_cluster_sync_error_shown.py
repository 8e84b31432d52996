"""A failed sync's own words (hosts, Unix accounts, paths) are for site staff: the API's
clusters answer everyone else a short summary, safe to show, and since when the cluster has
not synced. The stored text is kept whole for staff (and the admin)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import paramiko
import pytest

from queue_service.backends import BackendError
from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import sync_cluster

SECRET_WORDS = ("svc-gpuq", "127.0.0.1", "Errno", "Traceback")


class SilentPeer:
    """A TCP peer that accepts and never says a word: SSH's banner never comes (a login node
    behind a dead NAT, a firewall that swallows packets)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


def unreachable_slurm(port: int, name: str = "hpc") -> Cluster:
    """A Slurm cluster whose login node does not answer, synced once: its sync failed."""
    key = paramiko.RSAKey.generate(2048)
    pem = _private_text(key)
    cluster = Cluster.objects.create(
        name=name,
        kind="slurm",
        settings={
            "host": "127.0.0.1",
            "port": port,
            "user": "svc-gpuq",
            "private_key": pem,
            "known_hosts": f"[127.0.0.1]:{port} ssh-rsa {key.get_base64()}",
            "connect_timeout_s": 0.5,
        },
    )
    with pytest.raises(BackendError):
        sync_cluster(cluster.pk)
    # It last synced at 07:31 (UTC, the site's zone) on 12 March 2024, before it went quiet.
    Cluster.objects.filter(pk=cluster.pk).update(
        last_sync_at=datetime(2024, 3, 12, 7, 31, 5, tzinfo=UTC)
    )
    cluster.refresh_from_db()
    assert "svc-gpuq" in cluster.last_sync_error  # what the sync stored: the whole text
    return cluster


def _private_text(key: paramiko.RSAKey) -> str:
    import io

    out = io.StringIO()
    key.write_private_key(out)
    return out.getvalue()


@pytest.fixture
def silent_peer() -> Iterator[SilentPeer]:
    peer = SilentPeer()
    yield peer
    peer.close()


def closed_port() -> int:
    """A port nothing listens on: a connection there is refused."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


SINCE = " since 12 Mar 2024 07:31 UTC"


@pytest.mark.parametrize("who", ["alice", "bob", "charlie"])
@pytest.mark.parametrize(
    ("peer", "summary"),
    [
        ("silent", "cannot reach the cluster (SSH)"),
        ("closed", "cannot reach the cluster (connection refused)"),
    ],
)
def test_a_user_reads_a_failed_sync_as_a_safe_summary_not_its_own_words(
    client_for: Any, silent_peer: SilentPeer, who: str, peer: str, summary: str
) -> None:
    cluster = unreachable_slurm(silent_peer.port if peer == "silent" else closed_port())
    client = client_for(who)

    listed = client.get("/api/v1/clusters/").json()
    one = client.get(f"/api/v1/clusters/{cluster.name}/").json()

    for shown in (listed[0], one):
        assert shown["last_sync_error"] == summary + SINCE
        assert shown["last_sync_error_detail"] is None
        assert not [w for w in SECRET_WORDS if w in str(shown)]


def test_site_staff_read_a_failed_syncs_own_words_beside_the_summary(
    client_for: Any, silent_peer: SilentPeer
) -> None:
    cluster = unreachable_slurm(silent_peer.port)

    shown = client_for("staff").get(f"/api/v1/clusters/{cluster.name}/").json()

    assert shown["last_sync_error"] == "cannot reach the cluster (SSH)" + SINCE
    assert shown["last_sync_error_detail"] == cluster.last_sync_error
    assert "svc-gpuq@127.0.0.1" in shown["last_sync_error_detail"]


def test_a_cluster_whose_sync_works_shows_no_error(client_for: Any, local_cluster: Any) -> None:
    shown = client_for("staff").get(f"/api/v1/clusters/{local_cluster.name}/").json()

    assert (shown["last_sync_error"], shown["last_sync_error_detail"]) == ("", "")


@pytest.mark.parametrize(
    ("stored", "summary"),
    [
        ("SSH to svc@login-7.corp:22 failed: [Errno 111] Connection refused", "connection refused"),
        ("SSH authentication as svc on login-7.corp:22 failed", "refused gpuq's credentials"),
        (
            "the host key of login-7.corp:22 changed: it offers a ssh-ed25519 key ab:cd",
            "host key does not match",
        ),
        (
            "list nodes: HTTP 503: etcd leader lost on 10.0.0.4 (gave up after retries)",
            "API answered with an error (HTTP 503)",
        ),
        (
            "list nodes: Forbidden: User system:serviceaccount:gpuq cannot list",
            "denied gpuq access",
        ),
        ("KeyError: '/home/svc/.kube/config'", "the cluster's last sync failed"),
    ],
)
def test_the_summary_names_the_kind_of_failure_and_nothing_of_the_text(
    client_for: Any, teams: Any, stored: str, summary: str
) -> None:
    Cluster.objects.create(
        name="hpc",
        kind="slurm",
        last_sync_error=stored,
        last_sync_at=datetime(2024, 3, 12, 7, 31, tzinfo=UTC),
    )

    shown = client_for("alice").get("/api/v1/clusters/hpc/").json()["last_sync_error"]

    assert summary in shown and shown.endswith(" since 12 Mar 2024 07:31 UTC"), shown
    for word in ("login-7", "corp", "10.0.0.4", "svc", "/home", "etcd", "system:"):
        assert word not in shown


def test_a_cluster_that_never_synced_says_so(client_for: Any, teams: Any) -> None:
    Cluster.objects.create(name="hpc", kind="slurm", last_sync_error="sinfo on x@y failed: EOF")

    shown = client_for("alice").get("/api/v1/clusters/hpc/").json()["last_sync_error"]

    assert shown == "cannot reach the cluster; it has never synced"
