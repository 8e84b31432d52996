"""Updating a stored job (as `scontrol update`): a waiting job's priority class and time
limit, and an array's limit of tasks at once. Alice owns the jobs, Bob is her teammate, Dana
vision's team admin, Charlie an outsider; the local cluster has 2 nodes x 4 GPUs."""

from __future__ import annotations

import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from queue_service.jobs import snapshot
from queue_service.jobs.models import Job
from queue_service.jobs.services import (
    JobConflict,
    cancel_job,
    submit_job,
    suspend_job,
    update_job,
)
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import on_sqlite, spec

S = Job.State
pytestmark = pytest.mark.django_db(transaction=True)
SLEEPS = ["sleep", "600"]


def patch(client: Any, job: Job, body: Any) -> Any:
    return client.patch(f"/api/v1/jobs/{job.pk}/", body, format="json")


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def fill_the_cluster(people: dict[str, Any]) -> Job:
    blocker = submit_job(people["bob"], spec(name="blocker", nodes=2, gpus_per_node=4)).job
    run_cycle()
    assert fresh(blocker).state == S.ADMITTED
    return blocker


def test_a_higher_priority_takes_a_waiting_job_ahead_of_its_teammates(
    people: dict[str, Any], local_cluster: Any, client_for: Any
) -> None:
    fill_the_cluster(people)
    first = submit_job(people["alice"], spec(name="first", priority="low")).job
    second = submit_job(people["alice"], spec(name="second", priority="low")).job
    run_cycle()
    assert (fresh(first).queue_position, fresh(second).queue_position) == (1, 2)

    response = patch(client_for("alice"), second, {"priority": "normal"})
    run_cycle()

    assert response.status_code == 200, response.content
    assert (response.json()["priority"], response.json()["spec"]["priority"]) == (
        "normal",
        "normal",
    )
    assert (fresh(second).queue_position, fresh(first).queue_position) == (1, 2)
    event = fresh(second).events.order_by("-at").first()
    assert event is not None
    assert (event.code, event.message, event.details) == (
        "updated",
        "updated by alice: priority normal (was low)",
        {"priority": ["low", "normal"]},
    )


def test_a_shorter_time_limit_lets_a_waiting_job_backfill(
    people: dict[str, Any], local_cluster: Any
) -> None:
    # All three within their teams' nominal quotas (such jobs lead the order).
    submit_job(people["charlie"], spec(name="blocker", gpus_per_node=4, time_limit="1h"))
    run_cycle()
    head = submit_job(people["bob"], spec(name="head", nodes=2, gpus_per_node=4)).job
    filler = submit_job(
        people["charlie"], spec(name="filler", gpus_per_node=4, priority="low", time_limit="2h")
    ).job
    run_cycle()
    assert (fresh(head).state, fresh(filler).state) == (S.PENDING, S.PENDING)

    update_job(people["charlie"], filler, {"time_limit": 1800})
    run_cycle()

    assert (fresh(head).state, fresh(filler).state) == (S.PENDING, S.ADMITTED)
    assert fresh(filler).spec["time_limit"] == 1800
    assert fresh(filler).events.filter(code="updated").get().message == (
        "updated by charlie: time limit 30m (was 2h)"
    )


@pytest.mark.parametrize(
    ("who", "status"),
    [("alice", 200), ("bob", 403), ("dana", 200), ("charlie", 404), ("staff", 200)],
)
def test_the_owner_a_team_admin_or_staff_update_a_job_and_no_one_else(
    people: dict[str, Any], client_for: Any, who: str, status: int
) -> None:
    job = submit_job(people["alice"], spec(name="mine", time_limit="1h")).job

    response = patch(client_for(who), job, {"time_limit": "2h"})

    assert response.status_code == status, response.content
    assert fresh(job).spec["time_limit"] == (7200 if status == 200 else 3600)
    assert fresh(job).events.filter(code="updated").count() == (status == 200)


def test_a_job_that_has_started_keeps_its_priority_and_time_limit(
    people: dict[str, Any], local_cluster: Any, client_for: Any
) -> None:
    job = submit_job(people["alice"], spec(name="started", time_limit="1h")).job
    run_cycle()
    assert fresh(job).state == S.ADMITTED

    response = patch(client_for("alice"), job, {"priority": "high", "time_limit": "2h"})

    assert response.status_code == 409, response.content
    assert "only while it waits" in response.json()["detail"]
    assert fresh(job).spec["time_limit"] == 3600
    assert fresh(job).priority_class.name == "normal"


def test_a_suspended_job_is_updated_and_stays_suspended(
    people: dict[str, Any], client_for: Any
) -> None:
    job = submit_job(people["alice"], spec(name="held", hold=True)).job

    response = patch(client_for("alice"), job, {"priority": "low"})

    assert response.status_code == 200, response.content
    assert (fresh(job).state, fresh(job).priority_class.name) == (S.SUSPENDED, "low")
    assert fresh(job).reason["code"] == "suspended"


def test_an_update_that_changes_nothing_records_nothing(
    people: dict[str, Any], client_for: Any
) -> None:
    job = submit_job(people["alice"], spec(name="same", time_limit="1h")).job

    response = patch(client_for("alice"), job, {"priority": "normal", "time_limit": 3600})

    assert response.status_code == 200, response.content
    assert not fresh(job).events.filter(code="updated").exists()


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"priority": "urgent"}, "priority", "unknown priority class 'urgent'"),
        ({"time_limit": "forever"}, "time_limit", "is not a duration"),
        ({"time_limit": "400d"}, "time_limit", "d on this site"),
        ({"time_limit": "10m"}, "checkpoint", "checkpoint interval is longer"),
        ({"name": "other"}, "name", "resubmit a copy to change the rest"),
        ({"array": {"max_running": 2}}, "array", "not a task of an array"),
        ({}, "non_field_errors", "nothing to change"),
        (["priority"], "non_field_errors", "must be a JSON object"),
    ],
)
def test_a_bad_update_is_refused_naming_the_field_and_changes_nothing(
    people: dict[str, Any], client_for: Any, body: Any, field: str, says: str
) -> None:
    job = submit_job(
        people["alice"],
        spec(name="checked", time_limit="1h", checkpoint={"dir": "/ckpt", "interval": "30m"}),
    ).job

    response = patch(client_for("alice"), job, body)

    assert response.status_code == 400, response.content
    assert says in str(response.json()[field])
    assert fresh(job).spec == job.spec
    assert not fresh(job).events.filter(code="updated").exists()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"array": {"max_running": 0}}, "greater than or equal to 1"),
        ({"array": {"limit": 3}}, "resubmit a copy to change the rest"),
        ({"array": {}}, "required"),
    ],
)
def test_a_bad_array_limit_is_refused_naming_the_field(
    people: dict[str, Any], client_for: Any, body: Any, says: str
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-3%2")).job

    response = patch(client_for("alice"), first, body)

    assert response.status_code == 400, response.content
    assert says in str(response.json()["array"])
    assert fresh(first).array.max_running == 2


def test_raising_an_arrays_limit_starts_more_of_its_tasks(
    people: dict[str, Any], local_cluster: Any, client_for: Any
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-3%1")).job
    run_cycle()
    tasks = Job.objects.filter(array=first.array_id).order_by("array_index")
    assert [t.state for t in tasks] == [S.ADMITTED, S.PENDING, S.PENDING, S.PENDING]

    # Through any task, even one that has started: the limit is the array's.
    response = patch(client_for("alice"), first, {"array": {"max_running": 3}})
    run_cycle()

    assert response.status_code == 200, response.content
    assert response.json()["array"]["max_running"] == 3
    assert response.json()["array"]["indices"] == "0-3%3"
    assert [t.state for t in tasks.all()] == [S.ADMITTED] * 3 + [S.PENDING]
    assert fresh(first).events.filter(code="updated").get().message == (
        "updated by alice: its array's tasks: at most 3 at once (was at most 1 at once)"
    )


def test_an_arrays_limit_is_removed_with_null_and_capped_at_its_size(
    people: dict[str, Any], client_for: Any
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-3%1")).job
    alice = client_for("alice")

    capped = patch(alice, first, {"array": {"max_running": 50}}).json()["array"]
    removed = patch(alice, first, {"array": {"max_running": None}}).json()["array"]

    assert (capped["max_running"], capped["indices"]) == (4, "0-3%4")
    assert (removed["max_running"], removed["indices"]) == (None, "0-3")


def test_an_update_waits_for_a_running_cycle_so_none_admits_on_the_old_spec(
    people: dict[str, Any], local_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cycle reads the job with a 1h limit; an update to 2h arrives before it admits the
    job. Committed then, the job would start with a limit the scheduler never saw."""
    job = submit_job(people["alice"], spec(name="racing", time_limit="1h")).job
    outcome: list[object] = []
    real = snapshot.held_back

    def other() -> None:
        try:
            update_job(people["alice"], Job.objects.get(pk=job.pk), {"time_limit": 7200})
            outcome.append("updated")
        except JobConflict as exc:
            outcome.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=other)

    def racing(rows: Any) -> Any:
        thread.start()
        thread.join(timeout=1.0)  # an update that does not wait for the cycle is done by now
        return real(rows)

    monkeypatch.setattr(snapshot, "held_back", racing)
    run_cycle()
    thread.join(timeout=30)

    assert fresh(job).state == S.ADMITTED
    assert fresh(job).spec["time_limit"] == 3600
    assert len(outcome) == 1 and isinstance(outcome[0], JobConflict), outcome


def test_updating_works_on_the_embedded_default_sqlite(tmp_path: Path) -> None:
    printed = on_sqlite(
        tmp_path,
        textwrap.dedent(
            """
            from queue_service.jobs.services import update_job
            job = submit_job(alice, {"name": "j", "command": ["true"], "priority": "low"}).job
            update_job(alice, job, {"priority": "normal", "time_limit": 600})
            job.refresh_from_db()
            print("updated", job.priority_class.name, job.spec["time_limit"])
            """
        ),
    )
    assert printed[-1] == "updated normal 600"


def test_suspending_then_updating_then_resuming_keeps_the_update(people: dict[str, Any]) -> None:
    job = submit_job(people["alice"], spec(name="later")).job
    suspend_job(people["alice"], job)

    update_job(people["alice"], fresh(job), {"priority": "high"})

    assert fresh(job).spec["priority"] == "high"
    assert fresh(job).priority_class.name == "high"


@pytest.mark.parametrize("body", ["1: x\nname: z\n", "array:\n  1: 2\n  limit: 3\n"])
def test_a_yaml_body_mixing_number_and_text_keys_is_refused_not_a_500(
    people: dict[str, Any], client_for: Any, body: str
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-1%1")).job
    alice = client_for("alice")

    patched = alice.generic(
        "PATCH", f"/api/v1/jobs/{first.pk}/", body, content_type="application/yaml"
    )
    copied = alice.generic(
        "POST", f"/api/v1/jobs/{first.pk}/resubmit/", body, content_type="application/yaml"
    )

    assert (patched.status_code, copied.status_code) == (400, 400), patched.content
    assert "resubmit a copy to change the rest" in str(patched.json())


def test_what_a_job_emails_about_changes_until_it_ends(
    people: dict[str, Any], local_cluster: Any, client_for: Any
) -> None:
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    job = submit_job(people["alice"], spec(name="long")).job
    run_cycle()
    assert fresh(job).state == S.ADMITTED  # started: its priority is fixed, not its emails
    alice = client_for("alice")

    added = patch(alice, job, {"notify": ["end", "fail"]})
    removed = patch(alice, job, {"notify": []})
    again = patch(alice, job, {"notify": "all"})

    assert [r.status_code for r in (added, removed, again)] == [200, 200, 200]
    assert added.json()["spec"]["notify"] == ["end", "fail"]
    assert "notify" not in removed.json()["spec"]
    assert fresh(job).spec["notify"] == ["start", "end", "fail", "requeue"]
    assert list(fresh(job).events.filter(code="updated").values_list("message", flat=True)) == [
        "updated by alice: email on end, fail (was nothing)",
        "updated by alice: email on nothing (was end, fail)",
        "updated by alice: email on start, end, fail, requeue (was nothing)",
    ]
    assert fresh(job).state == S.ADMITTED and fresh(job).queue_position is None


def test_notify_of_an_ended_job_or_for_an_owner_without_an_address_is_refused(
    people: dict[str, Any], client_for: Any
) -> None:
    job = submit_job(people["alice"], spec(name="quiet")).job

    by_owner = patch(client_for("alice"), job, {"notify": ["end"]})
    by_admin = patch(client_for("dana"), job, {"notify": ["end"]})
    cancel_job(people["alice"], job)
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    ended = patch(client_for("alice"), job, {"notify": ["end"]})

    assert (by_owner.status_code, by_admin.status_code, ended.status_code) == (400, 400, 409)
    assert "your account has no email address" in by_owner.json()["notify"][0]
    assert by_admin.json()["notify"] == ["alice has no email address to write to"]
    assert ended.json()["detail"] == "the job already ended (cancelled): nothing is left to tell"
    assert "notify" not in fresh(job).spec
