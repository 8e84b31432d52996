"""The Celery app. Tasks live in queue_service/jobs/tasks.py (and an account's mail in
queue_service/tenancy/tasks.py); beat runs the cycle and syncs."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queue_service.settings")

app = Celery("gpuq")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["queue_service.jobs", "queue_service.tenancy"])


def _beat_schedule() -> dict[str, dict[str, object]]:
    from django.conf import settings

    # Each run expires when the next is sent: a worker back from an hour down runs the next
    # one, not the hour's hundreds of late ones.
    def every(seconds: float) -> dict[str, object]:
        return {"schedule": seconds, "options": {"expires": seconds}}

    return {
        "schedule-cycle": {"task": "gpuq.schedule_cycle", **every(settings.GPUQ_CYCLE_INTERVAL_S)},
        "sync-clusters": {"task": "gpuq.sync_all_clusters", **every(settings.GPUQ_SYNC_INTERVAL_S)},
        # What a lost send_notification task (or a refused send) left due, and arrays' notices
        # whose look after commit was lost (notify.tell_missed_arrays).
        "deliver-notifications": {"task": "gpuq.deliver_notifications", **every(60.0)},
    }


@app.on_after_configure.connect
def _setup_periodic(sender: Celery, **_: object) -> None:
    sender.conf.beat_schedule = _beat_schedule()
