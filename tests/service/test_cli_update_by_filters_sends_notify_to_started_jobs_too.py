"""`gpuq update --mine --notify end --priority high` (by filters, no --state): a waiting job
gets both; a started one, whose priority can no longer change, still gets what it emails
about (which may change until it ends), and its line says its priority was kept and why.
The started jobs were left out of the selection: their --notify was silently not applied."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import spec
from tests.service.test_cli import Gpuq, gpuq  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_by_filters_notify_reaches_started_jobs_and_priority_only_waiting_ones(
    gpuq: Gpuq, people: dict[str, Any], local_cluster: Any
) -> None:
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    started = submit_job(people["alice"], spec(name="started")).job
    run_cycle()  # admitted: started
    waiting = submit_job(people["alice"], spec(name="waiting")).job

    result = gpuq("alice", "update", "--mine", "--notify", "end", "--priority", "high")

    assert (result.code, result.err) == (0, "")
    assert sorted(result.out.splitlines()) == sorted(
        [
            f"{waiting.pk}  waiting  priority high, email on end",
            f"{started.pk}  started  email on end; priority kept: it is admitted, and a"
            " priority or time limit changes only while a job waits",
        ]
    )
    stored = {
        j.name: (j.priority_class.name, j.spec.get("notify"), j.state)
        for j in Job.objects.select_related("priority_class")
    }
    assert stored == {
        "waiting": ("high", ["end"], Job.State.PENDING),
        "started": ("normal", ["end"], Job.State.ADMITTED),
    }


def test_by_filters_a_priority_alone_still_selects_only_waiting_jobs(
    gpuq: Gpuq, people: dict[str, Any], local_cluster: Any
) -> None:
    submit_job(people["alice"], spec(name="started"))
    run_cycle()
    waiting = submit_job(people["alice"], spec(name="waiting")).job

    result = gpuq("alice", "update", "--mine", "--time-limit", "1h")

    assert (result.code, result.out, result.err) == (
        0,
        f"{waiting.pk}  waiting  time limit 1h\n",
        "",
    )
