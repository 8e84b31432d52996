"""the registry closes a backend it replaces when a cluster's settings
change. A call still under way on the old backend (another thread: the embedded loop's stop
thread, a gunicorn thread serving logs, a Celery worker's other task) must fail as the
transient BackendError the callers retry, as the registry's own comment promises."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_fakeapi import Fault

from queue_service.backends import BackendError, get_backend
from queue_service.backends.base import ClusterConfig
from queue_service.jobs.dispatch import RETRY, backend_for, dispatch_job
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from queue_service.tenancy.models import Quota
from tests.conftest import spec
from tests.service.test_dispatch_races import workloads

S = Job.State


def test_a_call_on_a_kubernetes_backend_the_registry_replaced_is_a_transient_error(
    fake_k8s: Any,
) -> None:
    with fake_k8s(setup=lambda sim: sim.node("gpu-1", gpus=8)) as (cluster, _):
        old = backend_for(cluster)
        cluster.settings = {**cluster.settings, "request_timeout_s": 6}
        cluster.save()
        assert backend_for(cluster) is not old  # the settings changed: old is closed

        with pytest.raises(BackendError) as info:
            old.nodes()  # a call of another thread, begun before the change

        assert not info.value.permanent


def test_a_submit_whose_backend_is_replaced_meanwhile_is_left_for_a_retry(
    fake_k8s: Any, people: Any, teams: Any
) -> None:
    """The workload's create reaches the cluster while another thread's settings change
    closes the backend: the submit must end as a transient error (the job keeps the
    retry's reason and is adopted by the retry), not as an exception no caller expects,
    which leaves the job dispatching with no retry due until the stale dispatch sweep."""
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=8)
    with fake_k8s(
        setup=lambda sim: sim.node("gpu-1", gpus=8), image_default="busybox", workload="indexed"
    ) as (cluster, sim):
        job = submit_job(people["alice"], spec(name="racy", cluster=cluster.name)).job
        run_cycle()
        backend_for(cluster)  # the backend dispatch_job will use
        changed = ClusterConfig(
            id=cluster.pk,
            name=cluster.name,
            kind=cluster.kind,
            settings={**cluster.settings, "request_timeout_s": 6},
        )
        # While the create is being served, another thread sees the new settings.
        sim.api.inject(
            Fault("race", method="POST", path_contains="/jobs", action=lambda: get_backend(changed))
        )
        sim.api.inject(Fault("drop_after", method="POST", path_contains="/jobs"))

        raised: BaseException | None = None
        try:
            dispatch_job(str(job.pk))
        except Exception as exc:
            raised = exc

        job.refresh_from_db()
        assert len(workloads(sim)) == 1
        # Transient: Celery's autoretry (autoretry_for=BackendError) or the loop retries it.
        assert raised is None or isinstance(raised, BackendError), repr(raised)
        assert job.state == S.QUEUED or job.reason["code"] == RETRY, (job.state, job.reason)
