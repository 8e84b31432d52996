"""The contract suite: the same checks against the fake always, and against a real cluster
when GPUQ_K8S_E2E_KUBECONFIG names a kubeconfig file (docs/kubernetes.md). On a real cluster
the pods really run (busybox by default); on the fake, k8s_sim plays their outcome."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import FakeClock, make_backend
from conftest import request as job_request
from k8s_fakeapi import FakeApiServer
from k8s_sim import Sim

from queue_service.backends.base import BackendError, ClusterConfig, DispatchRequest, JobStatus
from queue_service.backends.base import RemoteState as R
from queue_service.backends.kubernetes import KubernetesBackend, create

E2E = os.environ.get("GPUQ_K8S_E2E_KUBECONFIG")


@dataclass
class Cluster:
    backend: KubernetesBackend
    team: str
    # Plays the pod's outcome on the fake; on a real cluster the container does it itself.
    finish: Callable[[str, int, bytes], None]
    wait_s: float


@pytest.fixture(params=["fake", "real"])
def cluster(request: pytest.FixtureRequest, crd_dir: Path) -> Iterator[Cluster]:
    if request.param == "real":
        if not E2E:
            pytest.skip(
                "set GPUQ_K8S_E2E_KUBECONFIG to run the contract suite against a real cluster"
            )
        settings = {
            "kubeconfig": Path(E2E).read_text(),
            "workload": "indexed",
            "namespace": "{team}",
            "image_default": os.environ.get("GPUQ_K8S_E2E_IMAGE", "busybox:1.36"),
        }
        backend = create(ClusterConfig(0, "e2e", "kubernetes", settings))
        team = os.environ.get("GPUQ_K8S_E2E_NAMESPACE", "gpuq-e2e")
        yield Cluster(backend, team, lambda eid, code, log: None, 300.0)
        return
    clock = FakeClock()
    with FakeApiServer(crd_dir=crd_dir) as api:
        api.store.clock = clock
        sim = Sim(api)
        sim.namespace("gpuq-team-a")
        sim.queue("team-a")
        sim.node("h100-01")

        def finish(eid: str, code: int, log: bytes) -> None:
            pods = sim.run(eid)
            sim.log(pods[0], log)
            sim.succeed(eid) if code == 0 else sim.fail(eid, exit_code=code)

        yield Cluster(
            make_backend(api, clock, workload="indexed", image_default="busybox:1.36"),
            "team-a",
            finish,
            0.0,
        )


def until(c: Cluster, eid: str, done: Callable[[JobStatus], bool]) -> JobStatus:
    deadline = time.monotonic() + c.wait_s
    while True:
        status = c.backend.poll([eid])[eid]
        if done(status) or time.monotonic() >= deadline:
            return status
        time.sleep(2)


def job(c: Cluster, command: tuple[str, ...]) -> DispatchRequest:
    return job_request(
        job_id=str(uuid.uuid4()),
        team=c.team,
        kind="agent",
        gpus_per_node=0,
        command=command,
        image=None,
        placement=(),
        time_limit_s=600,
    )


def test_contract_a_job_runs_to_success_with_its_log(cluster: Cluster) -> None:
    eid = cluster.backend.submit(job(cluster, ("sh", "-c", "echo hello from gpuq"))).external_id
    cluster.finish(eid, 0, b"hello from gpuq\n")
    status = until(cluster, eid, lambda s: s.state in R.TERMINAL)
    assert (status.state, status.exit_code) == (R.SUCCEEDED, 0)
    assert b"hello from gpuq" in cluster.backend.logs(eid).data


def test_contract_a_failing_job_reports_exit_code_3(cluster: Cluster) -> None:
    eid = cluster.backend.submit(job(cluster, ("sh", "-c", "exit 3"))).external_id
    cluster.finish(eid, 3, b"")
    status = until(cluster, eid, lambda s: s.state in R.TERMINAL)
    assert (status.state, status.exit_code) == (R.FAILED, 3)


def test_contract_a_repeated_submit_adopts_and_cancel_reports_cancelled(cluster: Cluster) -> None:
    spec = job(cluster, ("sleep", "600"))
    first = cluster.backend.submit(spec)
    again = cluster.backend.submit(spec)
    assert (again.external_id, again.adopted, first.adopted) == (first.external_id, True, False)
    cluster.backend.cancel(first.external_id, grace_s=0)
    status = until(cluster, first.external_id, lambda s: s.state in (R.CANCELLED, R.LOST))
    assert status.state == R.CANCELLED


def test_contract_a_missing_namespace_is_a_permanent_error(cluster: Cluster) -> None:
    with pytest.raises(BackendError) as err:
        cluster.backend.submit(
            job_request(
                job_id=str(uuid.uuid4()),
                team=f"no-such-team-{uuid.uuid4().hex[:6]}",
                placement=(),
                kind="agent",
                gpus_per_node=0,
            )
        )
    assert err.value.permanent and "not found" in err.value.message


def test_contract_inventory_lists_nodes(cluster: Cluster) -> None:
    assert all(n.name and n.state in ("up", "drain", "down") for n in cluster.backend.nodes())
