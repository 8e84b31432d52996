"""Volcano restarts a gang in place (`PodFailed`/`PodEvicted` -> `RestartJob`) up to
`maxRetry` - 1 times. A job's retries list the causes it is retried for (`retries.on`);
one that lists none is never retried, by the service or in place: its Volcano Job gets
`maxRetry: 1` (Volcano counts the failure that ends the job), whatever `retries.max` says.
A batch/v1 Job never retries in place (`backoffLimit: 0`)."""

from __future__ import annotations

import pytest
from conftest import request
from test_k8s_manifests import _volcano_in_place_restarts

from queue_service.backends.kubernetes import manifests
from queue_service.backends.kubernetes.config import parse_settings

SETTINGS = parse_settings({"kubeconfig": "x"})


@pytest.mark.parametrize(
    ("retries_max", "retry_on", "restarts"),
    [
        (3, (), 0),
        (0, (), 0),
        (3, ("node_failure",), 3),
        (2, ("node_failure", "preemption"), 2),
    ],
)
def test_a_volcano_gang_restarts_in_place_only_for_a_job_with_retry_causes(
    retries_max: int, retry_on: tuple[str, ...], restarts: int
) -> None:
    plan = manifests.build(request(nodes=2, retries_max=retries_max, retry_on=retry_on), SETTINGS)
    spec = plan.objects[0]["spec"]
    assert plan.ref.kind == "vcjob"
    assert _volcano_in_place_restarts(spec) == restarts, spec["maxRetry"]
    if not retry_on:
        assert spec["maxRetry"] == 1  # 0 would be Volcano's default, 3
