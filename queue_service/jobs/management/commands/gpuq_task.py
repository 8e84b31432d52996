"""Run any one of tasks.py's Celery tasks inline, by the task's name, with its arguments:
`manage.py gpuq_task schedule_cycle`, `dispatch_job <job-id>`, `sync_cluster <cluster-id>`,
`sync_all_clusters`, `cancel_job <job-id>`, `apply_mig_layout <node-id> <config>`,
`send_notification <notification-id>`, `deliver_notifications`."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import models

from queue_service.backends import BackendError
from queue_service.clusters.models import Cluster, Node
from queue_service.jobs import dispatch, notify, snapshot
from queue_service.jobs.models import Job


def _sync_all_clusters() -> int:
    # What beat's fan-out sends as messages, run here and now. Each message fails alone there:
    # here too, one cluster that cannot be synced (or job dispatched) must not stop the rest.
    failed: list[str] = []

    def each(service: Callable[[Any], Any]) -> Callable[[Any], None]:
        def run(pk: Any) -> None:
            try:
                service(pk)
            except BackendError as exc:
                failed.append(f"{service.__name__} {pk}: {exc.message}")

        return run

    count = dispatch.enqueue_syncs(each(dispatch.sync_cluster), each(dispatch.dispatch_job))
    if failed:
        raise CommandError("; ".join(failed))
    return count


def _job_id(text: str) -> str:
    return str(uuid.UUID(text))  # ValueError if it is none


# name -> (the service the task calls, what each of its arguments is)
TASKS: dict[str, tuple[Callable[..., Any], tuple[Callable[[str], Any], ...]]] = {
    "schedule_cycle": (snapshot.run_cycle, ()),
    "dispatch_job": (dispatch.dispatch_job, (_job_id,)),
    "sync_cluster": (dispatch.sync_cluster, (int,)),
    "sync_all_clusters": (_sync_all_clusters, ()),
    "cancel_job": (dispatch.stop_job, (_job_id,)),
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
# The row a task's first argument names, which its service reads with get(): one that does not
# exist is a usage error, not a traceback. (send_notification skips an unknown id itself.)
NAMED: dict[str, type[models.Model]] = {
    "dispatch_job": Job,
    "sync_cluster": Cluster,
    "cancel_job": Job,
    "apply_mig_layout": Node,
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
        named = NAMED.get(task)
        if named is not None and not named._default_manager.filter(pk=values[0]).exists():
            raise CommandError(
                f"{task}: there is no {named._meta.verbose_name} {values[0]}", returncode=2
            )
        if task == "apply_mig_layout":
            kind = Node.objects.filter(pk=values[0]).values_list("cluster__kind", flat=True)[0]
            if kind != Cluster.Kind.KUBERNETES:  # named layouts are the GPU Operator's
                raise CommandError(
                    f"{task}: node {values[0]} is on a {kind} cluster; only a Kubernetes"
                    " node takes a named MIG layout",
                    returncode=2,
                )
        self.stdout.write(str(func(*values)))
