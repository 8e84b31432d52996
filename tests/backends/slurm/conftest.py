"""The Slurm lab (deploy/slurm-lab): a real slurmctld, four slurmd and an sshd on localhost.

`slurm_lab` checks it once per session: missing, it fails under CI=true and skips elsewhere.
Tests that disturb it (kill a slurmd, stop sshd or slurmctld) use `restore_lab`, which runs
`lab up` afterwards: the script restarts exactly what is missing."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_service.backends.base import ClusterConfig, DispatchRequest, JobStatus, RemoteState
from queue_service.backends.slurm import SlurmBackend, create
from tests.conftest import lab_missing

REPO = Path(__file__).resolve().parents[3]
LAB = REPO / "deploy" / "slurm-lab" / "lab"
LAB_DIR = Path(os.environ.get("SLURM_LAB_DIR", "/var/lib/slurm-lab"))
CLUSTER_JSON = LAB_DIR / "client" / "cluster.json"
# The lab's second key-only user, as an entry of the settings' `accounts`.
ACCOUNT2_JSON = LAB_DIR / "client" / "account2.json"


def lab_settings(**overrides: Any) -> dict[str, Any]:
    settings: dict[str, Any] = json.loads(CLUSTER_JSON.read_text())
    settings.update(overrides)
    return settings


def second_account() -> dict[str, Any]:
    entry: dict[str, Any] = json.loads(ACCOUNT2_JSON.read_text())
    return entry


def lab_backend(clock: Callable[[], float] = time.monotonic, **overrides: Any) -> SlurmBackend:
    cluster = ClusterConfig(id=1, name="lab", kind="slurm", settings=lab_settings(**overrides))
    return create(cluster, clock=clock)


def request(**overrides: Any) -> DispatchRequest:
    """A small valid job; tests override what they are about."""
    fields: dict[str, Any] = {
        "job_id": str(uuid.uuid4()),
        "team": "vision",
        "user": "alice",
        "name": "lab-job",
        "kind": "agent",
        "command": ("true",),
        "gpus_per_node": 0,
    }
    fields.update(overrides)
    return DispatchRequest(**fields)


def wait_for(
    backend: SlurmBackend,
    external_id: str,
    done: Callable[[JobStatus], bool] = lambda s: s.state in RemoteState.TERMINAL,
    timeout_s: float = 30.0,
) -> JobStatus:
    deadline = time.monotonic() + timeout_s
    while True:
        status = backend.poll([external_id])[external_id]
        if done(status) or time.monotonic() > deadline:
            return status
        time.sleep(0.3)


def lab_up() -> None:
    subprocess.run([str(LAB), "up"], check=True, capture_output=True, timeout=300)


def kill_node(node: str) -> None:
    """Simulate the death of a node: its slurmd, its job step daemons and the jobs' own
    processes (with proctrack/linuxproc nothing else would kill them)."""
    jobs = subprocess.run(
        ["squeue", "-h", "-w", node, "-o", "%i"], capture_output=True, text=True, check=True
    ).stdout.split()
    processes: set[int] = set()
    stepds: set[int] = set()
    for job in jobs:
        listed = subprocess.run(
            ["scontrol", "listpids", job, node], capture_output=True, text=True, check=False
        ).stdout.splitlines()[1:]
        for line in listed:
            pid = int(line.split()[0])
            processes.add(pid)
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if Path(f"/proc/{parent}/cmdline").read_bytes().startswith(b"slurmstepd"):
                stepds.add(parent)
    slurmd = int(Path(f"/run/slurm/slurmd-{node}.pid").read_text())
    # The daemons first: a step daemon that outlived its job's processes would report their
    # deaths (the job FAILED), where a dead node's jobs end NODE_FAIL.
    for pid in [slurmd, *sorted(stepds), *sorted(processes - stepds)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def slurm_lab() -> None:
    status = subprocess.run([str(LAB), "status"], capture_output=True, text=True, check=False)
    if status.returncode != 0 or not CLUSTER_JSON.exists() or not ACCOUNT2_JSON.exists():
        lab_missing(f"the Slurm lab (run `{LAB.relative_to(REPO)} up` as root)")


@pytest.fixture(scope="session")
def backend(slurm_lab: None) -> Iterator[SlurmBackend]:
    """The shared backend; the lab starts and ends the session with no job of the submit user."""
    backend = lab_backend()
    cancel_all = "scancel -u $(id -un)"
    backend.connection.run(cancel_all)
    yield backend
    backend.connection.run(cancel_all)
    backend.connection.close()


@pytest.fixture
def restore_lab(slurm_lab: None) -> Iterator[None]:
    yield
    lab_up()
