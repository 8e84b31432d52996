"""Resubmitting a job: a copy of its spec, team and pinned cluster, submitted as whoever asks
(as `sbatch` of the same script again). Alice owns the job, Bob is her teammate, Charlie an
outsider, staff a member of no team."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.clusters.models import Cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, submit_job
from tests.conftest import spec

EVERY_FIELD = spec(
    name="full",
    kind="training",
    image="nvcr.io/nvidia/pytorch:24.05-py3",
    command=["torchrun", "train.py", "--note", "it's $(here)"],
    env={"A": "1", "B": "x y"},
    nodes=2,
    gpus_per_node=4,
    gpu_model="SIM-A100",
    cpus_per_gpu=8,
    memory="64G",
    time_limit="6h",
    priority="low",
    retries={"max": 2, "on": ["preemption"]},
    checkpoint={"dir": "/ckpt/full", "interval": "30m"},
    nccl_debug=True,
)


def resubmit(client: Any, job: Job, key: str | None = None) -> Any:
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return client.post(f"/api/v1/jobs/{job.pk}/resubmit/", **headers)


@pytest.mark.parametrize(("who", "status"), [("alice", 201), ("bob", 201), ("charlie", 404)])
def test_the_team_resubmits_a_job_and_an_outsider_cannot_see_it(
    client_for: Any, people: dict[str, Any], who: str, status: int
) -> None:
    original = submit_job(people["alice"], spec(name="again")).job

    response = resubmit(client_for(who), original)

    assert response.status_code == status, response.content
    copies = Job.objects.exclude(pk=original.pk)
    if status == 404:
        assert not copies.exists()
        return
    copy = copies.get()
    assert (copy.user.username, copy.team.slug, copy.state) == (who, "vision", "pending")
    assert copy.spec == original.spec
    event = copy.events.get()
    assert event.message == f"submitted by {who} as a copy of job {original.pk}"
    assert event.details == {"copy_of": str(original.pk)}


def test_a_copy_has_every_field_of_the_original(
    client_for: Any, people: dict[str, Any], local_cluster: Cluster
) -> None:
    original = submit_job(people["alice"], {**EVERY_FIELD, "cluster": "local"}).job
    cancel_job(people["alice"], original)  # an ended job can be run again

    body = resubmit(client_for("bob"), original).json()

    copy = Job.objects.get(pk=body["id"])
    assert copy.spec == original.spec
    assert (copy.cluster, copy.pinned_cluster, copy.priority_class.name) == (
        local_cluster,
        True,
        "low",
    )


@pytest.mark.parametrize(
    "data",
    [
        spec(),
        spec(command="echo $HOME; exit 3", time_limit=90),
        spec(kind="agent", mig_profile="1g.10gb", gpus_per_node=None, priority="high"),
        spec(kind="agent", gpus_per_node=1, env={}),
        spec(nodes=2, gpus_per_node=8, retries=None, checkpoint=None),
    ],
    ids=["minimal", "shell", "mig-agent", "agent", "gang"],
)
def test_every_stored_spec_is_accepted_again_unchanged(
    client_for: Any, people: dict[str, Any], data: dict[str, Any]
) -> None:
    original = submit_job(people["alice"], {k: v for k, v in data.items() if v is not None}).job

    response = resubmit(client_for("alice"), original)

    assert response.status_code == 201, response.content
    assert Job.objects.get(pk=response.json()["id"]).spec == original.spec


def test_an_unpinned_job_is_copied_unpinned_even_after_it_was_placed(
    client_for: Any, people: dict[str, Any], local_cluster: Cluster
) -> None:
    original = submit_job(people["alice"], spec(name="free")).job
    Job.objects.filter(pk=original.pk).update(cluster=local_cluster)  # as admission does

    copy = Job.objects.get(pk=resubmit(client_for("alice"), original).json()["id"])

    assert (copy.cluster, copy.pinned_cluster) == (None, False)


def test_the_same_idempotency_key_resubmits_once(client_for: Any, people: dict[str, Any]) -> None:
    original = submit_job(people["alice"], spec(name="once")).job
    alice = client_for("alice")

    first = resubmit(alice, original, key="retry-1")
    second = resubmit(alice, original, key="retry-1")

    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"]
    assert Job.objects.count() == 2


def test_a_copy_is_validated_again(
    client_for: Any, people: dict[str, Any], local_cluster: Cluster
) -> None:
    pinned = submit_job(people["alice"], spec(name="pinned", cluster="local")).job
    Cluster.objects.filter(pk=local_cluster.pk).update(enabled=False)

    response = resubmit(client_for("alice"), pinned)

    assert response.status_code == 400
    assert response.json() == {"cluster": ["no enabled cluster named 'local'"]}
    # Staff see every job, but a job goes into a team its submitter belongs to.
    response = resubmit(client_for("staff"), pinned)
    assert response.status_code == 400
    assert response.json() == {"team": ["you are not a member of team 'vision'"]}
    assert Job.objects.count() == 1
