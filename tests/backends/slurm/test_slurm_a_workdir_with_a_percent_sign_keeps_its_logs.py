"""A `workdir` setting with `%` in it (a valid directory name, which the setting accepts) holds
the jobs' logs: sbatch reads `%u`, `%j`, `%x`… in `--output` and `--error` as its filename
patterns, so the paths gpuq gives it say `%%` for each `%`. Otherwise Slurm writes (or fails
to open) another file than the one gpuq reads, and every job of the cluster fails unread.

On the lab, with a backend of the test's own (the shared `backend` fixture's `scancel -u`
would stop other users of the lab's jobs)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from queue_service.backends.base import RemoteState
from queue_service.backends.slurm import script

from .conftest import lab_backend, request, wait_for

pytestmark = pytest.mark.slurm


def test_a_job_in_a_workdir_with_a_percent_sign_runs_and_its_logs_are_read(
    slurm_lab: None,
) -> None:
    workdir = Path(f"/tmp/gpuq-{uuid.uuid4().hex[:8]}-%u-%j-%x")
    backend = lab_backend(workdir=str(workdir))
    try:
        job = request(command=("bash", "-c", 'echo "out in $PWD"; echo err >&2'))
        external_id = backend.submit(job).external_id
        status = wait_for(backend, external_id)
        out = backend.logs(external_id).data.decode()
        err = backend.logs(external_id, stream="stderr").data.decode()
        assert status.state == RemoteState.SUCCEEDED, (status, out, err)
        assert out == f"out in {script.job_dir(str(workdir), job)}\n"
        assert err == "err\n"
    finally:
        backend.close()
        shutil.rmtree(workdir, ignore_errors=True)
