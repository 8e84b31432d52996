"""Run any one of tasks.py's Celery tasks inline, by the task's name, with its arguments:
`manage.py gpuq_task schedule_cycle`, `dispatch_job <job-id>`, `sync_cluster <cluster-id>`,
`sync_all_clusters`, `cancel_job <job-id>`, `apply_mig_layout <node-id> <config>`,
`send_notification <notification-id>`, `deliver_notifications`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from queue_service.jobs import dispatch, notify, snapshot


def _sync_all_clusters() -> int:
    # What beat's fan-out sends as messages, run here and now.
    return dispatch.enqueue_syncs(dispatch.sync_cluster, dispatch.dispatch_job)


# name -> (the service the task calls, what each of its arguments is)
TASKS: dict[str, tuple[Callable[..., Any], tuple[Callable[[str], Any], ...]]] = {
    "schedule_cycle": (snapshot.run_cycle, ()),
    "dispatch_job": (dispatch.dispatch_job, (str,)),
    "sync_cluster": (dispatch.sync_cluster, (int,)),
    "sync_all_clusters": (_sync_all_clusters, ()),
    "cancel_job": (dispatch.stop_job, (str,)),
    "apply_mig_layout": (dispatch.apply_mig_layout, (int, str)),
    "send_notification": (notify.deliver, (int,)),
    "deliver_notifications": (lambda: notify.deliver_due(budget_s=200), ()),
}
ARGUMENT_NAMES = {
    "dispatch_job": "a job id",
    "sync_cluster": "a cluster id",
    "cancel_job": "a job id",
    "apply_mig_layout": "a node id and a MIG config name",
    "send_notification": "a notification id",
}


class Command(BaseCommand):
    help = "Run one of gpuq's Celery tasks in this process."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("task", choices=sorted(TASKS))
        parser.add_argument("arguments", nargs="*", metavar="ARG")

    def handle(self, *_: Any, task: str, arguments: list[str], **options: Any) -> None:
        func, casts = TASKS[task]
        if len(arguments) != len(casts):
            raise CommandError(
                f"{task} takes {ARGUMENT_NAMES.get(task, 'no arguments')}", returncode=2
            )
        try:
            values = [cast(arg) for cast, arg in zip(casts, arguments, strict=True)]
        except ValueError:
            raise CommandError(
                f"{task} takes {ARGUMENT_NAMES[task]}, not {arguments}", returncode=2
            ) from None
        self.stdout.write(str(func(*values)))
