"""Fixtures: the fake API server on loopback, its simulated cluster, a fake clock, and a
KubernetesBackend built from a kubeconfig that points at the fake."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_fakeapi import FakeApiServer
from k8s_sim import Sim

from queue_service.backends.base import AllocatedNode, DispatchRequest
from queue_service.backends.kubernetes.backend import KubernetesBackend, load_config
from queue_service.backends.kubernetes.config import parse_settings
from tests.conftest import lab_missing

REPO = Path(__file__).resolve().parents[3]
SCHEMAS = REPO.parent / "shared" / "k8s-schemas"
NAMESPACE = "gpuq-team-a"
JOB_ID = "3f2b8c1e-5d4a-4b7e-9c0f-1a2b3c4d5e6f"


def need_schemas() -> Path:
    if SCHEMAS.is_dir():
        return SCHEMAS
    lab_missing(f"the Volcano CRD schemas ({SCHEMAS})")


@pytest.fixture
def crd_dir() -> Path:
    return need_schemas()


class FakeClock:
    """Time that moves only when a test (or a backoff sleep) moves it."""

    def __init__(self, now: float = 1_750_000_000.0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def api(crd_dir: Path, clock: FakeClock) -> Iterator[FakeApiServer]:
    with FakeApiServer(crd_dir=crd_dir) as server:
        server.store.clock = clock
        yield server


@pytest.fixture
def sim(api: FakeApiServer) -> Sim:
    s = Sim(api)
    s.namespace(NAMESPACE)
    s.queue("team-a")
    for i in range(1, 5):
        s.node(f"h100-{i:02d}")
    return s


def kubeconfig(url: str, token: str = "t0ken") -> str:  # noqa: S107 (a fake server)
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": url}}],
            "users": [{"name": "gpuq", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "gpuq"}}],
            "current-context": "fake",
        }
    )


def make_backend(api: FakeApiServer, clock: FakeClock, **settings: Any) -> KubernetesBackend:
    parsed = parse_settings({"kubeconfig": kubeconfig(api.url), "request_timeout_s": 2, **settings})
    return KubernetesBackend(
        parsed, load_config(parsed), sleep=clock.sleep, clock=clock, monotonic=clock
    )


@pytest.fixture
def backend(api: FakeApiServer, clock: FakeClock, sim: Sim) -> Iterator[KubernetesBackend]:
    b = make_backend(api, clock, image_default="nvcr.io/nvidia/pytorch:24.08-py3")
    yield b
    b.close()


def request(**overrides: Any) -> DispatchRequest:
    """A job as the service hands it over; table rows override what they test."""
    fields: dict[str, Any] = {
        "job_id": JOB_ID,
        "team": "team-a",
        "user": "alice",
        "name": "llama finetune",
        "kind": "training",
        "command": ("python", "train.py", "--epochs", "3"),
        "image": "nvcr.io/nvidia/pytorch:24.08-py3",
        "nodes": 1,
        "gpus_per_node": 8,
        "time_limit_s": 3600,
        "retries_max": 3,
        "retry_on": ("node_failure", "preemption"),
    }
    fields.update(overrides)
    if "placement" not in overrides:
        fields["placement"] = tuple(
            AllocatedNode(node=f"h100-{i + 1:02d}") for i in range(fields["nodes"])
        )
    return DispatchRequest(**fields)
