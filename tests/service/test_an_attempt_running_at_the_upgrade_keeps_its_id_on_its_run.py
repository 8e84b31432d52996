"""Migration 0013 gives each run the external id of its attempt: a run of the attempt still on
its cluster when the upgrade runs takes the job's (so its log stays readable after a requeue
clears the job's); runs of attempts that ended before it have none to take."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("back_to_the_latest"),
]

BEFORE = [("jobs", "0012_array_look")]
AFTER = [("jobs", "0013_jobrun_external_id")]


def test_a_run_of_the_attempt_on_its_cluster_takes_the_jobs_external_id(
    people: dict[str, Any], local_cluster: Any
) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    apps = executor.loader.project_state(BEFORE).apps
    Job, JobRun = apps.get_model("jobs", "Job"), apps.get_model("jobs", "JobRun")
    PriorityClass, Team = apps.get_model("jobs", "PriorityClass"), apps.get_model("tenancy", "Team")
    team, now = Team.objects.get(slug="vision"), timezone.now()
    common = {
        "team": team,
        "user_id": people["alice"].pk,
        "priority_class": PriorityClass.objects.first(),
        "cluster_id": local_cluster.pk,
        "spec": {},
    }
    running = Job.objects.create(name="a", state="running", attempts=2, **common)
    Job.objects.filter(pk=running.pk).update(external_id=f"{running.pk}/2")
    pending = Job.objects.create(name="b", state="pending", attempts=1, **common)
    run = {"team": team, "user_id": people["alice"].pk, "gpus": 1, "started_at": now}
    JobRun.objects.create(job=running, attempt=1, **run)
    JobRun.objects.create(job=running, attempt=2, **run)
    JobRun.objects.create(job=pending, attempt=1, **run)

    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    JobRun = executor.loader.project_state(AFTER).apps.get_model("jobs", "JobRun")

    ids = sorted(JobRun.objects.values_list("job__name", "attempt", "external_id"))
    assert ids == [("a", 1, ""), ("a", 2, f"{running.pk}/2"), ("b", 1, "")]
