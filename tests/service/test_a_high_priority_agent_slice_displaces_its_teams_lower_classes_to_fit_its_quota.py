"""The `high` class ("inference and agents: never preempted") displaces its own team's
preemptible jobs when the team's quota is full, on a MIG slice as on whole GPUs: on the
demo's shape (a training node of 8 GPUs and an idle MIG node, one model, one quota of 8 for
the team), a high agent job preempts the team's normal training job that holds the quota,
and runs on the MIG node once it has left. Before, the agent job waited for the training
job's whole time limit (a day), its reason speaking only of the quota."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import spec
from tests.service.test_job_flow import events, run_until

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State
MODEL = "A100-SXM4-80GB"


@pytest.fixture
def demo_cluster(teams: Any, tmp_path: Any) -> Cluster:
    """As gpuq_demo's: a training node of 8 GPUs and a MIG node of 2, one model; vision's
    quota for the model is 8 GPUs."""
    cluster = Cluster.objects.create(
        name="local",
        kind="local",
        settings={
            "workdir": str(tmp_path / "jobs"),
            "grace_s": 1,
            "nodes": [
                {"name": "node-1", "gpus": 8, "gpu_model": MODEL, "pool": "training"},
                {
                    "name": "node-mig",
                    "gpus": 2,
                    "gpu_model": MODEL,
                    "pool": "inference",
                    "mig": True,
                },
            ],
        },
    )
    sync_cluster(cluster.pk)
    Quota.objects.create(
        team=teams["vision"], gpu_model=MODEL, nominal_gpus=8, borrowing_limit_gpus=0
    )
    return cluster


def test_a_high_priority_agent_slice_displaces_its_teams_lower_classes_to_fit_its_quota(
    demo_cluster: Cluster, people: Any
) -> None:
    training = submit_job(
        people["alice"], spec(name="train", gpus_per_node=8, command=["sleep", "300"])
    ).job
    training = run_until(training, lambda j: j.state == S.RUNNING)

    body = spec(
        kind="agent", mig_profile="1g.10gb", name="agent", priority="high", command=["sleep", "30"]
    )
    del body["gpus_per_node"]
    agent = submit_job(people["alice"], body).job
    agent = run_until(agent, lambda j: j.state == S.RUNNING)

    assert [a["node"] for a in agent.placement] == ["node-mig"], agent.placement
    training.refresh_from_db()
    assert S.PREEMPTING in events(training), events(training)
    # Requeued, it waits for its team's quota, which the agent job now holds part of.
    assert training.state == S.PENDING, training.state
    assert training.reason["code"] == "quota_exhausted", training.reason
