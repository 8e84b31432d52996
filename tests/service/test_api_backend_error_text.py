"""A cluster that does not answer the API's request (the only such request today: a job's
logs) is a 503 (transient) or a 502 (permanent) whose words are those the clusters API shows
everyone for a failed sync: no service account, host or port of gpuq's, no socket or SSH
internals. The own words go to the server's log, where site staff find them. Against a Slurm
cluster whose login node refuses connections (a closed port on 127.0.0.1)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from queue_service.api.errors import exception_handler
from queue_service.backends import BackendError
from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import backend_for
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.conftest import spec
from tests.service.test_cluster_sync_error_shown import closed_port, unreachable_slurm

pytestmark = pytest.mark.django_db(transaction=True)

REFUSED = "the cluster did not answer: cannot reach the cluster (connection refused)"
UNUSABLE = "the cluster did not answer: gpuq's settings for the cluster are not usable"


def transport_words(port: int) -> tuple[str, ...]:
    """What names how gpuq reaches the cluster: its account there, the host, the port, and
    the socket's and paramiko's own words."""
    return ("svc-gpuq", "svc-old", "127.0.0.1", str(port), "Errno", "SSH to", "paramiko")


def on_the_cluster(people: Any, cluster: Cluster, external_id: str) -> Job:
    """Alice's job, running on `cluster` under `external_id` as the sync last saw it."""
    job = submit_job(people["alice"], spec(name="far-away")).job
    Job.objects.filter(pk=job.pk).update(
        state=Job.State.RUNNING, cluster=cluster, external_id=external_id
    )
    return job


@pytest.mark.parametrize(
    ("external_id", "status", "said", "own_words"),
    [
        # The login node refuses the connection: transient.
        ("4242", 503, REFUSED, "svc-gpuq@127.0.0.1:{port}"),
        # The job ran as a Unix account since taken out of the cluster's `accounts`
        # setting: permanent, and the own words name that account.
        ("svc-old:4242", 502, UNUSABLE, "svc-old"),
    ],
    ids=["refused-503", "account-gone-502"],
)
def test_alice_reading_logs_from_a_cluster_that_does_not_answer_gets_its_summary(
    client_for: Any,
    people: Any,
    caplog: pytest.LogCaptureFixture,
    external_id: str,
    status: int,
    said: str,
    own_words: str,
) -> None:
    port = closed_port()
    cluster = unreachable_slurm(port)
    job = on_the_cluster(people, cluster, external_id)

    with caplog.at_level(logging.WARNING):
        response = client_for("alice").get(f"/api/v1/jobs/{job.pk}/logs/")

    assert response.status_code == status
    assert response.json() == {"detail": said}
    assert not [w for w in transport_words(port) if w in response.content.decode()]
    assert own_words.format(port=port) in caplog.text  # for site staff


@pytest.mark.parametrize(
    ("external_id", "status", "said"), [("4242", 503, REFUSED), ("svc-old:4242", 502, UNUSABLE)]
)
def test_a_backend_error_that_reaches_the_api_in_its_own_words_is_answered_with_its_summary(
    people: Any, caplog: pytest.LogCaptureFixture, external_id: str, status: int, said: str
) -> None:
    """Whatever a view calls: the API's error handler does not rely on the caller to have
    summarized the error (before, it answered `the cluster did not answer: SSH to
    svc-gpuq@127.0.0.1:<port> ...`)."""
    port = closed_port()
    cluster = unreachable_slurm(port)
    job = on_the_cluster(people, cluster, external_id)
    with pytest.raises(BackendError) as raised:
        backend_for(cluster).logs(external_id)  # the backend's own words
    assert [w for w in transport_words(port) if w in raised.value.message]
    request = Request(APIRequestFactory().get(f"/api/v1/jobs/{job.pk}/logs/"))

    with caplog.at_level(logging.WARNING, logger="queue_service.api.errors"):
        response = exception_handler(raised.value, {"request": request, "view": None})

    assert response is not None
    assert (response.status_code, response.data) == (status, {"detail": said})
    assert not [w for w in transport_words(port) if w in str(response.data)]
    assert raised.value.message in caplog.text
    assert f"GET /api/v1/jobs/{job.pk}/logs/" in caplog.text
