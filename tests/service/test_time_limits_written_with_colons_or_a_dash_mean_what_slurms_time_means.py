"""A time limit (or checkpoint interval) written with `:` or `-` is read as Slurm's --time
reads it: "10:00" is ten minutes (MM:SS), "1-0" one day (D-HH). Numbers, in JSON or YAML,
are seconds, and so is a number written as text (`time_limit: "60"` must not mean sixty
times `time_limit: 60`); units are gpuq's (90m, 2h, 30d). Every way in (the API, a YAML
file, the UI's form, `gpuq update --time-limit`) goes through the one parser."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client, override_settings

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.spec import parse_duration
from tests.conftest import spec

MINUTE, HOUR, DAY = 60, 3600, 86400


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10:00", 10 * MINUTE),  # MM:SS
        ("1:30", 90),
        ("0:90", 90),  # Slurm checks no field's range
        ("90:00", 90 * MINUTE),
        ("01:30:00", 90 * MINUTE),  # HH:MM:SS
        ("100:00:00", 100 * HOUR),
        ("1-0", DAY),  # D-HH
        ("1-12", DAY + 12 * HOUR),
        ("2-06:30", 2 * DAY + 6 * HOUR + 30 * MINUTE),  # D-HH:MM
        ("2-00:00:00", 2 * DAY),  # D-HH:MM:SS
        ("0-0:0:45", 45),
        (" 1-0 ", DAY),
        ("60", 60),  # a number as text: seconds, as the number is
        (60, 60),
        (90.5, 91),
        ("90m", 90 * MINUTE),
        ("2h", 2 * HOUR),
        ("30d", 30 * DAY),
        ("45s", 45),
    ],
)
def test_a_duration_reads_as_slurms_time_with_colons_or_a_dash_and_as_seconds_or_units_else(
    text: Any, seconds: int
) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text", ["1-", "-1", ":30", "1::30", "1:2:3:4", "1-2-3", "1-2:3:4:5", "1:30m", "h", "1 day"]
)
def test_a_duration_slurm_would_not_read_is_refused_naming_the_forms_there_are(
    text: str,
) -> None:
    with pytest.raises(ValueError) as refused:
        parse_duration(text)
    message = str(refused.value)
    assert message.startswith(f"{text!r} is not a duration"), message
    for form in ("90m", "2h", "30d", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM:SS"):
        assert form in message, message


@pytest.mark.django_db
def test_the_api_a_yaml_file_and_the_form_read_ten_colon_zero_zero_as_ten_minutes(
    client_for: Any, people: Any
) -> None:
    alice = client_for("alice")
    as_json = alice.post(
        "/api/v1/jobs/", {"name": "json", "command": ["a"], "time_limit": "10:00"}, format="json"
    )
    text = "name: yaml\ncommand: [a]\ntime_limit: 10:00\n"
    as_yaml = alice.post("/api/v1/jobs/", data=text.encode(), content_type="application/yaml")
    browser = Client()
    browser.force_login(people["alice"])
    form = {"mode": "form", "name": "form", "command": "a", "gpus_per_node": "1"}
    browser.post("/submit/", {**form, "time_limit": "1-0"})

    assert as_json.json()["spec"]["time_limit"] == 10 * MINUTE, as_json.json()
    assert as_yaml.json()["spec"]["time_limit"] == 10 * MINUTE, as_yaml.json()
    assert Job.objects.get(name="form").spec["time_limit"] == DAY


@pytest.mark.django_db
@override_settings(GPUQ_MAX_TIME_LIMIT_S=30 * DAY)
def test_a_time_limit_past_the_sites_is_refused_in_the_units_the_ui_shows_the_limit_in(
    client_for: Any, people: Any
) -> None:
    answer = client_for("alice").post(
        "/api/v1/jobs/", {"name": "long", "command": ["a"], "time_limit": "31d"}, format="json"
    )
    job = submit_job(people["alice"], spec(name="waits")).job
    update = client_for("alice").patch(
        f"/api/v1/jobs/{job.pk}/", {"time_limit": "31-0"}, format="json"
    )

    assert answer.status_code == 400
    assert answer.json()["time_limit"] == ["at most 30d on this site"]
    assert update.status_code == 400
    assert update.json()["time_limit"] == ["at most 30d on this site"], update.json()
