"""Which errors are about how gpuq reaches a cluster (shown to teams only as a summary, since
their own words name the service account, host and port), whatever form the host takes."""

from __future__ import annotations

import pytest

from queue_service.clusters.services import reaching_error_summary


@pytest.mark.parametrize(
    "text",
    [
        "squeue on svc@login.example.org:22 timed out after 60s",
        "squeue on svc@10.0.0.5:2222 timed out after 60s",
        "squeue on svc@::1:2222 timed out after 60s",
        "SFTP read on svc@fe80::1%eth0:22 failed: EOF",
        "sacct on svc@2001:db8::7:22 timed out after 60s",
        "sbatch on svc@[2001:db8::7]:22 timed out after 60s",
    ],
)
def test_an_error_naming_account_host_and_port_is_shown_as_a_summary(text: str) -> None:
    summary = reaching_error_summary(text)
    assert summary is not None
    assert "svc" not in summary and ":22" not in summary


@pytest.mark.parametrize(
    "text",
    [
        "sbatch: error: Batch job submission failed: Invalid account or account/partition",
        "job 12 exited with code 3",
    ],
)
def test_the_clusters_own_answer_about_a_job_is_shown_as_it_is(text: str) -> None:
    assert reaching_error_summary(text) is None
