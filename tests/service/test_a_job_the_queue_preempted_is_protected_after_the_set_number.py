"""Policy.protect_after_preemptions: a job the queue preempted that many times starts again
only within its team's nominal quota and is no victim again. The cycle hands the scheduler
what it needs for that: how many times the queue preempted each pending job (as it does for
the running ones), and the setting GPUQ_PROTECT_AFTER_PREEMPTIONS (a count, or `off`)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import build_snapshot, policy, run_cycle
from queue_service.settings import env_count_or_off
from queue_service.tenancy.models import Quota
from tests.conftest import spec
from tests.service.test_the_queues_own_preemptions_use_no_retry import _running, reclaimed

S = Job.State


@pytest.mark.django_db
def test_a_pending_job_brings_the_queues_preemptions_of_it_to_the_scheduler(
    people: Any, local_cluster: Any
) -> None:
    # Each team is guaranteed 4 of the 8 GPUs and may borrow 4: language runs a job no one
    # preempts on 4 of them, and the borrower on 4 more, which vision takes back once.
    Quota.objects.filter(gpu_model="SIM-A100").update(nominal_gpus=4, borrowing_limit_gpus=4)
    _running(submit_job(people["charlie"], spec(name="own", gpus_per_node=4, priority="high")).job)
    borrower = submit_job(people["charlie"], spec(name="borrower", gpus_per_node=4)).job
    borrower = reclaimed(borrower, people)
    assert borrower.state == S.PENDING
    fresh = submit_job(people["bob"], spec(name="fresh")).job

    snap, _, _ = build_snapshot(timezone.now())

    counts = {p.request.id: p.preemptions for p in snap.pending}
    assert counts == {str(borrower.pk): 1, str(fresh.pk): 0}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("setting", "borrows_again"),
    [(1, False), (2, True), (None, True)],
)
def test_a_job_reclaimed_once_waits_for_its_teams_nominal_and_says_why(
    people: Any, local_cluster: Any, settings: Any, setting: int | None, borrows_again: bool
) -> None:
    # The borrower, reclaimed by vision, is pending again; vision's job is then cancelled
    # (reclaimed() does), so 4 GPUs are free, but only on borrowed quota: language's own
    # job holds its nominal 4.
    settings.GPUQ_PROTECT_AFTER_PREEMPTIONS = setting
    Quota.objects.filter(gpu_model="SIM-A100").update(nominal_gpus=4, borrowing_limit_gpus=4)
    _running(submit_job(people["charlie"], spec(name="own", gpus_per_node=4, priority="high")).job)
    borrower = submit_job(people["charlie"], spec(name="borrower", gpus_per_node=4)).job
    borrower = reclaimed(borrower, people)
    assert borrower.state == S.PENDING

    run_cycle()
    borrower.refresh_from_db()

    if borrows_again:
        assert borrower.state == S.ADMITTED, borrower.reason
    else:
        assert borrower.state == S.PENDING
        assert borrower.reason["code"] == "quota_exhausted", borrower.reason
        assert borrower.reason["message"].startswith("preempted 1 time, so it now runs only"), (
            borrower.reason
        )
        assert borrower.reason["details"]["protected_after_preemptions"] == 1


@pytest.mark.parametrize("value", [1, 3, None])
def test_the_policy_protects_after_the_preemptions_the_setting_says(
    settings: Any, value: int | None
) -> None:
    settings.GPUQ_PROTECT_AFTER_PREEMPTIONS = value
    assert policy().protect_after_preemptions == value


@pytest.mark.parametrize(("raw", "value"), [("1", 1), (" 3 ", 3), ("off", None), ("OFF", None)])
def test_a_count_or_off_parses(
    monkeypatch: pytest.MonkeyPatch, raw: str, value: int | None
) -> None:
    monkeypatch.setenv("GPUQ_C", raw)
    assert env_count_or_off("GPUQ_C", 2) == value


def test_a_count_or_off_left_unset_is_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUQ_C", raising=False)
    assert env_count_or_off("GPUQ_C", 2) == 2


# 0 is refused, not read as off: "protect after 0 preemptions" would protect every job.
@pytest.mark.parametrize("raw", ["0", "-1", "two", "1.5", "", "none", "unlimited", "9" * 5000])
def test_a_bad_count_or_off_names_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("GPUQ_C", raw)
    with pytest.raises(
        ImproperlyConfigured, match=r"GPUQ_C=.* must be a whole number >= 1 or 'off'"
    ):
        env_count_or_off("GPUQ_C", 2)
