"""A job stored before a rule of the spec was tightened keeps running as it was submitted:
since commit 06383ce a `checkpoint.dir` must be absolute, and may name an array's task (%a)
or array (%A) only in an array; jobs submitted before it may hold a relative one, or a %a
on a job of its own. An update (priority, time limit, emails, an array's limit) is checked
as a submit of the job with the new values would be, but what the job already had is not
the update's to answer for: it is refused only for what the change itself makes wrong."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.models import Job
from tests.conftest import spec

pytestmark = pytest.mark.django_db
OLD_CHECKPOINT = {"dir": "checkpoints/run1", "interval": 600}
OLD_ARRAY_CHECKPOINT = {"dir": "/ckpt/sweep/%a", "interval": 600}


def submitted_before_the_rule(
    client: Any, checkpoint: dict[str, Any] = OLD_CHECKPOINT, **fields: Any
) -> Job:
    """A job as stored before 06383ce: its spec written straight to the database."""
    body = spec(name="old", time_limit=3600, checkpoint={"dir": "/ckpt", "interval": 600}, **fields)
    response = client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    tasks = Job.objects.filter(array=job.array) if job.array_id else Job.objects.filter(pk=job.pk)
    for task in tasks:
        Job.objects.filter(pk=task.pk).update(spec={**task.spec, "checkpoint": checkpoint})
    job.refresh_from_db()
    return job


@pytest.mark.parametrize(
    ("change", "stored"),
    [
        ({"priority": "high"}, ("priority", "high")),
        ({"time_limit": "2h"}, ("time_limit", 7200)),
        ({"notify": ["end"]}, ("notify", ["end"])),
    ],
)
def test_an_update_that_does_not_touch_the_checkpoint_is_saved(
    client_for: Any, people: Any, change: dict[str, Any], stored: tuple[str, Any]
) -> None:
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    alice = client_for("alice")
    job = submitted_before_the_rule(alice)

    response = alice.patch(f"/api/v1/jobs/{job.pk}/", change, format="json")

    assert response.status_code == 200, response.json()
    job.refresh_from_db()
    key, value = stored
    assert (job.spec[key], job.spec["checkpoint"]) == (value, OLD_CHECKPOINT)


def test_an_arrays_limit_changes_on_tasks_with_an_old_checkpoint(client_for: Any) -> None:
    alice = client_for("alice")
    job = submitted_before_the_rule(alice, array="0-3%1")

    response = alice.patch(f"/api/v1/jobs/{job.pk}/", {"array": {"max_running": 2}}, format="json")

    assert response.status_code == 200, response.json()
    assert response.json()["array"]["max_running"] == 2


def test_an_update_that_makes_the_checkpoint_wrong_is_still_refused(client_for: Any) -> None:
    """A time limit under the checkpoint's interval is this update's doing."""
    alice = client_for("alice")
    job = submitted_before_the_rule(alice)

    response = alice.patch(f"/api/v1/jobs/{job.pk}/", {"time_limit": 300}, format="json")

    assert (response.status_code, response.json()) == (
        400,
        {"checkpoint": ["the checkpoint interval is longer than the time limit"]},
    )
    job.refresh_from_db()
    assert job.spec["time_limit"] == 3600


def test_a_bad_value_in_the_update_is_refused_naming_its_field(client_for: Any) -> None:
    alice = client_for("alice")
    job = submitted_before_the_rule(alice)

    response = alice.patch(f"/api/v1/jobs/{job.pk}/", {"time_limit": "soon"}, format="json")

    assert response.status_code == 400
    assert set(response.json()) == {"time_limit"}, response.json()


def test_a_copy_of_the_old_job_is_a_new_submit_and_meets_todays_rules(client_for: Any) -> None:
    alice = client_for("alice")
    job = submitted_before_the_rule(alice)

    response = alice.post(f"/api/v1/jobs/{job.pk}/resubmit/", {}, format="json")

    assert (response.status_code, response.json()) == (
        400,
        {"checkpoint": {"dir": ["must be an absolute path, the same on every attempt"]}},
    )


@pytest.mark.parametrize(
    ("change", "stored"),
    [
        ({"priority": "high"}, ("priority", "high")),
        ({"time_limit": "2h"}, ("time_limit", 7200)),
        ({"notify": ["end"]}, ("notify", ["end"])),
    ],
)
def test_an_update_of_a_job_of_its_own_whose_checkpoint_names_a_task_is_saved(
    client_for: Any, people: Any, change: dict[str, Any], stored: tuple[str, Any]
) -> None:
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    alice = client_for("alice")
    job = submitted_before_the_rule(alice, checkpoint=OLD_ARRAY_CHECKPOINT)

    response = alice.patch(f"/api/v1/jobs/{job.pk}/", change, format="json")

    assert response.status_code == 200, response.json()
    job.refresh_from_db()
    key, value = stored
    assert (job.spec[key], job.spec["checkpoint"]) == (value, OLD_ARRAY_CHECKPOINT)


def test_an_update_giving_a_checkpoint_is_refused(client_for: Any) -> None:
    alice = client_for("alice")
    job = submitted_before_the_rule(alice, checkpoint=OLD_ARRAY_CHECKPOINT)

    response = alice.patch(
        f"/api/v1/jobs/{job.pk}/",
        {"priority": "high", "checkpoint": OLD_ARRAY_CHECKPOINT},
        format="json",
    )

    assert response.status_code == 400
    assert list(response.json()) == ["checkpoint"], response.json()
    job.refresh_from_db()
    assert job.spec["priority"] == "normal"


def test_a_copy_of_a_job_of_its_own_whose_checkpoint_names_a_task_is_refused(
    client_for: Any,
) -> None:
    alice = client_for("alice")
    job = submitted_before_the_rule(alice, checkpoint=OLD_ARRAY_CHECKPOINT)

    response = alice.post(f"/api/v1/jobs/{job.pk}/resubmit/", {}, format="json")

    assert (response.status_code, response.json()) == (
        400,
        {
            "checkpoint": {
                "dir": ["%a and %A name an array's task and array: this job is not an array"]
            }
        },
    )


def test_a_submit_of_a_job_of_its_own_whose_checkpoint_names_a_task_is_refused(
    client_for: Any,
) -> None:
    response = client_for("alice").post(
        "/api/v1/jobs/", spec(name="new", checkpoint=OLD_ARRAY_CHECKPOINT), format="json"
    )

    assert response.status_code == 400
    assert response.json() == {
        "checkpoint": {
            "dir": ["%a and %A name an array's task and array: this job is not an array"]
        }
    }
    assert not Job.objects.filter(name="new").exists()
