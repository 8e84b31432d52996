"""Staff disable a cluster ("no new work", the admin's Enabled box): a job that waits only
because of that says so, not that no node of its kind is up (the clusters page and API show
each of that cluster's nodes up)."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import preview_job, run_cycle
from tests.conftest import spec

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


def disable(cluster: Cluster) -> None:
    Cluster.objects.filter(pk=cluster.pk).update(enabled=False)


def test_a_job_that_waits_because_its_cluster_was_disabled_is_told_so_not_that_no_node_is_up(
    local_cluster: Cluster, people: Any
) -> None:
    """The reviewer's case: the demo's one cluster disabled; a job pinned to it and one that
    could run anywhere both said "needs 1 node x 1 free GPU, but only 0 nodes of that kind
    are up in the cluster"."""
    anywhere = submit_job(people["alice"], spec(name="anywhere")).job
    pinned = submit_job(people["alice"], spec(name="pinned", cluster="local")).job
    disable(local_cluster)

    run_cycle()

    for job in (anywhere, pinned):
        job.refresh_from_db()
        assert job.state == S.PENDING
        assert job.reason["code"] == "cluster_disabled", f"{job.name}: {job.reason}"
        message = job.reason["message"]
        assert message == "cluster local is disabled: no new work starts there", job.name
        assert job.reason["details"]["clusters"] == ["local"]


def test_a_job_only_a_disabled_clusters_nodes_could_hold_names_it_while_others_run(
    local_cluster: Cluster, people: Any, tmp_path: Any
) -> None:
    """Another cluster is up, but its nodes are too small for the job (8 GPUs on a node):
    only the disabled one's could hold it. A job that fits the enabled cluster starts there,
    and one that neither could hold is still told no node of its kind is up."""
    small = Cluster.objects.create(
        name="small",
        kind="local",
        settings={
            "workdir": str(tmp_path / "small-jobs"),
            "grace_s": 1,
            "nodes": [{"name": "s1", "gpus": 2, "gpu_model": "SIM-A100"}],
        },
    )
    sync_cluster(small.pk)
    disable(local_cluster)
    wide = submit_job(people["alice"], spec(name="wide", gpus_per_node=4)).job
    fits = submit_job(people["alice"], spec(name="fits", gpus_per_node=1)).job
    huge = submit_job(people["alice"], spec(name="huge", gpus_per_node=16)).job

    run_cycle()

    wide.refresh_from_db()
    fits.refresh_from_db()
    huge.refresh_from_db()
    assert wide.reason["code"] == "cluster_disabled", wide.reason
    assert "cluster local is disabled" in wide.reason["message"]
    assert fits.state == S.ADMITTED and fits.cluster == small
    assert huge.reason["code"] == "unsatisfiable", huge.reason
    assert "disabled" not in huge.reason["message"]


def test_a_job_pinned_to_a_disabled_cluster_says_so_whatever_else_would_hold_it(
    local_cluster: Cluster, people: Any
) -> None:
    """Pinned to a disabled cluster, a job waits for that cluster first, not for the GPUs
    its team's earlier jobs hold; enabled again, it waits for those."""
    for i in range(2):
        submit_job(people["alice"], spec(name=f"hog-{i}", gpus_per_node=4, command=["sleep", "60"]))
    run_cycle()
    pinned = submit_job(people["alice"], spec(name="pinned", cluster="local")).job
    disable(local_cluster)

    run_cycle()

    pinned.refresh_from_db()
    assert pinned.state == S.PENDING
    assert pinned.reason["message"] == "cluster local is disabled: no new work starts there"

    Cluster.objects.filter(pk=local_cluster.pk).update(enabled=True)
    run_cycle()
    pinned.refresh_from_db()
    assert pinned.reason["code"] != "cluster_disabled", pinned.reason


def test_a_dry_run_only_a_disabled_cluster_could_hold_says_that_cluster_is_disabled(
    local_cluster: Cluster, people: Any
) -> None:
    disable(local_cluster)

    preview = preview_job("vision", {"nodes": 1, "gpus_per_node": 2, "time_limit": 3600})

    assert preview["starts_now"] is False
    assert preview["reason"]["code"] == "cluster_disabled", preview["reason"]
