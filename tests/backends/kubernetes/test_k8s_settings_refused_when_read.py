"""Cluster settings that every manifest would carry are checked when the settings are read
(`parse_settings`, a permanent BackendError naming the key), as `master_port` is: a value the
API server cannot take would otherwise fail every job of the cluster at dispatch.

- `ttl_after_finished_s` becomes `ttlSecondsAfterFinished`, an int32 in batch/v1 and in
  Volcano's CRD: 0 to 2**31 - 1;
- `request_timeout_s` bounds every call: more than 0;
- `kueue_queue` is copied verbatim into the label `kueue.x-k8s.io/queue-name`: a valid label
  value (no `{team}` template);
- `priority_class_map` values are pods' `priorityClassName`s: DNS-1123 subdomains."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import request

from queue_service.backends.base import BackendError
from queue_service.backends.kubernetes import manifests
from queue_service.backends.kubernetes.config import parse_settings

INT32_MAX = 2**31 - 1


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ttl_after_finished_s", 2**31),
        ("ttl_after_finished_s", -1),
        ("request_timeout_s", 0),
        ("kueue_queue", "{team}-gpus"),
        ("kueue_queue", "lq/a"),
        ("kueue_queue", "q" * 64),
        ("kueue_queue", "-lq"),
        ("priority_class_map", {"high": "GPUQ_High"}),
        ("priority_class_map", {"high": "gpuq-high-"}),
    ],
)
def test_a_setting_the_api_server_cannot_take_is_refused_with_the_settings(
    key: str, value: Any
) -> None:
    with pytest.raises(BackendError) as err:
        parse_settings({"kubeconfig": "x", key: value})
    assert err.value.permanent and key in str(err.value)


@pytest.mark.parametrize(
    ("given", "where", "expected"),
    [
        ({"ttl_after_finished_s": INT32_MAX}, ("spec", "ttlSecondsAfterFinished"), INT32_MAX),
        ({"ttl_after_finished_s": 0}, ("spec", "ttlSecondsAfterFinished"), 0),
        (
            {"kueue_queue": "team-a_lq.1"},
            ("metadata", "labels", manifests.KUEUE_LABEL),
            "team-a_lq.1",
        ),
        (
            {"priority_class_map": {"high": "gpuq.high-1"}},
            ("spec", "template", "spec", "priorityClassName"),
            "gpuq.high-1",
        ),
    ],
)
def test_a_setting_at_the_edge_of_what_the_api_server_takes_reaches_the_manifest(
    given: dict[str, Any], where: tuple[str, ...], expected: Any
) -> None:
    parsed = parse_settings({"kubeconfig": "x", "workload": "indexed", **given})
    obj: Any = manifests.build(request(priority="high"), parsed).objects[0]
    for key in where:
        obj = obj[key]
    assert obj == expected
