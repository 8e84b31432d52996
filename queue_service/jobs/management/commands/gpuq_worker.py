"""The embedded mode's engine, and a debugging tool: sync clusters, run a cycle, dispatch,
in a loop (or --once), without Celery."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from queue_service.jobs.dispatch import run_once


class Command(BaseCommand):
    help = "Run scheduling cycles, dispatch and cluster syncs in this process (no Celery needed)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="one round, then exit")
        parser.add_argument("--interval", type=float, default=1.0, help="seconds between rounds")

    def handle(self, *args: Any, once: bool, interval: float, **options: Any) -> None:
        while True:
            summary = run_once()
            if once or options["verbosity"] > 1:
                self.stdout.write(str(summary))
            if once:
                return
            time.sleep(interval)
