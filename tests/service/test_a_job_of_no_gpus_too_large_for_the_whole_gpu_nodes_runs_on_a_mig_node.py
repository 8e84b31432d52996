"""A job of no GPUs that asks more CPUs (or memory) than any whole-GPU node it could use
has may still run on a MIG node that has them: it takes no slice there, its CPUs and memory
checked, not charged. The scheduler places a job of no GPUs on whole-GPU and MIG nodes
alike, so the job is narrowed to the cluster, model or pool of the MIG nodes that hold it
(snapshot.Footprints), and placed there, or waits for them with a capacity reason. Only when
nothing the scheduler sees tells those nodes from the ones too small for it does it wait
`unsatisfiable`, saying so.

The footprint is worked out from the nodes' rows alone: these tests need no database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from queue_service.clusters.models import Cluster, Node
from queue_service.jobs.snapshot import Footprints
from scheduler import schedule
from scheduler import types as st

A100 = "A100-SXM4-80GB"
HPC = Cluster(name="hpc", kind="slurm")
LAB = Cluster(name="lab", kind="slurm")


def whole(name: str, cluster: Cluster = HPC, model: str = "L40S", cpus: int = 16) -> Node:
    return Node(cluster=cluster, name=name, gpu_model=model, gpus=4, cpus=cpus, memory_mb=64000)


def mig(name: str, cluster: Cluster = HPC, cpus: int = 64, pool: str = "") -> Node:
    return Node(
        cluster=cluster,
        name=name,
        gpu_model=A100,
        gpus=1,
        cpus=cpus,
        memory_mb=256000,
        mig_enabled=True,
        pool=pool,
    )


@dataclass(frozen=True)
class Case:
    nodes: list[Node]
    narrowed: dict[str, Any] | None  # None: it waits `unsatisfiable`
    runs_on: str | None = None  # where the scheduler starts it, narrowed
    pinned: str | None = None  # the cluster it asks for
    words: tuple[str, ...] = field(default=())  # in its reason, if unsatisfiable


CASES = {
    # The whole-GPU nodes (16 CPUs) are another model's: it runs on the MIG node's model.
    "mig-node-of-another-model": Case(
        [whole("w1"), whole("w2"), mig("m1")], {"gpu_model": A100}, "hpc/m1", pinned="hpc"
    ),
    # The MIG node is in another cluster: that cluster.
    "mig-node-of-another-cluster": Case(
        [whole("w1", model=A100), mig("m1", cluster=LAB)], {"cluster": "lab"}, "lab/m1"
    ),
    # The MIG node is too small as well: no node holds it.
    "mig-node-too-small-too": Case(
        [whole("w1"), mig("m1", cpus=24)], None, pinned="hpc", words=("at most 24",)
    ),
    # The MIG node holds it, but looks like the whole-GPU node too small for it (cluster,
    # model, no pool): nothing keeps the job off that one. The way out is named.
    "nothing-tells-them-apart": Case(
        [whole("w1", model=A100), mig("m1")], None, pinned="hpc", words=("pool of their own",)
    ),
    # ... which a pool of the MIG node's own is.
    "a-pool-tells-them-apart": Case(
        [whole("w1", model=A100), mig("m1", pool="fat")], {"pool": "fat"}, "hpc/m1", pinned="hpc"
    ),
}


def scheduler_node(n: Node) -> st.Node:
    return st.Node(
        f"{n.cluster.name}/{n.name}",
        n.gpu_model,
        n.gpus,
        pool=n.pool or None,
        mig=n.mig_enabled,
        cluster=n.cluster.name,
    )


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_job_of_no_gpus_too_large_for_the_whole_gpu_nodes_runs_on_a_mig_node(case: Case) -> None:
    request = st.JobRequest("cpu", "a", "normal", 0.0, gpus_per_node=0, cluster=case.pinned)

    fitted = Footprints(case.nodes).fit(request, 32, None)  # 32 CPUs, no GPU

    if case.narrowed is None:
        assert isinstance(fitted, st.Reason) and fitted.code == "unsatisfiable", fitted
        assert all(w in fitted.message for w in case.words), fitted.message
        return
    assert isinstance(fitted, st.JobRequest), fitted
    assert {k: getattr(fitted, k) for k in case.narrowed} == case.narrowed
    assert fitted.gpus_per_node == 0  # not charged: it takes no slice
    snap = st.Snapshot(
        tuple(scheduler_node(n) for n in case.nodes),
        (st.Team("a", quotas=(st.Quota(st.ANY_MODEL, 8.0),)),),
        (st.PendingJob(fitted),),
    )
    d = schedule(snap, st.Policy(), 0.0)
    assert [(s.job_id, s.placement.node_names) for s in d.starts] == [("cpu", (case.runs_on,))]
