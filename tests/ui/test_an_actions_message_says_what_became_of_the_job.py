"""Cancel and suspend answer with a message saying what became of the job: done at once (a
job not yet on a cluster), under way (its cluster stops it first), or done already (a
double-click, or a page left open while someone else did it), not "Cancelling" for a job
that is cancelled, nor "Suspended" for one its cluster has yet to stop."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.conftest import spec

S = Job.State


def message_after(client: Client, job: Job, verb: str) -> str:
    page = client.post(f"/jobs/{job.pk}/{verb}/", follow=True).content.decode()
    (message,) = re.findall(r'<li class="msg-[a-z]+">(.*?)</li>', page)
    return message


@pytest.mark.parametrize(
    ("state", "verb", "first", "again"),
    [
        (
            S.PENDING,
            "cancel",
            "Cancelled run.",
            "Not cancelled: the job already ended (cancelled).",
        ),
        (
            S.RUNNING,
            "cancel",
            "Cancelling run: its cluster stops it, after a grace period to checkpoint.",
            "run is already being cancelled.",
        ),
        (S.PENDING, "suspend", "Suspended run.", "run is already suspended."),
        (
            S.RUNNING,
            "suspend",
            "Suspending run: its cluster stops it, after a grace period to checkpoint.",
            "run is already being suspended.",
        ),
    ],
)
def test_an_action_and_its_double_submit_say_what_became_of_the_job(
    people: Any, local_cluster: Any, state: str, verb: str, first: str, again: str
) -> None:
    job = submit_job(people["alice"], spec(name="run")).job
    on_cluster = state == S.RUNNING
    Job.objects.filter(pk=job.pk).update(
        state=state, cluster=local_cluster, external_id="local:run@1" if on_cluster else ""
    )
    client = Client()
    client.force_login(people["alice"])

    assert message_after(client, job, verb) == first
    assert message_after(client, job, verb) == again
