"""Who holds a MIG slice: each slice in use is held once, by the gpuq job placed on it or by
whoever uses it outside gpuq. Kubernetes and Slurm tell how many slices of a profile are in
use, not which, so the inventory marks the first ones in use; a gpuq job placed on another
slice of that profile is that mark (clusters.services.held_outside). The cycle's snapshot and
the read models (the GPU map, the submit form's MIG choices, the cluster totals) agree."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.clusters.models import Cluster, Node
from queue_service.clusters.services import OUTSIDE_GPUQ, gpu_layouts, held_outside
from queue_service.jobs.dispatch import run_once
from queue_service.jobs.models import Job
from queue_service.jobs.reports import cluster_totals, mig_choices
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import spec

S = Job.State


def agent_body(profile: str = "1g.10gb", **kw: Any) -> dict[str, Any]:
    body = spec(kind="agent", mig_profile=profile, priority="high", **kw)
    del body["gpus_per_node"]
    return body


def one_g(start: int, in_use: bool = False, job: str | None = None) -> dict[str, Any]:
    return {
        "gpu": 0,
        "profile": "1g.10gb",
        "start": start,
        "size": 1,
        "in_use": in_use,
        "external_job": job,
    }


# (case, the node's instances as the inventory stored them, gpuq's placements there:
# (gpu, start) -> (job, whether the cluster runs it), the slices held outside them)
HOLDERS = [
    (
        "kubernetes: a mark naming a job placed on another slice is that job's",
        [one_g(0, True, "J"), one_g(6)],
        {(0, 6): ("J", False)},
        {},
    ),
    (
        "slurm: a mark naming no one is a running job's whose own slice is unmarked",
        [one_g(0, True), one_g(6)],
        {(0, 6): ("J", True)},
        {},
    ),
    (
        "slurm: not of a job the cluster does not run yet (its slice is not in use there)",
        [one_g(0, True), one_g(6)],
        {(0, 6): ("J", False)},
        {(0, 0): "external"},
    ),
    (
        "a mark on the placed slice itself leaves the others to outsiders",
        [one_g(0, True), one_g(1, True, "other")],
        {(0, 0): ("J", True)},
        {(0, 1): "other"},
    ),
    (
        "a mark naming another job is that job's, not the placed one's",
        [one_g(0, True, "K"), one_g(6)],
        {(0, 6): ("J", True)},
        {(0, 0): "K"},
    ),
    (
        "a named mark is matched before an unnamed one takes its job",
        [one_g(0, True), one_g(1, True, "J"), one_g(6)],
        {(0, 6): ("J", True)},
        {(0, 0): "external"},
    ),
    (
        "a mark of another profile is not the job's",
        [{**one_g(0, True), "profile": "2g.20gb", "size": 2}, one_g(6)],
        {(0, 6): ("J", True)},
        {(0, 0): "external"},
    ),
]


@pytest.mark.parametrize(
    ("mig", "placed", "outside"), [c[1:] for c in HOLDERS], ids=[c[0] for c in HOLDERS]
)
def test_each_slice_in_use_is_held_once(
    mig: list[dict[str, Any]],
    placed: dict[tuple[int, int], tuple[str, bool]],
    outside: dict[tuple[int, int], str],
) -> None:
    """A slice the inventory shows in use that no placement names is held outside gpuq,
    unless it is the count of a gpuq job placed on another slice of the same profile."""
    assert held_outside(mig, placed) == outside


def seven_1g_h100(sim: Any) -> None:
    sim.node("h100-mig", gpus=1, mig={"1g.10gb": 7})


@pytest.mark.django_db(transaction=True)
def test_a_running_slice_job_on_kubernetes_holds_one_slice(
    fake_k8s: Any, people: Any, teams: Any
) -> None:
    """A node with seven 1g.10gb slices runs seven one-slice jobs: the slice a running job
    holds counts once, wherever the inventory marks its pod's device."""
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=7)
    with fake_k8s(setup=seven_1g_h100, image_default="busybox") as (_, sim):
        first = submit_job(people["alice"], agent_body(cluster="k8s", name="first")).job
        run_once()
        first.refresh_from_db()
        assert first.state == S.QUEUED, first.reason
        sim.run(first.external_id)
        run_once()
        first.refresh_from_db()
        assert first.state == S.RUNNING
        later = [
            submit_job(people["alice"], agent_body(cluster="k8s", name=f"later-{i}")).job
            for i in range(6)
        ]
        run_once()
        waiting = []
        for job in later:
            job.refresh_from_db()
            if job.state not in (S.QUEUED, S.DISPATCHING, S.ADMITTED):
                waiting.append((job.name, job.state, job.reason))
        assert waiting == [], (waiting, Node.objects.get(name="h100-mig").mig)


@pytest.mark.django_db
def test_a_slice_in_use_outside_gpuq_is_held_not_offered_as_free(people: Any) -> None:
    """A slice in use by a job gpuq did not start (Slurm's GresUsed, a pod outside gpuq) is
    held: the submit form offers it neither as free now nor as an idle GPU to re-lay out, and
    the cluster's totals and GPU map count it as held (by OUTSIDE_GPUQ)."""
    cluster = Cluster.objects.create(name="hpc", kind="slurm", settings={})
    node = Node.objects.create(
        cluster=cluster,
        name="m1",
        gpu_model="A100-SXM4-80GB",
        gpus=1,
        mig_enabled=True,
        mig=[{**one_g(0), "profile": "7g.80gb", "size": 8, "in_use": True}],
    )
    layouts = gpu_layouts([cluster], people["alice"])
    choice = next(c for c in mig_choices(layouts) if c.profile == "7g.80gb")
    totals = cluster_totals([node], layouts)
    assert (choice.free_now, choice.relayout_gpus, choice.fits_now) == (0, 0, False), choice
    assert totals.mig_slices_held == 1, totals
    assert layouts[node.pk][0]["mig"][0] == {
        "profile": "7g.80gb",
        "start": 0,
        "size": 8,
        "team": OUTSIDE_GPUQ,
        "job": None,
    }
