"""Celery tasks: thin wrappers that take ids and call one service. Each is safe to run twice
(the services start with conditional transitions) and has a time limit; JSON arguments only."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings

from queue_service.backends import BackendError

from . import dispatch, notify, snapshot


@shared_task(name="gpuq.schedule_cycle", time_limit=60, soft_time_limit=50)
def schedule_cycle() -> dict[str, Any]:
    return snapshot.run_cycle()


@shared_task(
    name="gpuq.dispatch_job",
    time_limit=settings.DISPATCH_TIME_LIMIT_S,
    soft_time_limit=settings.DISPATCH_TIME_LIMIT_S - 20,
    autoretry_for=(BackendError,),
    retry_backoff=2,
    retry_backoff_max=60,
    max_retries=None,
)
def dispatch_job(job_id: str) -> None:
    dispatch.dispatch_job(job_id)


@shared_task(name="gpuq.sync_cluster", time_limit=120, soft_time_limit=100)
def sync_cluster(cluster_id: int) -> dict[str, int]:
    return dispatch.sync_cluster(cluster_id)


@shared_task(name="gpuq.sync_all_clusters", time_limit=30, soft_time_limit=25)
def sync_all_clusters() -> int:
    return dispatch.enqueue_syncs(sync_cluster.delay, dispatch_job.delay)


# A stop may wait out the grace on the cluster before it returns (Slurm: TERM, then scancel).
# Its hard limit is how long dispatch.stop_job counts another delivery's stop under way.
STOP_TIME_LIMIT_S = settings.GPUQ_PREEMPTION_GRACE_S + dispatch.STOP_UNDER_WAY_S - 20


@shared_task(
    name="gpuq.cancel_job",
    time_limit=STOP_TIME_LIMIT_S + 20,
    soft_time_limit=STOP_TIME_LIMIT_S,
    autoretry_for=(BackendError,),
    retry_backoff=2,
    retry_backoff_max=60,
    max_retries=20,
)
def cancel_job(job_id: str) -> None:
    """Stops a cancelling or preempting job on its backend."""
    dispatch.stop_job(job_id)


@shared_task(
    name="gpuq.apply_mig_layout",
    time_limit=60,
    soft_time_limit=50,
    autoretry_for=(BackendError,),
    retry_backoff=2,
    max_retries=5,
)
def apply_mig_layout(node_id: int, config: str) -> None:
    dispatch.apply_mig_layout(node_id, config)


@shared_task(name="gpuq.send_notification", time_limit=60, soft_time_limit=50)
def send_notification(notification_id: int) -> str:
    return notify.deliver(notification_id)


@shared_task(name="gpuq.deliver_notifications", time_limit=300, soft_time_limit=280)
def deliver_notifications() -> dict[str, int]:
    return notify.deliver_due(budget_s=200)  # stops starting sends well before the limit
