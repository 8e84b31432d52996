"""A slice job that names no `gpu_model` is charged by the model it is placed on: 1/7 of a
GPU on most, 1/4 on an A30 (shared/specs/mig.md). Until it is placed, the jobs API's `gpus`
(a number, in the list and the detail alike) is the largest share among the models that
could run it, by the site's tables as the cycle reads them: an upper bound of what it will
count against quota, as the job page's range tells in words."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.clusters.models import Cluster, Node
from queue_service.jobs.models import Job
from queue_service.jobs.services import transition
from tests.conftest import spec

pytestmark = pytest.mark.django_db


def slice_job(client: Any, profile: str, **fields: Any) -> str:
    body = spec(name="serve", kind="agent", mig_profile=profile, **fields)
    del body["gpus_per_node"]
    response = client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.json()
    return str(response.json()["id"])


def gpus_shown(client: Any, job_id: str) -> tuple[Any, Any]:
    """`gpus` in the job's detail and in the list."""
    detail = client.get(f"/api/v1/jobs/{job_id}/").json()["gpus"]
    listed = [j["gpus"] for j in client.get("/api/v1/jobs/").json()["results"] if j["id"] == job_id]
    return detail, listed[0]


@pytest.fixture
def hpc(db: Any) -> Cluster:
    return Cluster.objects.create(name="hpc", kind="slurm", settings={})


def test_a_waiting_slice_job_only_a30s_offer_counts_an_a30s_quarter(
    client_for: Any, hpc: Cluster
) -> None:
    Node.objects.create(cluster=hpc, name="a1", gpu_model="A30", gpus=1, mig_enabled=True)
    Node.objects.create(  # offers no 1g.6gb: not a model the job could run on
        cluster=hpc, name="h1", gpu_model="A100-SXM4-80GB", gpus=1, mig_enabled=True
    )
    alice = client_for("alice")
    job_id = slice_job(alice, "1g.6gb")

    assert gpus_shown(alice, job_id) == (0.25, 0.25)


def test_a_waiting_slice_job_two_models_offer_counts_the_larger_share(
    client_for: Any, hpc: Cluster, site_mig_cluster: Cluster
) -> None:
    # 1g.12gb: 1 of the site model's 4 compute slices, or 1 of an H100 NVL's 7.
    Node.objects.create(cluster=hpc, name="h1", gpu_model="H100 NVL", gpus=1, mig_enabled=True)
    alice = client_for("alice")
    job_id = slice_job(alice, "1g.12gb")

    assert gpus_shown(alice, job_id) == (0.25, 0.25)


@pytest.mark.parametrize(
    ("case", "fields", "expected"),
    [
        # Pinned to a cluster whose nodes are H100 NVLs: the site model's quarter is elsewhere.
        ("pinned", {"cluster": "hpc"}, 1 / 7),
        # Its model named: that model's share, whoever else offers the profile.
        ("model named", {"gpu_model": "H100-NVL"}, 1 / 7),
        ("held", {"hold": True}, 0.25),
    ],
)
def test_a_waiting_slice_jobs_share_is_of_the_models_that_could_run_it(
    client_for: Any,
    hpc: Cluster,
    site_mig_cluster: Cluster,
    case: str,
    fields: dict[str, Any],
    expected: float,
) -> None:
    Node.objects.create(cluster=hpc, name="h1", gpu_model="H100 NVL", gpus=1, mig_enabled=True)
    alice = client_for("alice")
    job_id = slice_job(alice, "1g.12gb", **fields)

    assert gpus_shown(alice, job_id) == (pytest.approx(expected), pytest.approx(expected)), case


def test_a_placed_slice_job_shows_the_share_it_was_charged(
    client_for: Any, hpc: Cluster, site_mig_cluster: Cluster
) -> None:
    Node.objects.create(cluster=hpc, name="h1", gpu_model="H100 NVL", gpus=1, mig_enabled=True)
    alice = client_for("alice")
    job_id = slice_job(alice, "1g.12gb")
    # As the cycle admits it onto the H100 NVL (transition() is the only writer).
    transition(
        Job.objects.get(pk=job_id),
        Job.State.ADMITTED,
        code="admitted",
        cluster=hpc,
        gpu_model="H100 NVL",
        gpus=1 / 7,
        placement=[
            {
                "node": "h1",
                "gpus": [0],
                "mig": {"gpu": 0, "profile": "1g.12gb", "start": 0, "size": 1},
            }
        ],
    )

    assert gpus_shown(alice, job_id) == (1 / 7, 1 / 7)


def test_a_waiting_slice_job_no_model_offers_keeps_its_stored_share(client_for: Any) -> None:
    alice = client_for("alice")
    job_id = slice_job(alice, "3g.40gb")

    assert gpus_shown(alice, job_id) == (3 / 7, 3 / 7)
