"""Fair share decays past usage with a half-life (Slurm's fair-share factor): GPU-seconds used
at time t weigh 2^-(now - t)/half-life. The snapshot hands the scheduler each team's usage
decayed second by second (snapshot._usage_by_team): put in one bucket at the end of a run
(or of its day), a long run would count as if all used at its end, and with a half-life
under a day nothing used today would decay."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from queue_service.jobs.models import JobRun
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import build_snapshot
from scheduler.order import decayed_usage
from tests.conftest import spec

DAY = timedelta(days=1)
# Midday UTC, so that no run below ends on a day boundary.
NOW = datetime(2031, 3, 20, 12, 0, tzinfo=UTC)


def run(job: Any, started_at: datetime, ended_at: datetime | None, gpus: float = 1.0) -> None:
    JobRun.objects.create(
        job=job,
        attempt=1,
        team_id=job.team_id,
        user_id=job.user_id,
        gpus=gpus,
        gpu_model="SIM-A100",
        started_at=started_at,
        ended_at=ended_at,
    )


def exact(gpus: float, start: datetime, end: datetime, half_life_s: float) -> float:
    """The GPU-seconds of a run, each decayed from when it was used."""
    k = math.log(2) / half_life_s
    age_end, age_start = (NOW - end).total_seconds(), (NOW - start).total_seconds()
    return gpus * (math.exp(-k * age_end) - math.exp(-k * age_start)) / k


def decayed(team: str, half_life_s: float) -> float:
    snap, _, _ = build_snapshot(NOW)
    (t,) = [t for t in snap.teams if t.name == team]
    return decayed_usage(t, NOW.timestamp(), half_life_s)


def test_a_long_run_weighs_as_much_as_the_same_gpu_hours_in_daily_runs(
    people: Any, settings: Any
) -> None:
    """Two teams used one GPU each, every second of the same 14 days: vision in one job still
    running, language in fourteen one-day jobs. Their decayed usage is the same, and so
    should their fair-share standing be (bucketed by the day a run ended, vision's was
    counted ~1.8 times language's)."""
    half_life = settings.GPUQ_FAIR_SHARE_HALF_LIFE_S  # the default: 7 days
    start = NOW - 14 * DAY
    long_job = submit_job(people["alice"], spec(name="long")).job
    run(long_job, start, None)
    short_job = submit_job(people["charlie"], spec(name="short")).job
    for day in range(14):
        run(short_job, start + day * DAY, start + (day + 1) * DAY)

    truth = exact(1.0, start, NOW, half_life)
    assert decayed("language", half_life) == pytest.approx(truth, rel=0.1)
    assert decayed("vision", half_life) == pytest.approx(truth, rel=0.1)


def test_usage_decays_with_a_half_life_shorter_than_a_day(people: Any, settings: Any) -> None:
    """With a one-hour half-life, an hour of one GPU that ended three hours ago weighs 1/8 of
    what it would weigh now, not whole, as if used this instant."""
    settings.GPUQ_FAIR_SHARE_HALF_LIFE_S = 3600.0
    job = submit_job(people["alice"], spec(name="earlier today")).job
    ended = NOW - timedelta(hours=3)
    run(job, ended - timedelta(hours=1), ended)

    truth = exact(1.0, ended - timedelta(hours=1), ended, 3600.0)
    assert decayed("vision", 3600.0) == pytest.approx(truth, rel=0.1)
