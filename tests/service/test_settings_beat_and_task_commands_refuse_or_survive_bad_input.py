"""Operations review: Celery tasks and beat, settings read from the environment, and the
task runner's command (`manage.py gpuq_task`)."""

from __future__ import annotations

import contextlib
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.service.test_settings import _check


@pytest.mark.parametrize(
    "url",
    [
        "https://gpuq.example.org:99999",  # no such port: every link in every email is dead
        "https://gpuq.example.org:https",
        "https://gpuq.example.org/?team=vision",  # links become .../?team=vision/jobs/<id>/
        "https://gpuq.example.org/#top",  # links become ...#top/jobs/<id>/
    ],
)
def test_a_public_url_that_cannot_prefix_a_page_link_stops_the_service(url: str) -> None:
    result = _check(GPUQ_PUBLIC_URL=url)
    assert result.returncode != 0
    assert "GPUQ_PUBLIC_URL" in result.stderr


@pytest.mark.parametrize(
    "url",
    [
        "redis//redis:6379/0",  # the colon forgotten
        "redis://redis:port/0",
        "http://redis:6379/0",
    ],
)
def test_a_broker_url_that_is_not_a_redis_url_stops_the_service_naming_the_variable(
    url: str,
) -> None:
    # Set, it takes the service out of the embedded mode: every submit's kick then fails
    # (services._coalesce reads it as a Redis URL) with only a warning in the log.
    result = _check(CELERY_BROKER_URL=url)
    assert result.returncode != 0
    assert "CELERY_BROKER_URL" in result.stderr


def test_a_periodic_task_not_started_before_the_next_is_sent_expires_instead_of_piling_up() -> None:
    # A worker that is down (a deploy, a crash) for an hour while beat runs would otherwise
    # come back to 720 cycles, 720 sync fan-outs and 60 notification sweeps, each run late.
    from celery.beat import ScheduleEntry

    from queue_service.celery import app

    schedule = app.conf.beat_schedule
    assert schedule, "beat has no schedule"
    late = {}
    for name, fields in schedule.items():
        entry = ScheduleEntry(name=name, app=app, **fields)
        expires = entry.options.get("expires")
        every = entry.schedule.run_every.total_seconds()
        if expires is None or expires > every:
            late[name] = expires
    assert late == {}


@pytest.mark.django_db
def test_gpuq_task_apply_mig_layout_on_a_node_that_takes_no_named_layout_is_a_usage_error(
    local_cluster: Any,
) -> None:
    # Named MIG layouts are Kubernetes' (the GPU Operator's): a local or Slurm node has none.
    from queue_service.clusters.models import Node

    node = Node.objects.get(cluster=local_cluster, name="n1")
    with pytest.raises(CommandError) as raised:
        call_command(
            "gpuq_task", "apply_mig_layout", str(node.pk), "all-1g.10gb", stdout=StringIO()
        )
    assert raised.value.returncode == 2


def test_a_sqlite_url_with_options_is_refused_rather_than_the_options_dropped() -> None:
    # A PostgreSQL URL's ?options reach the driver; a SQLite URL's were silently thrown away,
    # so `?mode=ro` or `?timeout=60` looked taken and were not.
    from django.core.exceptions import ImproperlyConfigured

    from queue_service.settings import database_from_url

    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        database_from_url("sqlite:///var/gpuq.sqlite3?mode=ro")


@pytest.mark.django_db
def test_gpuq_task_sync_all_clusters_syncs_every_cluster_though_one_cannot_be_reached(
    tmp_path: Any,
) -> None:
    # As beat's fan-out, where each cluster's sync is a message of its own: one cluster with
    # unusable settings must not leave every cluster after it unsynced.
    from queue_service.clusters.models import Cluster

    Cluster.objects.create(name="slurm-unfinished", kind="slurm", settings={})
    local = Cluster.objects.create(
        name="local",
        kind="local",
        settings={
            "workdir": str(tmp_path / "jobs"),
            "nodes": [{"name": "n1", "gpus": 4, "gpu_model": "SIM-A100"}],
        },
    )
    with contextlib.suppress(CommandError):  # saying which one could not be synced is fine
        call_command("gpuq_task", "sync_all_clusters", stdout=StringIO())
    local.refresh_from_db()
    assert local.last_sync_at is not None
    assert local.nodes.filter(name="n1").exists()


def test_a_dispatch_stale_time_below_the_dispatch_tasks_time_limit_stops_the_service() -> None:
    # A sync resubmits a dispatch older than GPUQ_DISPATCH_STALE_S: below the task's time
    # limit, that may be one still running, submitted twice to the cluster.
    from queue_service.jobs.tasks import dispatch_job

    limit = int(dispatch_job.time_limit)
    result = _check(GPUQ_DISPATCH_STALE_S=str(limit - 1))
    assert result.returncode != 0
    assert "GPUQ_DISPATCH_STALE_S" in result.stderr
    assert _check(GPUQ_DISPATCH_STALE_S=str(limit)).returncode == 0


@pytest.mark.django_db
def test_a_named_mig_layout_sent_for_a_local_node_is_logged_and_leaves_the_node_as_it_was(
    local_cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from queue_service.clusters.models import Node
    from queue_service.jobs.dispatch import apply_mig_layout

    node = Node.objects.get(cluster=local_cluster, name="n1")
    apply_mig_layout(node.pk, "all-1g.10gb")
    assert "no named MIG layout" in caplog.text
    after = Node.objects.get(pk=node.pk)
    assert (after.state, after.reason, after.mig) == (node.state, node.reason, node.mig)
