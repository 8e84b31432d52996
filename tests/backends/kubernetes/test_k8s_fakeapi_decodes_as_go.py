"""The fake API server refuses what a real one cannot decode or store, so that a manifest
that passes the fake would pass a cluster:
- integer fields declared `format: int32` / `int64`: a built-in kind is decoded into Go
  structs (an overflow is a 400 BadRequest, "cannot unmarshal number ... of type int32"); a
  CRD's structural schema validation checks the format (422 Invalid);
- etcd's limit (1.5 MiB) counts the stored object, whose strings are UTF-8: a Job well
  inside it in UTF-8 is stored, whatever its size in `\\u` escapes."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from conftest import NAMESPACE, request
from k8s_fakeapi import MAX_STORED_BYTES, FakeApiServer
from k8s_sim import Sim

from queue_service.backends.kubernetes import manifests
from queue_service.backends.kubernetes.config import parse_settings

SETTINGS = parse_settings({"kubeconfig": "x", "image_default": "nvcr.io/nvidia/pytorch:24.08-py3"})
BATCH = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
VOLCANO = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/jobs"


def _post(api: FakeApiServer, path: str, body: dict[str, Any]) -> httpx2.Response:
    with httpx2.Client(base_url=api.url, timeout=10, trust_env=False) as http:
        return http.post(path, json=body)


def _workload(kind: str) -> tuple[str, dict[str, Any]]:
    if kind == "batch":
        return BATCH, manifests.build(request(kind="agent", gpus_per_node=1), SETTINGS).objects[0]
    return VOLCANO, manifests.build(request(nodes=2), SETTINGS).objects[0]


@pytest.mark.parametrize(
    ("kind", "field", "value", "code"),
    [
        ("batch", "ttlSecondsAfterFinished", 2**31, 400),
        ("batch", "backoffLimit", -(2**31) - 1, 400),
        ("batch", "activeDeadlineSeconds", 2**63, 400),  # an int64
        ("volcano", "ttlSecondsAfterFinished", 2**31, 422),
        ("volcano", "maxRetry", 2**31, 422),
        ("batch", "ttlSecondsAfterFinished", 2**31 - 1, 201),
        ("volcano", "ttlSecondsAfterFinished", 2**31 - 1, 201),
    ],
)
def test_the_fake_refuses_an_integer_past_its_declared_format(
    api: FakeApiServer, sim: Sim, kind: str, field: str, value: int, code: int
) -> None:
    path, obj = _workload(kind)
    obj["spec"][field] = value
    answer = _post(api, path, obj)
    assert answer.status_code == code, answer.text[:300]


def test_the_fake_stores_a_job_that_fits_etcd_as_utf8(api: FakeApiServer, sim: Sim) -> None:
    _, job = _workload("batch")
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    env += [{"name": f"NOTE_{i}", "value": "日" * 30000} for i in range(12)]
    utf8 = len(json.dumps(job, ensure_ascii=False, separators=(",", ":")).encode())
    escaped = len(json.dumps(job, separators=(",", ":")).encode())
    assert utf8 < MAX_STORED_BYTES * 0.75 and escaped > MAX_STORED_BYTES
    answer = _post(api, BATCH, job)
    assert answer.status_code == 201, (answer.status_code, answer.text[:200])
