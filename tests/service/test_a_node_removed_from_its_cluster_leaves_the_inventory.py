"""A node removed from its cluster (from the local cluster's settings, `kubectl delete node`,
slurm.conf) leaves gpuq's inventory, as it leaves `sinfo` and `kubectl get nodes`: the
clusters page no longer counts it ("nodes up 3/4" forever). A node that stops answering is
still listed by its cluster, down, and stays so in gpuq. A removed node some job is still
placed on is kept, down, until that job has left it."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.clusters.models import Cluster, Node
from queue_service.jobs.dispatch import sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job, transition
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import spec

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


def remove_from_settings(cluster: Cluster, name: str) -> None:
    cluster.refresh_from_db()
    cluster.settings["nodes"] = [n for n in cluster.settings["nodes"] if n["name"] != name]
    cluster.save(update_fields=["settings"])


def nodes_of(cluster: Cluster) -> dict[str, str]:
    return dict(Node.objects.filter(cluster=cluster).values_list("name", "state"))


def test_a_node_removed_from_the_local_clusters_settings_leaves_the_inventory(
    local_cluster: Cluster, client_for: Any
) -> None:
    remove_from_settings(local_cluster, "n2")

    sync_cluster(local_cluster.pk)

    assert nodes_of(local_cluster) == {"n1": "up"}
    clusters = client_for("alice").get("/api/v1/clusters/").json()
    listed = clusters["results"] if isinstance(clusters, dict) else clusters
    (shown,) = [c for c in listed if c["name"] == "local"]
    assert [n["name"] for n in shown["nodes"]] == ["n1"]


def test_a_removed_node_a_job_is_placed_on_stays_down_until_the_job_has_left(
    local_cluster: Cluster, people: Any
) -> None:
    job = submit_job(people["alice"], spec(name="wide", gpus_per_node=4)).job
    run_cycle()
    job.refresh_from_db()
    assert job.state == S.ADMITTED
    (node,) = {a["node"] for a in job.placement}
    other = ({"n1", "n2"} - {node}).pop()
    remove_from_settings(local_cluster, node)

    sync_cluster(local_cluster.pk)

    assert nodes_of(local_cluster) == {node: "down", other: "up"}
    assert Node.objects.get(name=node).reason == "no longer reported by the cluster"

    transition(job, S.CANCELLED, code="cancelled", message="test: it left")
    sync_cluster(local_cluster.pk)

    assert nodes_of(local_cluster) == {other: "up"}


def test_a_kubernetes_node_deleted_leaves_the_inventory_and_one_unreachable_stays_down(
    fake_k8s: Any,
) -> None:
    def setup(sim: Any) -> None:
        for name in ("gpu-1", "gpu-2", "gpu-3"):
            sim.node(name, gpus=8)

    with fake_k8s(setup=setup) as (cluster, sim):
        assert set(nodes_of(cluster)) == {"gpu-1", "gpu-2", "gpu-3"}
        sim.delete_node("gpu-2")
        sim.node_unreachable("gpu-3")

        sync_cluster(cluster.pk)

        assert nodes_of(cluster) == {"gpu-1": "up", "gpu-3": "down"}
