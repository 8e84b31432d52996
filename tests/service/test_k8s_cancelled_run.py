"""A Kubernetes job that ran, then was deleted on its cluster (an admin's
`kubectl delete`, a namespace cleanup) between two syncs, is charged for its run. The
workload's status says its pods ran (batch/v1 Job `ready`, Volcano `running`), but the
Kubernetes backend reports such an end as CANCELLED without an exit code, which
`_ran` (since "a queued job cancelled on its cluster is not charged") reads as a job
cancelled while it waited."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
import yaml
from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig
from lightkube.resources.batch_v1 import Job as K8sJob
from lightkube.types import CascadeType

from queue_service.backends.kubernetes.status import batch_job_status
from queue_service.jobs.dispatch import run_once
from queue_service.jobs.models import Job, JobRun
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import spec

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


def test_a_kubernetes_job_that_ran_and_was_deleted_on_its_cluster_is_charged(
    fake_k8s: Any, people: Any, teams: Any
) -> None:
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=8)
    with fake_k8s(
        setup=lambda sim: sim.node("gpu-1", gpus=8), image_default="busybox", workload="indexed"
    ) as (cluster, sim):
        job = submit_job(people["alice"], spec(name="on-k8s", cluster="k8s")).job
        run_once()
        job.refresh_from_db()
        assert job.state == S.QUEUED, job.reason
        sim.run(job.external_id)  # it starts; gpuq's next sync comes later
        namespace, _, name = job.external_id.split("/")
        admin = Client(
            config=KubeConfig.from_dict(yaml.safe_load(cluster.settings["kubeconfig"])),
            namespace=namespace,
            timeout=httpx2.Timeout(3),
            trust_env=False,
        )
        admin.delete(K8sJob, name, cascade=CascadeType.FOREGROUND)  # kubectl delete job …
        _, workload = sim.workload(job.external_id)
        assert workload["status"].get("ready") == 1  # what the cluster knows: its pod ran
        seen = batch_job_status(
            job.external_id, workload, sim.pods(job.external_id), now=0, image_pull_grace_s=300
        ).status

        run_once()

        job.refresh_from_db()
        assert job.state == S.CANCELLED, (job.state, job.reason)
        assert JobRun.objects.filter(job=job).exists(), (
            f"its run is not charged: the cluster reported {seen}"
        )
