"""Service-level fixtures for clusters of every kind."""

from __future__ import annotations

import asyncio
import email
import email.policy
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import run_once, sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import lab_missing, spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "kubernetes"))
from k8s_fakeapi import FakeApiServer
from k8s_sim import Sim

SCHEMAS = Path(__file__).resolve().parents[3] / "shared" / "k8s-schemas"


@pytest.fixture
def fake_k8s(teams: Any) -> Callable[..., Any]:
    """A Kubernetes cluster row pointing at our fake API server, whose simulated cluster
    (kubelet, Volcano, MIG manager) the test drives: `with fake_k8s(...) as (cluster, sim)`."""

    @contextmanager
    def make(
        name: str = "k8s", setup: Callable[[Sim], None] | None = None, **settings: Any
    ) -> Iterator[tuple[Cluster, Sim]]:
        if not SCHEMAS.is_dir():
            lab_missing(f"the Volcano CRD schemas ({SCHEMAS})")
        with FakeApiServer(crd_dir=SCHEMAS) as api:
            sim = Sim(api)
            for team in teams:
                sim.namespace(f"gpuq-{team}")
                sim.queue(team)
            if setup is not None:
                setup(sim)
            kubeconfig = yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fake",
                    "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
                    "users": [{"name": "gpuq", "user": {"token": "t"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "gpuq"}}],
                }
            )
            cluster = Cluster.objects.create(
                name=name,
                kind="kubernetes",
                settings={"kubeconfig": kubeconfig, "request_timeout_s": 5, **settings},
            )
            sync_cluster(cluster.pk)
            yield cluster, sim

    return make


@pytest.fixture
def running_on_k8s(fake_k8s: Any, people: Any, teams: Any) -> Callable[..., Any]:
    """`with running_on_k8s(**settings) as (job, sim)`: alice's job, running on an 8-GPU node
    of the fake cluster (settings as the cluster row's, e.g. `workload="indexed"`)."""
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=8)

    @contextmanager
    def make(**settings: Any) -> Iterator[tuple[Job, Sim]]:
        with fake_k8s(
            setup=lambda sim: sim.node("gpu-1", gpus=8), image_default="busybox", **settings
        ) as (_, sim):
            job = submit_job(people["alice"], spec(name="on-k8s", cluster="k8s")).job
            run_once()
            job.refresh_from_db()
            assert job.state == Job.State.QUEUED, job.reason
            sim.run(job.external_id)
            run_once()
            job.refresh_from_db()
            assert job.state == Job.State.RUNNING
            yield job, sim

    return make


@dataclass
class Inbox:
    """A real SMTP server's received mail; `refuse` makes it answer 550 to every message."""

    port: int = 0
    refuse: bool = False
    mail: list[tuple[str, list[str], EmailMessage]] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.refuse:
            return "550 mailbox unavailable"
        raw = envelope.content.replace(b"\r\n", b"\n")  # as it travelled, in CRLF lines
        message = email.message_from_bytes(raw, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        self.mail.append((envelope.mail_from, list(envelope.rcpt_tos), message))
        return "250 OK"

    def subjects(self) -> list[str]:
        return [str(m["Subject"]) for _, _, m in self.mail]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def mail_server() -> Iterator[Inbox]:
    """A real SMTP server on loopback (aiosmtpd), for notifications."""
    from aiosmtpd.controller import Controller

    box = Inbox(port=free_port())
    controller = Controller(box, hostname="127.0.0.1", port=box.port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()
        asyncio.set_event_loop(None)


@pytest.fixture
def back_to_the_latest() -> Iterator[None]:
    """A migration test leaves the database at the migration it tested: the tests after it
    run on the latest schema."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.fixture
def site_admin(db: Any) -> Client:
    """A superuser signed in to the Django admin; server errors come back as 500 answers."""
    boss = get_user_model().objects.create_superuser("boss", "boss@example.org", "pw-boss")
    client = Client(raise_request_exception=False)
    client.force_login(boss)
    return client
