"""A job's runs are what its team was charged (the usage report, fair share), and they belong
to the job: so the admin reads jobs but never deletes one, nor several at once. Slurm's
accounting likewise keeps a job's usage after its record is purged: a chargeback read after
a clean-up must not change."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from queue_service.jobs.models import Job, JobRun
from queue_service.jobs.reports import usage_report
from queue_service.jobs.services import submit_job
from tests.conftest import spec

S = Job.State


def on(day: date, hour: float) -> datetime:
    return datetime.combine(day, time(), UTC) + timedelta(hours=hour)


@pytest.fixture
def superuser(make_user: Any) -> Client:
    admin = make_user("site-admin", staff=True)
    admin.is_superuser = True
    admin.save()
    browser = Client()
    browser.force_login(admin)
    return browser


def test_a_finished_job_cannot_be_deleted_in_the_admin_and_its_charge_stays(
    people: Any, superuser: Client
) -> None:
    """Two GPUs for two hours three days ago: 4 GPU-hours, before and after an attempt to
    delete the job through the admin's delete page or its "delete selected" action."""
    day = timezone.now().date() - timedelta(days=3)
    job = submit_job(people["alice"], spec(name="done", gpus_per_node=2)).job
    Job.objects.filter(pk=job.pk).update(state=S.SUCCEEDED, gpus=2.0)
    JobRun.objects.create(
        job=job,
        attempt=1,
        team_id=job.team_id,
        user_id=job.user_id,
        gpus=2,
        started_at=on(day, 10),
        ended_at=on(day, 12),
        ended_by="succeeded",
    )
    assert usage_report(job.team, day, day, timezone.now()).total() == pytest.approx(4.0)

    assert superuser.get(f"/admin/jobs/job/{job.pk}/change/").status_code == 200  # it reads
    assert superuser.get(f"/admin/jobs/job/{job.pk}/delete/").status_code == 403
    assert superuser.post(f"/admin/jobs/job/{job.pk}/delete/", {"post": "yes"}).status_code == 403
    listing = superuser.get("/admin/jobs/job/")
    assert b'value="delete_selected"' not in listing.content
    superuser.post(
        "/admin/jobs/job/", {"action": "delete_selected", "_selected_action": [str(job.pk)]}
    )

    assert Job.objects.filter(pk=job.pk).exists()
    assert usage_report(job.team, day, day, timezone.now()).total() == pytest.approx(4.0)
