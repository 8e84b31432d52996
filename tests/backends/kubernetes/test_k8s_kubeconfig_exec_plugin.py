"""Kubeconfigs of EKS and GKE get their token from an exec plugin (`aws eks get-token`,
gke-gcloud-auth-plugin). The backend runs it within the request timeout (a plugin that
hangs, e.g. a login waiting for a human, must not hold the sync or a dispatch worker), sends
the token it prints, and a plugin that fails, hangs or prints no token is a transient
BackendError (a login or a fix of the host mends it), never another exception."""

from __future__ import annotations

import json
import threading
import time

import pytest
import yaml
from conftest import NAMESPACE
from k8s_fakeapi import FakeApiServer
from k8s_sim import Sim

from queue_service.backends.base import BackendError
from queue_service.backends.kubernetes.backend import KubernetesBackend, load_config
from queue_service.backends.kubernetes.config import parse_settings

TOKEN = "s3cret"
CREDENTIAL = {
    "apiVersion": "client.authentication.k8s.io/v1beta1",
    "kind": "ExecCredential",
    "status": {"token": TOKEN},
}


def _exec_backend(api: FakeApiServer, command: str, args: list[str]) -> KubernetesBackend:
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
        "users": [
            {
                "name": "gpuq",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": command,
                        "args": args,
                    }
                },
            }
        ],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "gpuq"}}],
        "current-context": "fake",
    }
    settings = parse_settings(
        {"kubeconfig": yaml.safe_dump(kubeconfig), "request_timeout_s": 1, "max_retries": 0}
    )
    return KubernetesBackend(settings, load_config(settings))


def test_the_token_an_exec_plugin_prints_is_sent(api: FakeApiServer, sim: Sim) -> None:
    api.token = TOKEN
    b = _exec_backend(api, "/bin/echo", [json.dumps(CREDENTIAL)])
    try:
        assert b.nodes()  # the fake answers 401 to any other token
    finally:
        b.close()


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("/bin/false", []),
        ("/nonexistent/aws", ["eks", "get-token"]),
        ("/bin/echo", ["not an ExecCredential"]),
    ],
    ids=["fails", "missing", "prints no token"],
)
def test_an_exec_plugin_that_gives_no_token_is_a_transient_backend_error(
    api: FakeApiServer, command: str, args: list[str]
) -> None:
    b = _exec_backend(api, command, args)
    try:
        with pytest.raises(BackendError) as err:
            b.poll([f"{NAMESPACE}/job/gpuq-x-1"])
        assert not err.value.permanent and "exec plugin" in str(err.value)
    finally:
        b.close()


def test_a_hanging_exec_plugin_is_bounded_by_the_request_timeout(
    api: FakeApiServer,
) -> None:
    # request_timeout_s=1, no retries; the plugin sleeps 12 s.
    b = _exec_backend(api, "/bin/sleep", ["12"])
    outcome: list[BaseException | None] = []

    def call() -> None:
        try:
            b.poll([f"{NAMESPACE}/job/gpuq-x-1"])
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=call, daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(timeout=6)
    waited = time.monotonic() - started
    b.close()
    assert not worker.is_alive(), f"the call still hangs after {waited:.0f} s (timeout 1 s)"
    assert isinstance(outcome[0], BackendError) and not outcome[0].permanent, outcome
