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


# The API server's words when its authorizer refuses gpuq (responsewriters.Forbidden, wrapped
# by errors.NewForbidden), as the Kubernetes backend quotes them after what it was doing.
SA = "system:serviceaccount:gpuq:gpuq-dispatcher"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            f'create Job gpuq-ml/gpuq-1-1: jobs.batch is forbidden: User "{SA}" cannot create'
            ' resource "jobs" in API group "batch" in the namespace "gpuq-ml"',
            "create Job gpuq-ml/gpuq-1-1: jobs.batch is forbidden: gpuq's account cannot create"
            ' resource "jobs" in API group "batch" in the namespace "gpuq-ml"',
        ),
        (
            f'delete Job gpuq-ml/gpuq-1-1: jobs.batch "gpuq-1-1" is forbidden: User "{SA}"'
            ' cannot delete resource "jobs" in API group "batch" in the namespace "gpuq-ml":'
            ' RBAC: role.rbac.authorization.k8s.io "gpuq-dispatcher" not found',
            'delete Job gpuq-ml/gpuq-1-1: jobs.batch "gpuq-1-1" is forbidden: gpuq\'s account'
            ' cannot delete resource "jobs" in API group "batch" in the namespace "gpuq-ml"',
        ),
        (
            f'read log: pods "p" is forbidden: User "{SA}" cannot get resource "pods/log" in'
            ' API group "" in the namespace "gpuq-ml"',
            'read log: pods "p" is forbidden: gpuq\'s account cannot get resource "pods/log"'
            ' in API group "" in the namespace "gpuq-ml"',
        ),
        (
            'list nodes: nodes is forbidden: User "alice@example.org" cannot list resource'
            ' "nodes" in API group "" at the cluster scope',
            'list nodes: nodes is forbidden: gpuq\'s account cannot list resource "nodes" in'
            ' API group "" at the cluster scope',
        ),
        (
            'get version: forbidden: User "system:anonymous" cannot get path "/version"',
            'get version: forbidden: gpuq\'s account cannot get path "/version"',
        ),
    ],
)
def test_an_api_servers_denial_says_what_was_refused_without_gpuqs_account(
    text: str, shown: str
) -> None:
    assert reaching_error_summary(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        # A 403 about the job itself, not about who gpuq is there: shown as it is.
        'create Job gpuq-ml/gpuq-1-1: jobs.batch "gpuq-1-1" is forbidden: exceeded quota:'
        " gpus, requested: requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=0,"
        " limited: requests.nvidia.com/gpu=4",
        'create Pod: pods "p" is forbidden: violates PodSecurity "restricted:latest":'
        " allowPrivilegeEscalation != false",
    ],
)
def test_a_403_about_the_job_itself_is_shown_as_it_is(text: str) -> None:
    assert reaching_error_summary(text) is None
