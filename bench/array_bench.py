"""What job arrays cost the service, measured side by side in one run:

- submit: `submit_job` of one array of N tasks against N separate `submit_job` calls of the
  same spec (what a script looping over `gpuq submit` does, minus HTTP);
- hold: `build_snapshot()`, the cycle's read of its input, which holds back the tasks past
  their array's `%N` limit (`held_back`, over the same rows), and a whole steady
  `run_cycle()` (nothing changed since the last; no cluster, so every job waits), with N
  pending tasks in arrays of 100 tasks with `%10` against N pending jobs without arrays.
  Each is timed on its second call, after a first that warms up.

    .venv/bin/python bench/array_bench.py [--tasks 100 1000] [--repeats 5]

Runs against PostgreSQL on 127.0.0.1 (a throwaway database `test_gpuq_arraybench`, created
and dropped here). Medians in ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queue_service.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")
os.environ["DATABASE_URL"] = "postgres://postgres@127.0.0.1:5432/gpuq_arraybench"
os.environ["GPUQ_MAX_ARRAY_TASKS"] = "100000"

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

SPEC = {"name": "sweep", "command": ["python", "train.py"], "gpus_per_node": 1}


def reset() -> None:
    from queue_service.jobs.models import Job, JobArray, JobEvent

    JobEvent.objects.all().delete()
    Job.objects.all().delete()
    JobArray.objects.all().delete()


def timed(run: Callable[[], object]) -> float:
    reset()
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from django.utils import timezone

    from queue_service.jobs.services import submit_job
    from queue_service.jobs.snapshot import build_snapshot, run_cycle
    from queue_service.tenancy.models import Membership, Team

    def snapshot() -> object:
        return build_snapshot(timezone.now())

    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0)
    try:
        user = get_user_model().objects.create(username="alice")
        team = Team.objects.create(slug="vision", name="Vision")
        Membership.objects.create(user=user, team=team, role="member")
        print(f"PostgreSQL, {args.repeats} repeats each, alternating; median ms")
        print(
            "| tasks | one array | separate submits | ratio | snapshot, arrays %10"
            " | snapshot, no arrays | cycle, arrays %10 | cycle, no arrays |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n in args.tasks:
            one: list[float] = []
            each: list[float] = []
            hold_arrays: list[float] = []
            hold_plain: list[float] = []
            cycle_arrays: list[float] = []
            cycle_plain: list[float] = []
            for _ in range(args.repeats):
                one.append(timed(lambda n=n: submit_job(user, {**SPEC, "array": f"0-{n - 1}"})))
                each.append(timed(lambda n=n: [submit_job(user, SPEC) for _ in range(n)]))
                reset()
                for k in range(max(n // 100, 1)):
                    submit_job(user, {**SPEC, "name": f"s{k}", "array": f"0-{min(n, 100) - 1}%10"})
                hold_arrays.append(_second_call(snapshot))
                cycle_arrays.append(_second_call(run_cycle))
                reset()
                for _ in range(n):
                    submit_job(user, SPEC)
                hold_plain.append(_second_call(snapshot))
                cycle_plain.append(_second_call(run_cycle))
            a, b = statistics.median(one), statistics.median(each)
            print(
                f"| {n:,} | {a:.1f} | {b:.1f} | {b / a:.1f}x |"
                f" {statistics.median(hold_arrays):.1f} | {statistics.median(hold_plain):.1f} |"
                f" {statistics.median(cycle_arrays):.1f} | {statistics.median(cycle_plain):.1f} |"
            )
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


def _second_call(run: Callable[[], object]) -> float:
    run()
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


if __name__ == "__main__":
    main()
