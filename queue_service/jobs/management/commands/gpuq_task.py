"""Run any one Celery task's service inline: `manage.py gpuq_task schedule_cycle`,
`dispatch_job <job-id>`, `sync_cluster <cluster-id>`, `cancel_job <job-id>`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from queue_service.jobs import dispatch, snapshot

TASKS = {
    "schedule_cycle": (snapshot.run_cycle, None),
    "dispatch_job": (dispatch.dispatch_job, str),
    "sync_cluster": (dispatch.sync_cluster, int),
    "cancel_job": (dispatch.stop_job, str),
}


class Command(BaseCommand):
    help = "Run one of gpuq's Celery tasks in this process."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("task", choices=sorted(TASKS))
        parser.add_argument("id", nargs="?")

    def handle(self, *args: Any, task: str, id: str | None, **options: Any) -> None:
        func, cast = TASKS[task]
        if cast is not None and id is None:
            raise CommandError(f"{task} needs an id")
        result = func(cast(id)) if cast is not None else func()  # type: ignore[operator]
        self.stdout.write(str(result))
