"""Cluster settings of the wrong type are a permanent error naming the setting when they are
read, not an exception at a job's render (a TypeError there is no BackendError: the dispatch
would leave the job `dispatching` and retry it for ever) nor a setting read as something else
(`"requeue": "false"` read as true would let Slurm run jobs again that gpuq retries too)."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.backends.base import BackendError
from queue_service.backends.slurm import script
from queue_service.backends.slurm.backend import SlurmSettings

from .conftest import request

BASE = {"host": "login", "user": "gpuq", "known_hosts": "login ssh-ed25519 AAAA"}


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("container_mounts", [1]),
        ("container_mounts", [None]),
        ("container_mounts", ["/data:/data", ["/scratch"]]),
        ("container_mounts", {"/data": "/data"}),
        ("container_mounts", 5),
        ("requeue", "false"),
        ("requeue", "yes"),
        ("requeue", 1),
    ],
)
def test_a_setting_of_the_wrong_type_is_refused_naming_it(setting: str, value: Any) -> None:
    with pytest.raises(BackendError, match=setting) as raised:
        SlurmSettings.from_mapping({**BASE, setting: value})
    assert raised.value.permanent


@pytest.mark.parametrize(
    ("given", "mounts", "requeue"),
    [
        ({}, (), False),
        ({"container_mounts": "/data:/data,/scratch"}, ("/data:/data,/scratch",), False),
        ({"container_mounts": ["/data:/data", "/scratch"], "requeue": True}, None, True),
        ({"container_mounts": None, "requeue": False}, (), False),
    ],
)
def test_settings_of_the_right_type_are_read_as_given(
    given: dict[str, Any], mounts: tuple[str, ...] | None, requeue: bool
) -> None:
    read = SlurmSettings.from_mapping({**BASE, **given})
    assert read.script.requeue is requeue
    if mounts is not None:
        assert read.script.container_mounts == mounts
    # What is read renders a batch script.
    assert script.render(request(image="ubuntu:22.04"), read.script, "/w").startswith("#!")
