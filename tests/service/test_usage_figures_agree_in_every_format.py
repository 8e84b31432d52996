"""The team usage report is one report in several formats: GET /teams/<slug>/usage/, the UI's
CSV download and `gpuq usage` give the same GPU-hours, to the API's 4 decimals
(reports.HOURS_DECIMALS), in full however large (no exponent: a bill is made of its
digits)."""

from __future__ import annotations

import contextlib
import csv
import io
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from queue_service.cli import main
from queue_service.jobs.models import Job, JobRun
from queue_service.jobs.services import submit_job
from queue_service.tenancy.services import create_token
from tests.conftest import spec

S = Job.State
DAY = timedelta(days=1)


def on(day: date, hour: float) -> datetime:
    return datetime.combine(day, time(), UTC) + timedelta(hours=hour)


def ran(job: Job, start: datetime, end: datetime, gpus: float) -> None:
    JobRun.objects.create(
        job=job,
        attempt=1,
        team_id=job.team_id,
        user_id=job.user_id,
        gpus=gpus,
        started_at=start,
        ended_at=end,
        ended_by="succeeded",
    )


def test_each_row_of_the_usage_csv_says_what_the_api_says_for_that_day_and_user(
    people: Any, client_for: Any
) -> None:
    """An agent job on a 1g slice of an A100 (1/7 of a GPU) for an hour a day: 0.1429
    GPU-hours a day in both, 1.0 over the week in the API."""
    first = timezone.now().date() - timedelta(days=8)
    job = submit_job(people["alice"], spec(name="agent")).job
    Job.objects.filter(pk=job.pk).update(state=S.SUCCEEDED, gpus=1 / 7)
    for i in range(7):
        ran(job, on(first + i * DAY, 9), on(first + i * DAY, 10), gpus=1 / 7)
    last = first + 6 * DAY

    body = client_for("dana").get(f"/api/v1/teams/vision/usage/?from={first}&to={last}").json()
    api = {(d["day"], d["user"]): d["gpu_hours"] for d in body["days"]}
    browser = Client()
    browser.force_login(people["dana"])
    download = browser.get(f"/teams/vision/usage.csv?from={first}&to={last}")
    assert download.status_code == 200
    rows = list(csv.DictReader(io.StringIO(download.content.decode())))

    assert body["total_gpu_hours"] == pytest.approx(1.0)
    assert {r["gpu_hours"] for r in rows} == {"0.1429"}
    assert {(r["day"], r["user"]): float(r["gpu_hours"]) for r in rows} == api


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("gpus", "days", "total"),
    [(128, 360, "1105920"), (1 / 7, 1, "3.4286"), (2, 1, "48")],
    ids=["a-year-of-128", "a-day-of-a-slice", "a-day-of-2"],
)
def test_gpuq_usage_prints_the_apis_figures_in_full(
    live_server: Any, people: Any, gpus: float, days: int, total: str
) -> None:
    """The command-line chargeback prints the API's total_gpu_hours and each user's, in full
    and to its decimals: 128 GPUs for 360 days are 1105920 GPU-hours, not "1.10592e+06"."""
    first = timezone.now().date() - timedelta(days=365)
    job = submit_job(people["alice"], spec(name="used")).job
    Job.objects.filter(pk=job.pk).update(state=S.SUCCEEDED, gpus=gpus)
    ran(job, on(first, 0), on(first + days * DAY, 0), gpus=gpus)
    _, key = create_token(people["dana"], "cli")
    out = io.StringIO()
    with contextlib.redirect_stderr(io.StringIO()):
        code = main(
            ["usage", "vision", "--from", first.isoformat()],
            environ={"GPUQ_URL": live_server.url, "GPUQ_TOKEN": key},
            out=out,
        )

    assert code == 0, out.getvalue()
    text = out.getvalue()
    assert text.splitlines()[0].endswith(f": {total} GPU-hours"), text
    alice = next(line for line in text.splitlines() if line.startswith("alice"))
    assert alice.split()[1] == total, text


def test_a_user_whose_jobs_held_no_gpus_is_in_no_format_of_the_usage_report(
    people: Any, client_for: Any, local_cluster: Any
) -> None:
    """Bob runs a job of no GPUs (charged none: it asks no CPUs nor memory); Alice a GPU for
    an hour. Bob has no usage: the API's users and days, the CSV and the admin page's legend
    name Alice only (the API listed Bob with 0.0 GPU-hours in `users` alone)."""
    from tests.service.test_job_flow import run_until

    cpu = submit_job(people["bob"], spec(name="cpu", gpus_per_node=0, command=["true"])).job
    cpu = run_until(cpu, lambda j: j.state == S.SUCCEEDED)
    assert JobRun.objects.get(job=cpu).gpus == 0
    today = timezone.now().date()
    gpu = submit_job(people["alice"], spec(name="gpu")).job
    Job.objects.filter(pk=gpu.pk).update(state=S.SUCCEEDED)
    ran(gpu, on(today - DAY, 9), on(today - DAY, 10), gpus=1)

    body = client_for("dana").get("/api/v1/teams/vision/usage/").json()
    browser = Client()
    browser.force_login(people["dana"])
    rows = list(
        csv.DictReader(io.StringIO(browser.get("/teams/vision/usage.csv").content.decode()))
    )
    legend = browser.get("/teams/vision/").content.decode().split('class="legend users"')[1]

    assert [u["user"] for u in body["users"]] == ["alice"], body["users"]
    assert {d["user"] for d in body["days"]} == {r["user"] for r in rows} == {"alice"}
    assert "bob" not in legend.split("</ul>")[0]
