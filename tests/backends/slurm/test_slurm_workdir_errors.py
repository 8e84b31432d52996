"""A `workdir` setting the cluster user may not create is a bad setting: a permanent error
that says so (permission denied), not a transient one that retries for ever naming a missing
file. Against the lab's sshd (SFTP only: no Slurm job is submitted); /usr is root's, mode
755."""

from __future__ import annotations

import pytest

from queue_service.backends.base import BackendError

from .conftest import lab_backend


@pytest.mark.slurm
def test_a_workdir_the_user_may_not_create_is_a_permanent_error_that_says_why(
    slurm_lab: None,
) -> None:
    backend = lab_backend(workdir="/usr/gpuq-review-not-writable")
    try:
        with pytest.raises(BackendError) as raised:
            backend.workdir()
    finally:
        backend.close()
    error = raised.value
    assert (error.permanent, "ermission denied" in error.message) == (True, True), (
        f"permanent={error.permanent}: {error.message!r}"
    )
