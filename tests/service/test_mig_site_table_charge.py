"""A slice on a GPU model the site describes in its cluster's `mig_profiles` is stored, when
the cycle admits it, as the share of a GPU the scheduler counted against quota (the site's
table), not the built-in /7 of an unknown model."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import build_snapshot, run_cycle
from queue_service.tenancy.models import Quota
from scheduler.engine import running_gpus
from scheduler.mig import overrides_from
from tests.conftest import SITE_MIG_MODEL, spec

S = Job.State


def test_a_slice_on_a_site_described_model_is_stored_as_the_share_the_scheduler_counted(
    people: Any, teams: Any, site_mig_cluster: Any
) -> None:
    Quota.objects.create(
        team=teams["vision"], gpu_model=SITE_MIG_MODEL, nominal_gpus=1, borrowing_limit_gpus=0
    )
    body = spec(name="slice", kind="agent", mig_profile="1g.12gb", cluster="site")
    del body["gpus_per_node"]
    job = submit_job(people["alice"], body).job

    run_cycle()

    job.refresh_from_db()
    assert (job.state, job.gpu_model) == (S.ADMITTED, SITE_MIG_MODEL)
    snap, _, _ = build_snapshot(timezone.now())
    (running,) = snap.running
    counted = running_gpus(running, overrides_from(snap.mig_tables))
    assert counted == pytest.approx(1 / 4)  # the site's table: 1 of 4 compute slices
    # What usage (JobRun.gpus), fair share and the quota report charge: the same share.
    assert job.gpus == pytest.approx(counted)
