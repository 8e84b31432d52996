"""One job spec, three backends, only the cluster changed: the local backend (real processes),
the Slurm lab (real slurmctld/slurmd over a real sshd) and Kubernetes (our fake API server,
with its simulated kubelet moving the pods)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import read_logs, run_once, sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import lab_missing

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State
SLURM_LAB = Path("/var/lib/slurm-lab/client/cluster.json")
SPEC = {
    "name": "same everywhere",
    "command": ["/bin/sh", "-c", "echo hello from gpuq"],
    "gpus_per_node": 1,
    "time_limit": "10m",
}


@pytest.fixture
def k8s(fake_k8s: Any) -> Iterator[tuple[Cluster, Any]]:
    def setup(sim: Any) -> None:
        sim.node("h100-01")

    with fake_k8s(setup=setup, image_default="docker.io/library/busybox:1.36") as made:
        yield made


@pytest.fixture
def slurm(teams: Any) -> Cluster:
    if not SLURM_LAB.exists():
        lab_missing("the Slurm lab (deploy/slurm-lab/lab up)")
    cluster = Cluster.objects.create(
        name="slurm", kind="slurm", settings=json.loads(SLURM_LAB.read_text())
    )
    sync_cluster(cluster.pk)
    return cluster


def test_one_spec_runs_on_local_slurm_and_kubernetes(
    people: Any, local_cluster: Cluster, slurm: Cluster, k8s: tuple[Cluster, Any]
) -> None:
    _, sim = k8s
    Quota.objects.create(
        team=people["alice"].memberships.get().team,
        gpu_model="*",
        nominal_gpus=8,
        borrowing_limit_gpus=0,
    )
    jobs = {
        name: submit_job(people["alice"], {**SPEC, "cluster": name}).job
        for name in ("local", "slurm", "k8s")
    }
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        run_once()
        k8s_job = Job.objects.get(pk=jobs["k8s"].pk)
        if k8s_job.state == S.QUEUED:
            sim.run(k8s_job.external_id)
        elif k8s_job.state == S.RUNNING:
            sim.succeed(k8s_job.external_id)
        if all(Job.objects.get(pk=j.pk).is_terminal for j in jobs.values()):
            break
        time.sleep(0.3)
    final = {name: Job.objects.get(pk=j.pk) for name, j in jobs.items()}
    assert {name: j.state for name, j in final.items()} == {
        "local": S.SUCCEEDED,
        "slurm": S.SUCCEEDED,
        "k8s": S.SUCCEEDED,
    }, {name: (j.state, j.reason) for name, j in final.items()}
    assert {j.cluster.name for j in final.values()} == {"local", "slurm", "k8s"}
    for name in ("local", "slurm"):
        assert read_logs(final[name], offset=0, limit=4096, stream="stdout").data == (
            b"hello from gpuq\n"
        ), name
    # Kubernetes got the same argv, as a list, with no shell added.
    _, workload = sim.workload(final["k8s"].external_id)
    text = json.dumps(workload)
    assert "echo hello from gpuq" in text
