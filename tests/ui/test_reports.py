"""The UI's read models: usage per user and day, quota usage, MIG choices, cluster totals."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_service.clusters.models import Cluster, Node
from queue_service.clusters.services import gpu_layouts
from queue_service.jobs.models import Job, JobRun
from queue_service.jobs.reports import (
    QuotaUsage,
    UsageReport,
    cluster_totals,
    mig_choices,
    quota_usage,
    split_by_day,
    usage_csv,
    usage_report,
)
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import record_runs, spec

T0 = datetime(2025, 3, 10, 8, 0, tzinfo=UTC)  # the fake clock's start


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


@given(
    start=st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1)),
    seconds=st.floats(min_value=0, max_value=10 * 86400),
)
def test_splitting_by_day_keeps_every_second_on_its_utc_day(
    start: datetime, seconds: float
) -> None:
    start = start.replace(tzinfo=UTC)
    end = start + timedelta(seconds=seconds)
    parts = split_by_day(start, end)
    assert sum(s for _, s in parts) == pytest.approx((end - start).total_seconds())
    assert all(0 < s <= 86400 for _, s in parts)
    assert [d for d, _ in parts] == [start.date() + timedelta(days=i) for i in range(len(parts))]


def ran(job: Job, *runs: tuple[float, float | None]) -> None:
    """Record the job's runs [a, b) in hours after T0 (b None: still running)."""
    record_runs(job, *((at(a), None if b is None else at(b)) for a, b in runs))


def test_the_usage_report_counts_gpu_hours_per_user_per_day(people: Any, teams: Any) -> None:
    alice = submit_job(people["alice"], spec(name="a", gpus_per_node=2)).job
    bob = submit_job(people["bob"], spec(name="b", gpus_per_node=4)).job
    other = submit_job(people["charlie"], spec(name="c", gpus_per_node=8)).job
    ran(alice, (1, 3), (14, 18))  # 2 h, then 10:00 to the next day's 02:00 (16+2 hours)
    ran(bob, (20, None))  # from 04:00 on day 2, still running at the report's "now"
    ran(other, (1, 5))
    report = usage_report(teams["vision"], date(2025, 3, 10), date(2025, 3, 11), now=at(22))
    d1, d2 = date(2025, 3, 10), date(2025, 3, 11)
    assert report.days == (d1, d2) and report.users == ("alice", "bob")
    assert report.gpu_hours == {
        (d1, "alice"): pytest.approx(2 * (2 + 2)),  # 08-10 on day 1 and 22-24
        (d2, "alice"): pytest.approx(2 * 2),  # 00-02 on day 2
        (d2, "bob"): pytest.approx(4 * 2),  # 04-06 on day 2, up to now
    }
    assert report.total() == pytest.approx(20)


def test_the_usage_report_cuts_runs_at_the_period_edges(people: Any, teams: Any) -> None:
    job = submit_job(people["alice"], spec(name="a", gpus_per_node=1)).job
    ran(job, (-24, 48))  # from the day before to two days after day 1
    report = usage_report(teams["vision"], date(2025, 3, 10), date(2025, 3, 10), now=at(100))
    assert report.gpu_hours == {(date(2025, 3, 10), "alice"): pytest.approx(24)}


def test_the_usage_csv_has_a_row_per_day_and_user_and_defuses_formulas() -> None:
    d = date(2025, 1, 2)
    report = UsageReport("=team", (d,), ("-1+1", "ann"), {(d, "-1+1"): 1.23456, (d, "ann"): 2})
    assert usage_csv(report).splitlines() == [
        "day,team,user,gpu_hours",
        "2025-01-02,'=team,'-1+1,1.2346",
        "2025-01-02,'=team,ann,2.0000",
    ]


def test_quota_usage_sums_the_active_jobs_of_the_team_per_model(people: Any, teams: Any) -> None:
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=2)
    jobs = [submit_job(people["alice"], spec(name=f"j{i}", gpus_per_node=g)).job for i, g in
            enumerate([3, 7, 1, 2])]  # fmt: skip
    Job.objects.filter(pk=jobs[0].pk).update(state="running", gpu_model="SIM-A100")
    Job.objects.filter(pk=jobs[1].pk).update(state="admitted", gpu_model="SIM-A100")
    Job.objects.filter(pk=jobs[2].pk).update(state="succeeded", gpu_model="SIM-A100")
    Job.objects.filter(pk=jobs[3].pk).update(state="running", gpu_model="SIM-H100")
    rows = {(q.team, q.gpu_model): q for q in quota_usage([teams["vision"], teams["language"]])}
    assert set(rows) == {("vision", "*"), ("vision", "SIM-A100"), ("language", "SIM-A100")}
    sim = rows[("vision", "SIM-A100")]
    assert (sim.used, sim.nominal, sim.borrowing_limit, sim.borrowed) == (10, 8, 8, 2)
    # As the scheduler charges them: a model with a quota of its own is not also under "*".
    assert rows[("vision", "*")].used == 2
    assert rows[("language", "SIM-A100")].used == 0


def test_quota_usage_within_the_schedulers_tolerance_of_nominal_is_not_borrowed() -> None:
    used = 0.0
    for _ in range(35):  # 35 1g slices summed one by one: a hair over a nominal of 5
        used += 1 / 7
    row = QuotaUsage("vision", "A100-SXM4-80GB", used, 5.0, 0.0, None, None)
    assert used > 5 and row.borrowed == 0.0
    assert QuotaUsage("vision", "A100-SXM4-80GB", 5 + 1 / 7, 5.0, 1.0, None, None).borrowed == (
        pytest.approx(1 / 7)
    )


@pytest.fixture
def mig_node(db: Any) -> Node:
    cluster = Cluster.objects.create(name="m", kind="local")
    return Node.objects.create(
        cluster=cluster,
        name="m1",
        gpu_model="A100-SXM4-80GB",
        gpus=3,
        mig_enabled=True,
        mig=[
            {"gpu": 0, "profile": "3g.40gb", "start": 0, "size": 4},
            {"gpu": 0, "profile": "3g.40gb", "start": 4, "size": 4},
            {"gpu": 1, "profile": "1g.10gb", "start": 0, "size": 1},
        ],
    )


def test_mig_choices_count_free_slices_and_idle_gpus_per_profile(
    mig_node: Node, people: Any
) -> None:
    holder = submit_job(people["alice"], spec(name="h")).job
    Job.objects.filter(pk=holder.pk).update(
        state="running",
        cluster=mig_node.cluster,
        placement=[{"node": "m1", "gpus": [], "mig": {"gpu": 0, "profile": "3g.40gb",
                                                       "start": 4, "size": 4}}],
    )  # fmt: skip
    choices = {c.profile: c for c in mig_choices(gpu_layouts([mig_node.cluster], people["alice"]))}
    assert (choices["3g.40gb"].free_now, choices["3g.40gb"].relayout_gpus) == (1, 2)
    assert (choices["1g.10gb"].free_now, choices["1g.10gb"].relayout_gpus) == (1, 2)
    assert (choices["7g.80gb"].free_now, choices["7g.80gb"].fits_now) == (0, True)
    assert choices["3g.40gb"].gpu_fraction == pytest.approx(3 / 7)
    assert list(choices)[:2] == ["1g.10gb", "1g.10gb+me"]  # smallest first


def test_mig_choices_ignore_nodes_that_are_not_up(mig_node: Node, people: Any) -> None:
    Node.objects.filter(pk=mig_node.pk).update(state="drain")
    assert mig_choices(gpu_layouts([mig_node.cluster], people["alice"])) == []


def test_cluster_totals_count_gpus_slices_and_node_states(mig_node: Node, people: Any) -> None:
    cluster = mig_node.cluster
    Node.objects.create(cluster=cluster, name="a", gpu_model="X", gpus=4, state="up")
    Node.objects.create(cluster=cluster, name="b", gpu_model="X", gpus=4, state="drain")
    Node.objects.create(cluster=cluster, name="c", gpu_model="X", gpus=2, state="down")
    job = submit_job(people["alice"], spec(name="h", gpus_per_node=2)).job
    placement = [{"node": "a", "gpus": [0]}, {"node": "b", "gpus": [1]}]
    Job.objects.filter(pk=job.pk).update(state="running", cluster=cluster, placement=placement)
    nodes = list(cluster.nodes.all())
    totals = cluster_totals(nodes, gpu_layouts([cluster], people["alice"]))
    assert (totals.nodes, totals.nodes_up, totals.nodes_drain, totals.nodes_down) == (4, 2, 1, 1)
    assert (totals.gpus, totals.gpus_held, totals.gpus_free) == (13, 2, 3)
    assert (totals.mig_slices, totals.mig_slices_held) == (3, 0)


def test_the_usage_report_counts_the_runs_the_service_records(people: Any, teams: Any) -> None:
    from django.utils import timezone

    from queue_service.jobs.services import transition

    job = submit_job(people["alice"], spec(name="real", gpus_per_node=3)).job
    for state in ("admitted", "dispatching", "queued", "running", "succeeded"):
        job = transition(job, state)
    (run,) = JobRun.objects.filter(job=job)
    today = run.started_at.date()
    report = usage_report(teams["vision"], today, today, now=timezone.now())
    seconds = (run.ended_at - run.started_at).total_seconds()
    assert report.gpu_hours == {(today, "alice"): pytest.approx(3 * seconds / 3600)}
