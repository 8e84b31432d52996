"""Migration 0014 gives each job its count of the queue's preemptions (Job.preemptions) from
the events the cycle read it from before: its events to `preempting`, and no others."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("back_to_the_latest"),
]

BEFORE = [("jobs", "0013_jobrun_external_id")]
AFTER = [("jobs", "0014_job_preemptions")]


def test_each_job_takes_its_count_of_events_to_preempting(
    people: dict[str, Any], local_cluster: Any
) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    apps = executor.loader.project_state(BEFORE).apps
    Job, JobEvent = apps.get_model("jobs", "Job"), apps.get_model("jobs", "JobEvent")
    PriorityClass, Team = apps.get_model("jobs", "PriorityClass"), apps.get_model("tenancy", "Team")
    common = {
        "team": Team.objects.get(slug="vision"),
        "user_id": people["alice"].pk,
        "priority_class": PriorityClass.objects.first(),
        "spec": {},
    }
    # name -> the to_state of each of its events
    timelines = {
        "twice": ["pending", "admitted", "running", "preempting", "pending", "preempting"],
        "once": ["pending", "running", "preempting", "pending", "running"],
        "never": ["pending", "admitted", "pending"],
        "new": [],
    }
    for name, states in timelines.items():
        job = Job.objects.create(name=name, state="pending", **common)
        JobEvent.objects.bulk_create(JobEvent(job=job, to_state=to) for to in states)
        JobEvent.objects.create(job=job, code="preempting_reclaim")  # a note: no transition

    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    Job = executor.loader.project_state(AFTER).apps.get_model("jobs", "Job")

    counts = dict(Job.objects.values_list("name", "preemptions"))
    assert counts == {"twice": 2, "once": 1, "never": 0, "new": 0}
