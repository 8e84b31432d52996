"""The API server's 403 when its authorizer refuses gpuq names the account gpuq uses there
(`User "system:serviceaccount:..." cannot create ...`) and the authorizer's reason (its
roles): a job's reason and events, which its whole team reads, say what was refused
(verb, resource, namespace) without them; the server's log keeps the whole answer."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from k8s_fakeapi import Denial

from queue_service.jobs.dispatch import run_once
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import spec

pytestmark = pytest.mark.django_db(transaction=True)

ROLE_REASON = 'RBAC: role.rbac.authorization.k8s.io "gpuq-dispatcher-jobs" not found'


def test_a_job_gpuqs_account_may_not_create_says_what_was_refused_without_the_account(
    fake_k8s: Any, people: Any, teams: Any, caplog: pytest.LogCaptureFixture
) -> None:
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=8)
    with fake_k8s(
        setup=lambda sim: sim.node("gpu-1", gpus=8), image_default="busybox", workload="indexed"
    ) as (_, sim):
        account = sim.api.user
        sim.api.deny(Denial("create", "jobs", group="batch", reason=ROLE_REASON))
        job = submit_job(people["alice"], spec(name="denied", cluster="k8s")).job
        with caplog.at_level(logging.WARNING):
            run_once()

    job.refresh_from_db()
    shown = [job.reason["message"], *(e.message for e in job.events.all())]
    assert job.state == Job.State.FAILED, job.reason
    assert (
        'cannot create resource "jobs" in API group "batch" in the namespace "gpuq-vision"'
        in job.reason["message"]
    )
    for text in shown:
        assert account not in text and "serviceaccount" not in text, text
        assert ROLE_REASON not in text, text
    assert any(account in r.getMessage() and ROLE_REASON in r.getMessage() for r in caplog.records)
