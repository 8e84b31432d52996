"""A slice job that names no `gpu_model` is charged by the model it is placed on (1/7 of a
GPU on most, 1/4 on an A30). While it waits, its page tells the share of the models that
could run it, by the site's tables as the cycle reads them: one share, or the range."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from queue_service.clusters.models import Cluster, Node
from queue_service.jobs.services import submit_job
from tests.conftest import spec

pytestmark = pytest.mark.django_db


def asks_for(user: Any, job: Any) -> str:
    client = Client()
    client.force_login(user)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    return re.search(r"<dt>Asks for</dt><dd>(.*?)</dd>", page, re.S)[1]


def slice_job(user: Any, profile: str) -> Any:
    body = spec(name="serve", kind="agent", mig_profile=profile)
    del body["gpus_per_node"]
    return submit_job(user, body).job


def test_a_waiting_slice_job_only_a30s_offer_shows_an_a30s_share(people: Any) -> None:
    hpc = Cluster.objects.create(name="hpc", kind="slurm", settings={})
    Node.objects.create(cluster=hpc, name="a1", gpu_model="A30", gpus=1, mig_enabled=True)
    Node.objects.create(  # offers no 1g.6gb: not a model the job could run on
        cluster=hpc, name="h1", gpu_model="A100-SXM4-80GB", gpus=1, mig_enabled=True
    )
    job = slice_job(people["alice"], "1g.6gb")

    assert asks_for(people["alice"], job).endswith(" · 0.25 GPUs of quota")


def test_a_waiting_slice_job_two_models_offer_shows_the_range_of_their_shares(
    people: Any, site_mig_cluster: Cluster
) -> None:
    # 1g.12gb: 1 of the site model's 4 compute slices, or 1 of an H100 NVL's 7.
    hpc = Cluster.objects.create(name="hpc", kind="slurm", settings={})
    Node.objects.create(cluster=hpc, name="h1", gpu_model="H100 NVL", gpus=1, mig_enabled=True)
    job = slice_job(people["alice"], "1g.12gb")

    assert asks_for(people["alice"], job).endswith(
        " · 0.14-0.25 GPUs of quota, by the model it runs on"
    )
