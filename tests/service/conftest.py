"""Service-level fixtures for clusters of every kind."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import sync_cluster
from tests.conftest import lab_missing

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
