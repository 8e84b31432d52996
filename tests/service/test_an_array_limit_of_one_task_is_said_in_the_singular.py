"""The reason of an array's task held back by its %1: "runs at most 1 task at once: 1 is
running or ahead of this one", not "1 tasks ... 1 are"."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import spec

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_array_of_one_task_at_once_says_task_and_is_in_the_singular(
    people: Any, local_cluster: Any
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-2%1", command="sleep 5")).job

    run_cycle()

    held = Job.objects.get(array_id=first.array_id, array_index=1)
    assert held.reason["message"] == (
        "array 'sweep' runs at most 1 task at once: 1 is running or ahead of this one"
    )
