"""The submit page's MIG picker and the clusters page's GPU map follow the cycle: a site's
`mig_profiles` tables, and an idle GPU offered for a relayout only where gpuq may re-lay it out."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from frontend.charts import SLICE_W
from queue_service.clusters.models import Cluster, Node
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from queue_service.tenancy.models import Quota
from tests.conftest import SITE_MIG_MODEL, spec

pytestmark = pytest.mark.django_db

SEVEN_1G = [
    {"gpu": 0, "profile": "1g.10gb", "start": s, "size": 1, "in_use": False} for s in range(7)
]


def client_of(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def picker_label(page: str, profile: str) -> str:
    """The MIG picker's label for one profile, as the submit page draws it."""
    for label in re.findall(r'<label class="mig-choice[^"]*">.*?</label>', page, re.S):
        if f"<strong>{profile}</strong>" in label:
            return label
    raise AssertionError(f"no picker entry for {profile}")


def test_the_mig_picker_does_not_offer_a_relayout_on_a_cluster_whose_layouts_gpuq_cannot_change(
    people: Any, teams: Any
) -> None:
    # A Slurm node's MIG layout is the site's gres.conf: gpuq never re-lays it out
    # (ARCHITECTURE.md, MIG), so a profile it does not have cannot be made for a job.
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=4)
    hpc = Cluster.objects.create(name="hpc", kind="slurm", settings={})
    Node.objects.create(
        cluster=hpc, name="m1", gpu_model="A100-SXM4-80GB", gpus=1, mig_enabled=True, mig=SEVEN_1G
    )
    # What really happens to such a job: it waits for an instance that will never be made.
    body = spec(name="big", kind="agent", mig_profile="3g.40gb", cluster="hpc")
    del body["gpus_per_node"]
    big = submit_job(people["alice"], body).job
    run_cycle()
    big.refresh_from_db()
    assert big.state == Job.State.PENDING and big.reason["code"] == "mig_unavailable"

    page = client_of(people["alice"]).get("/submit/").content.decode()

    label = picker_label(page, "3g.40gb")
    assert "re-laid out" not in label, label
    assert "unavailable" in label.split(">", 1)[0], label  # drawn as not fitting now


def test_the_mig_picker_offers_the_slices_of_a_model_the_site_describes_in_mig_profiles(
    people: Any, teams: Any, site_mig_cluster: Cluster
) -> None:
    # A cluster's `mig_profiles` overrides the built-in table for a model (ARCHITECTURE.md,
    # MIG); the cycle places slice jobs on such a node (tests/service/test_mig_site_table_charge).
    Quota.objects.create(team=teams["vision"], gpu_model=SITE_MIG_MODEL, nominal_gpus=1)

    alice = client_of(people["alice"])
    slice_job = {"name": "x", "command": "serve", "kind": "agent", "mig_profile": "1g.12gb"}
    preview = alice.post("/submit/preview/", slice_job)
    assert 'data-verdict="starts"' in preview.content.decode()  # the scheduler can place it

    page = alice.get("/submit/").content.decode()

    label = picker_label(page, "1g.12gb")
    assert "4 free now" in label, label
    assert "0.25 GPU of quota" in label, label  # 1 of the site's 4 compute slices


def test_the_cluster_map_draws_a_site_described_mig_gpu_with_the_sites_memory_slices(
    people: Any, site_mig_cluster: Cluster
) -> None:
    page = client_of(people["alice"]).get("/clusters/").content.decode()

    # Four instances of one memory slice each fill the GPU: no part of it is drawn empty.
    (gpu,) = re.findall(r'<rect class="gpu mig-gpu"[^>]*width="([0-9.]+)"', page)
    assert float(gpu) == pytest.approx(4 * SLICE_W)
