"""A preview validates a job as a submit does. A job pinned to a cluster that
does not exist, or is disabled, is refused by submit with a 400 naming `cluster`; the
preview of the same body must say the same, not answer 200 with a scheduler reason."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.clusters.models import Cluster
from tests.conftest import spec


@pytest.mark.parametrize("cluster", ["nope", "local"])
def test_a_preview_pinned_to_a_cluster_one_cannot_submit_to_is_a_400_naming_the_cluster(
    client_for: Any, local_cluster: Any, cluster: str
) -> None:
    Cluster.objects.filter(name="local").update(enabled=False)
    alice = client_for("alice")
    body = spec(cluster=cluster)

    submitted = alice.post("/api/v1/jobs/", body, format="json")
    previewed = alice.post("/api/v1/jobs/preview/", body, format="json")

    assert submitted.status_code == 400, submitted.content
    assert list(submitted.json()) == ["cluster"]
    assert previewed.status_code == 400, previewed.content
    assert previewed.json() == submitted.json()
