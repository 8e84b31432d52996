"""What job notifications (a spec's `notify`) cost the service, measured side by side:

- cancel: `cancel_job` of each task of an N-task array (what `gpuq cancel --array` does,
  minus HTTP), with `notify: [end]` against without: each end is a move whose array is
  looked at after it commits (`notify.tell_array`), the last one storing the array's notice;
- cycle: one `run_cycle()` that cancels the N pending tasks of an array whose `after` job
  failed, with `notify: [end]` against without;
- send: `deliver_due()` of N stored notifications to a real SMTP server on loopback
  (aiosmtpd, in this process), one connection per mail: mails per second.

    .venv/bin/python bench/notify_bench.py [--tasks 100 1000] [--repeats 3]

Runs against PostgreSQL on 127.0.0.1 (a throwaway database `test_gpuq_notifybench`, created
and dropped here). Medians in ms.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queue_service.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")
os.environ["DATABASE_URL"] = "postgres://postgres@127.0.0.1:5432/gpuq_notifybench"
os.environ["GPUQ_MAX_ARRAY_TASKS"] = "100000"
os.environ.pop("CELERY_BROKER_URL", None)

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

SPEC = {"name": "sweep", "command": ["true"], "gpus_per_node": 1}


def reset() -> None:
    from queue_service.jobs.models import Job, JobArray, JobEvent, Notification

    Notification.objects.all().delete()
    JobEvent.objects.all().delete()
    Job.objects.all().delete()
    JobArray.objects.all().delete()


class Sink:
    count = 0

    async def handle_DATA(self, server: object, session: object, envelope: object) -> str:
        Sink.count += 1
        return "250 OK"


def main() -> None:
    import logging

    logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd's every command
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from aiosmtpd.controller import Controller

    from queue_service.jobs.models import Job, Notification
    from queue_service.jobs.notify import deliver_due
    from queue_service.jobs.services import cancel_job, submit_job, transition
    from queue_service.jobs.snapshot import run_cycle
    from queue_service.tenancy.models import Membership, Team

    setup_test_environment()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    controller = Controller(Sink(), hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    old_name = connection.creation.create_test_db(verbosity=0)
    try:
        user = get_user_model().objects.create(username="alice", email="alice@example.org")
        team = Team.objects.create(slug="vision", name="Vision")
        Membership.objects.create(user=user, team=team, role="member")

        def array(n: int, notify: bool, after: str | None = None) -> Job:
            spec = {**SPEC, "array": f"0-{n - 1}"}
            if notify:
                spec["notify"] = ["end"]
            if after:
                spec["after"] = [after]
            return submit_job(user, spec).job

        def cancel_all(n: int, notify: bool) -> float:
            reset()
            tasks = list(Job.objects.filter(array=array(n, notify).array_id))
            started = time.perf_counter()
            for task in tasks:
                cancel_job(user, task)
            took = (time.perf_counter() - started) * 1000
            assert Notification.objects.count() == (1 if notify else 0)
            return took

        def cycle_cancels(n: int, notify: bool) -> float:
            reset()
            dep = submit_job(user, {**SPEC, "name": "dep"}).job
            array(n, notify, after=str(dep.pk))
            transition(dep, Job.State.FAILED, code="failed", message="bench")
            started = time.perf_counter()
            run_cycle()
            took = (time.perf_counter() - started) * 1000
            assert Notification.objects.count() == (1 if notify else 0)
            return took

        def send(n: int) -> float:
            reset()
            for k in range(n):
                job = submit_job(user, {**SPEC, "name": f"j{k}", "notify": ["end"]}).job
                cancel_job(user, job)
            before = Sink.count
            started = time.perf_counter()
            outcome = deliver_due() if n <= 100 else _all(deliver_due)
            took = (time.perf_counter() - started) * 1000
            assert Sink.count - before == n, outcome
            return took

        print(f"PostgreSQL, aiosmtpd on loopback; {args.repeats} repeats, alternating; median ms")
        print(
            "| tasks | cancel each, notify | cancel each, none | ratio"
            " | cycle cancels, notify | cycle cancels, none | ratio | send N mails | mails/s |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n in args.tasks:
            runs: dict[str, list[float]] = {k: [] for k in ("cn", "c0", "yn", "y0", "s")}
            for _ in range(args.repeats):
                runs["cn"].append(cancel_all(n, True))
                runs["c0"].append(cancel_all(n, False))
                runs["yn"].append(cycle_cancels(n, True))
                runs["y0"].append(cycle_cancels(n, False))
                runs["s"].append(send(n))
            m = {k: statistics.median(v) for k, v in runs.items()}
            print(
                f"| {n:,} | {m['cn']:.0f} | {m['c0']:.0f} | {m['cn'] / m['c0']:.2f}x"
                f" | {m['yn']:.0f} | {m['y0']:.0f} | {m['yn'] / m['y0']:.2f}x"
                f" | {m['s']:.0f} | {n / m['s'] * 1000:.0f} |"
            )
    finally:
        controller.stop()
        connection.creation.destroy_test_db(old_name, verbosity=0)


def _all(deliver: object) -> dict[str, int]:
    """deliver_due sends at most a batch per call: call it until nothing is due."""
    total: dict[str, int] = {}
    while True:
        got = deliver()  # type: ignore[operator]
        if not got:
            return total
        for key, value in got.items():
            total[key] = total.get(key, 0) + value


if __name__ == "__main__":
    main()
