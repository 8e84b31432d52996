"""Fair share is handed every GPU-second a team used, each decayed from when it was used
(ARCHITECTURE.md; scheduler/simulate.py keeps all of it too): usage weeks or months old
still weighs what its decay leaves of it. Only runs that ended more than
snapshot.USAGE_WINDOW_HALF_LIVES half-lives ago are left out: they weigh under 2^-40."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from queue_service.jobs.models import Job, JobRun
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import _usage_by_team, build_snapshot, run_cycle
from scheduler.order import decayed_usage
from tests.conftest import spec

S = Job.State
DAY = timedelta(days=1)


def finished(person: Any, name: str, start: datetime, end: datetime, gpus: float) -> Job:
    """A job that ran `gpus` GPUs from start to end, as the dispatcher records its run."""
    job = submit_job(person, spec(name=name)).job
    Job.objects.filter(pk=job.pk).update(state=S.SUCCEEDED)
    JobRun.objects.create(
        job=job,
        attempt=1,
        team_id=job.team_id,
        user_id=job.user_id,
        gpus=gpus,
        gpu_model="SIM-A100",
        started_at=start,
        ended_at=end,
        ended_by="succeeded",
    )
    return job


def exact(gpus: float, start: datetime, end: datetime, now: datetime, half_life_s: float) -> float:
    """The GPU-seconds of a run, each decayed from when it was used, to `now`."""
    k = math.log(2) / half_life_s
    age_end, age_start = (now - end).total_seconds(), (now - start).total_seconds()
    return gpus * (math.exp(-k * age_end) - math.exp(-k * age_start)) / k


# (days ago the run started, days ago it ended): with the default 7-day half-life.
AGES = [(89, 29), (40, 35), (200, 150), (2, 1)]


@pytest.mark.parametrize(("began", "ended"), AGES, ids=[f"{b}-{e}-days-ago" for b, e in AGES])
def test_a_run_counts_what_its_decay_leaves_of_it_however_old(
    people: Any, settings: Any, began: int, ended: int
) -> None:
    """64 GPUs from `began` to `ended` days ago count their GPU-seconds decayed second by
    second, months back too."""
    half_life = settings.GPUQ_FAIR_SHARE_HALF_LIFE_S
    now = timezone.now()
    job = finished(people["alice"], "past", now - began * DAY, now - ended * DAY, gpus=64)
    (bucket,) = _usage_by_team(now)[job.team_id]
    truth = exact(64, now - began * DAY, now - ended * DAY, now, half_life)
    assert bucket.gpu_seconds == pytest.approx(truth, rel=1e-6)


def test_usage_older_than_the_window_weighs_nothing_and_breaks_nothing(people: Any) -> None:
    """A run ended years ago (past 40 half-lives: its weight under 2^-40) is left out; the
    aggregate neither fails (exp underflows) nor counts it."""
    now = timezone.now()
    old = finished(people["alice"], "ancient", now - 3000 * DAY, now - 2900 * DAY, gpus=1000)
    assert old.team_id not in _usage_by_team(now)


def test_a_teams_heavy_usage_a_month_ago_still_weighs_in_fair_share(
    people: Any, local_cluster: Any, settings: Any
) -> None:
    """Vision ran 64 GPUs for 60 days, ending 29 days ago (4.1 half-lives of 7 days); language
    ran 8 GPUs for a day, ending yesterday. Decayed, vision's usage is about 5 times
    language's, so when both ask for the whole cluster at once, language goes first (Slurm's
    fair share: the team that used less recently-weighted GPU time is served first), though
    vision asked first."""
    half_life = settings.GPUQ_FAIR_SHARE_HALF_LIFE_S
    now = timezone.now()
    finished(people["alice"], "big-past", now - 89 * DAY, now - 29 * DAY, gpus=64)
    finished(people["charlie"], "small-recent", now - 2 * DAY, now - DAY, gpus=8)

    snap, _, _ = build_snapshot(now)
    used = {t.name: decayed_usage(t, now.timestamp(), half_life) for t in snap.teams}
    vision_truth = exact(64, now - 89 * DAY, now - 29 * DAY, now, half_life)
    assert used["vision"] == pytest.approx(vision_truth, rel=1e-6), used

    # Both want the whole cluster (2 nodes x 4 GPUs), vision's first in submit order.
    mine = submit_job(people["alice"], spec(name="vision-now", nodes=2, gpus_per_node=4)).job
    theirs = submit_job(people["charlie"], spec(name="language-now", nodes=2, gpus_per_node=4)).job
    run_cycle(now)
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert (theirs.state, mine.state) == (S.ADMITTED, S.PENDING)
