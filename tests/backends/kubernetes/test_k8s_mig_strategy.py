"""A cluster whose nodes run different MIG strategies. With the NVIDIA GPU operator, GPU
feature discovery labels each node `nvidia.com/mig.strategy` (`single` or `mixed`): under
`single` every MIG device is offered as `nvidia.com/gpu` (and gpu.product gets
`-MIG-<profile>`), under `mixed` as `nvidia.com/mig-<profile>`. The node's label decides
what a pod placed there requests; the cluster's `mig_strategy` is the default for nodes
without it."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import NAMESPACE, FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer
from k8s_sim import Sim

from queue_service.backends.base import AllocatedNode

MIXED_JOB = "0a1b2c3d-0000-4000-8000-000000000001"
SINGLE_JOB = "0a1b2c3d-0000-4000-8000-000000000002"


def single_node(sim: Sim, name: str, *, label: bool = True) -> None:
    """An A100 80GB laid out as 7 x 1g.10gb under the single strategy, as GFD labels it."""
    sim.node(
        name,
        product="NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        gpus=7,
        memory_mb=9856,
        labels={
            "nvidia.com/mig.capable": "true",
            "nvidia.com/mig.config": "all-1g.10gb",
            "nvidia.com/mig.config.state": "success",
            **({"nvidia.com/mig.strategy": "single"} if label else {}),
        },
    )


def mig_job(job_id: str, node: str) -> Any:
    return request(
        job_id=job_id,
        kind="agent",
        gpus_per_node=0,
        mig_profile="1g.10gb",
        placement=(AllocatedNode(node=node, mig_profile="1g.10gb"),),
    )


def gpu_limits(api: FakeApiServer, sim: Sim, eid: str) -> dict[str, str]:
    (pod,) = sim.pods(eid)
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    return {k: v for k, v in limits.items() if k.startswith("nvidia.com/")}


def offered(api: FakeApiServer, node: str) -> set[str]:
    t = api.store.types[("", "v1", "nodes")]
    alloc = api.store.get(t, "", node)["status"]["allocatable"]
    return {k for k, v in alloc.items() if k.startswith("nvidia.com/") and int(v) > 0}


@pytest.mark.parametrize("cluster_default", ["mixed", "single"])
def test_each_pod_requests_the_resource_its_node_offers_under_that_node_s_strategy(
    api: FakeApiServer, sim: Sim, clock: FakeClock, cluster_default: str
) -> None:
    sim.node("mixed-01", product="NVIDIA-A100-SXM4-80GB", gpus=1, mig={"1g.10gb": 7})
    single_node(sim, "single-01")
    b = make_backend(api, clock, mig_strategy=cluster_default)

    on_mixed = b.submit(mig_job(MIXED_JOB, "mixed-01")).external_id
    on_single = b.submit(mig_job(SINGLE_JOB, "single-01")).external_id
    sim.run(on_mixed)
    sim.run(on_single)

    assert gpu_limits(api, sim, on_mixed) == {"nvidia.com/mig-1g.10gb": "1"}
    assert gpu_limits(api, sim, on_single) == {"nvidia.com/gpu": "1"}
    for eid, node in ((on_mixed, "mixed-01"), (on_single, "single-01")):
        assert set(gpu_limits(api, sim, eid)) <= offered(api, node)
        (pod,) = sim.pods(eid)
        assert pod["spec"]["nodeName"] == node

    nodes = {n.name: n for n in b.nodes()}
    for name, job in (("mixed-01", MIXED_JOB), ("single-01", SINGLE_JOB)):
        info = nodes[name]
        assert info.mig and [m.profile for m in info.mig_instances] == ["1g.10gb"] * 7, info
        assert [m.external_job for m in info.mig_instances if m.in_use] == [job]


@pytest.mark.parametrize(
    ("cluster_default", "resource"),
    [("single", "nvidia.com/gpu"), ("mixed", "nvidia.com/mig-1g.10gb")],
)
def test_a_node_without_the_label_gets_the_cluster_setting(
    api: FakeApiServer, sim: Sim, clock: FakeClock, cluster_default: str, resource: str
) -> None:
    single_node(sim, "unlabelled-01", label=False)
    b = make_backend(api, clock, mig_strategy=cluster_default)
    eid = b.submit(mig_job(SINGLE_JOB, "unlabelled-01")).external_id
    sim.run(eid)
    assert gpu_limits(api, sim, eid) == {resource: "1"}


def test_a_placed_node_that_is_gone_gets_the_cluster_setting(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = make_backend(api, clock, mig_strategy="single")
    eid = b.submit(mig_job(SINGLE_JOB, "deleted-01")).external_id
    assert eid.startswith(f"{NAMESPACE}/job/")
    sim.run(eid)
    assert gpu_limits(api, sim, eid) == {"nvidia.com/gpu": "1"}
