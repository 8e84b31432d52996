"""the node's MIG strategy is read with a GET of the node at submit. A
ClusterRole made for the inventory (list/watch nodes, patch for MIG layouts) has no `get`:
the label is then unknown, and the cluster's `mig_strategy` is the default to use, as for
a node without the label, not a reason to fail the job for good."""

from __future__ import annotations

from conftest import FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer, Fault
from k8s_sim import Sim

from queue_service.backends.base import AllocatedNode


def test_a_mig_job_is_submitted_with_the_cluster_default_when_the_node_cannot_be_read(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    sim.node("mixed-01", product="NVIDIA-A100-SXM4-80GB", gpus=1, mig={"1g.10gb": 7})
    b = make_backend(api, clock, mig_strategy="mixed")
    api.inject(
        Fault(kind="status", code=403, method="GET", path_contains="/api/v1/nodes/", times=100)
    )
    job = request(
        kind="agent",
        gpus_per_node=0,
        mig_profile="1g.10gb",
        placement=(AllocatedNode(node="mixed-01", mig_profile="1g.10gb"),),
    )
    eid = b.submit(job).external_id
    (pod,) = sim.run(eid)
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits.get("nvidia.com/mig-1g.10gb") == "1"
