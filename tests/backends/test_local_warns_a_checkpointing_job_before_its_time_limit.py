"""The local backend warns a job with a checkpoint policy `checkpoint_signal_s` before its time
limit with SIGUSR1, as the Slurm script's `--signal=B:USR1@<s>` does: once per attempt, to the
process the job is (Slurm's `B:` signals the batch shell only, which gpuq's script `exec`s into
the job's command), not to the rest of its process group."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_service.backends.base import ClusterConfig, RemoteState
from queue_service.backends.local import LocalBackend
from tests.backends.test_local import (
    _config,
    finished,
    kill_everything_under,
    request,
    wait_for,
)

# The job's own shell records a USR1 and runs on; a child it started in its process group
# records one too, should it get one.
JOB = (
    "trap 'echo job >> \"$GPUQ_CHECKPOINT_DIR/warned\"' USR1; "
    'sh -c \'trap "echo child >> \\"$GPUQ_CHECKPOINT_DIR/warned\\"" USR1;'
    " while :; do sleep 0.1; done' & "
    "while :; do sleep 0.1; done"
)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    """test_local.py's backend, warning 2 s before the time limit."""
    config = _config(tmp_path)
    settings = {**config.settings, "checkpoint_signal_s": 2}
    yield LocalBackend(ClusterConfig(config.id, config.name, config.kind, settings))
    kill_everything_under(tmp_path)


def test_a_checkpointing_job_gets_sigusr1_once_before_its_time_limit(
    backend: LocalBackend, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    eid = backend.submit(request(JOB, time_limit_s=4, checkpoint_dir=str(ckpt))).external_id
    status = wait_for(backend, eid, finished)
    assert status.state == RemoteState.TIMEOUT
    warned = ckpt / "warned"
    assert warned.read_text() == "job\n"  # once, and only to the job's own process
    started = json.loads((backend._dir(eid) / "started.json").read_text())["at"]
    # Due 2 s after the start (4 - 2), so well before the limit.
    assert 1.5 <= warned.stat().st_mtime - started < 3.5


def test_a_job_without_a_checkpoint_policy_gets_no_warning(
    backend: LocalBackend, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    job = request(JOB, time_limit_s=3, env={"GPUQ_CHECKPOINT_DIR": str(ckpt)})
    status = wait_for(backend, backend.submit(job).external_id, finished)
    assert status.state == RemoteState.TIMEOUT
    assert not (ckpt / "warned").exists()
