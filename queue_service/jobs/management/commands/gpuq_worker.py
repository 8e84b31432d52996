"""The embedded mode's engine, and a debugging tool: sync clusters, run a cycle, dispatch,
in a loop (or --once), without Celery; notifications are sent by a thread of their own."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from queue_service.jobs.dispatch import run_once
from queue_service.jobs.notify import deliver_due

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Run scheduling cycles, dispatch and cluster syncs in this process (no Celery needed)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="one round, then exit")
        parser.add_argument("--interval", type=float, default=1.0, help="seconds between rounds")

    def handle(self, *args: Any, once: bool, interval: float, **options: Any) -> None:
        if not 0 < interval < float("inf"):  # time.sleep() refuses the rest, outside the try
            raise CommandError(
                f"--interval must be a number of seconds above 0, not {interval}", returncode=2
            )
        if once:
            self.stdout.write(str(run_once()))
            return
        # A mail server that hangs (each try waits EMAIL_TIMEOUT) must not hold the cycle.
        threading.Thread(target=_mail_loop, args=(interval,), daemon=True).start()
        while True:
            try:
                summary = run_once(notifications=False)
                if options["verbosity"] > 1:
                    self.stdout.write(str(summary))
            except Exception:  # a bad round (a database hiccup) must not end the engine
                log.exception("a round of the job loop failed; the next one follows")
                connection.close()  # a broken connection is opened anew by the next query
            time.sleep(interval)


def _mail_loop(interval: float) -> None:
    while True:
        try:
            deliver_due(budget_s=30)
        except Exception:
            log.exception("a round of notifications failed; the next one follows")
            connection.close()
        time.sleep(interval)
