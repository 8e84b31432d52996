"""How large a workload may be. The spec takes command + env up to MAX_COMMAND_ENV_BYTES
(1 MiB of UTF-8); a one-node batch Job carries them once, so such a job must fit. The
backend measures each object as it is sent and stored: UTF-8 JSON (lightkube sends UTF-8,
etcd stores strings as UTF-8), not `\\u` escapes. Its own bound (MAX_OBJECT_BYTES) is etcd's
default request limit (1.5 MiB) less room for what the API server adds later; an object past
it is refused at once, permanently (test_k8s_edges.py)."""

from __future__ import annotations

import json
from typing import Any

from conftest import request

from queue_service.backends.kubernetes import manifests
from queue_service.backends.kubernetes.config import parse_settings
from queue_service.jobs.spec import MAX_COMMAND_ENV_BYTES, command_env_problem

SETTINGS = parse_settings({"kubeconfig": "x", "image_default": "nvcr.io/nvidia/pytorch:24.08-py3"})


def _agent(**overrides: Any) -> Any:
    return request(kind="agent", gpus_per_node=1, **overrides)


def _sent(obj: dict[str, Any]) -> int:
    return len(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode())


def test_a_non_ascii_env_is_measured_as_the_utf8_bytes_sent() -> None:
    # 630 KB of UTF-8 (1.26 MB were it measured with \u escapes: six bytes a character).
    env = {f"NOTE_{i}": "日" * 30000 for i in range(7)}
    assert command_env_problem(["python", "train.py"], env) == {}
    plan = manifests.build(_agent(command=("python", "train.py"), env=env), SETTINGS)
    assert 630_000 < _sent(plan.objects[0]) < manifests.MAX_OBJECT_BYTES


def test_a_command_and_env_at_the_specs_limit_fit_a_one_node_job() -> None:
    command = ["python", "train.py"]
    names = [f"V{i:02d}" for i in range(32)]
    room = MAX_COMMAND_ENV_BYTES - sum(len(a.encode()) for a in command)
    env = {n: "x" * (room // len(names) - len(n)) for n in names}
    assert command_env_problem(command, env) == {}
    plan = manifests.build(_agent(command=tuple(command), env=env), SETTINGS)
    assert MAX_COMMAND_ENV_BYTES < _sent(plan.objects[0]) <= manifests.MAX_OBJECT_BYTES
    assert manifests.MAX_OBJECT_BYTES < manifests.ETCD_MAX_REQUEST_BYTES
