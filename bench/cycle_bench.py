"""What one scheduling cycle of the service costs (snapshot from the ORM, schedule(), storing
the decisions), as the queue grows: median wall ms of `run_cycle()` with 1,000 and 10,000
pending jobs, 200 running on 50 nodes x 8 GPUs (the cluster full, so nothing starts and the
decisions are the same each time), and two kinds of cycle:

- steady: nothing changed since the last cycle, so no waiting job's reason, position or
  estimate changes;
- shifted: the job at the head of the queue left since the last cycle (it started, or was
  cancelled), so every waiting job moves up one place and its row is written.

    .venv/bin/python bench/cycle_bench.py [--pending 1000 10000] [--repeats 7]

Runs against PostgreSQL on 127.0.0.1 (a throwaway database `test_gpuq_cyclebench`, created
and dropped here). `decide` is the part spent in scheduler.schedule().
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queue_service.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")
os.environ["DATABASE_URL"] = "postgres://postgres@127.0.0.1:5432/gpuq_cyclebench"

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402

NODES, GPUS, RUNNING, TEAMS = 50, 8, 200, 10


def populate(pending: int) -> None:
    from queue_service.clusters.models import Cluster, Node
    from queue_service.jobs.models import Job, PriorityClass
    from queue_service.tenancy.models import Membership, Quota, Team

    User = get_user_model()
    teams = [Team.objects.create(slug=f"team{i}", name=f"Team {i}") for i in range(TEAMS)]
    for team in teams:  # each team's nominal is what it runs: nobody reclaims
        Quota.objects.create(team=team, gpu_model="A100", nominal_gpus=40, borrowing_limit_gpus=8)
    users = [User.objects.create(username=f"user{i}") for i in range(20)]
    for i, user in enumerate(users):
        Membership.objects.create(user=user, team=teams[i % TEAMS], role="member")
    cluster = Cluster.objects.create(name="big", kind="local")
    Node.objects.bulk_create(
        Node(cluster=cluster, name=f"n{i:03}", gpu_model="A100", gpus=GPUS) for i in range(NODES)
    )
    normal = PriorityClass.objects.get(name="normal")
    now = timezone.now()
    spec = {"nodes": 1, "gpus_per_node": 2, "command": "x", "time_limit": 86400, "kind": "training"}
    running = [
        Job(team=teams[i % TEAMS], user=users[i % 20], name=f"run{i}", spec=spec, gpus=2,
            priority_class=normal, state="running", cluster=cluster, gpu_model="A100",
            placement=[{"node": f"n{i // 4:03}", "gpus": [2 * (i % 4), 2 * (i % 4) + 1]}],
            started_at=now - timedelta(minutes=i), admitted_at=now, external_id=f"x{i}")
        for i in range(RUNNING)
    ]  # fmt: skip
    waiting = [
        Job(team=teams[i % TEAMS], user=users[i % 20], name=f"wait{i}", spec=spec, gpus=2,
            priority_class=normal, submitted_at=now - timedelta(seconds=pending - i))
        for i in range(pending)
    ]  # fmt: skip
    Job.objects.bulk_create(running + waiting, batch_size=2000)


def timed_cycle() -> tuple[float, float, int]:
    from queue_service.jobs.snapshot import run_cycle

    start = time.perf_counter()
    result = run_cycle()
    wall = (time.perf_counter() - start) * 1000
    assert result["admitted"] == 0 and result["preempted"] == 0, result
    return wall, float(result["decide_ms"]), int(result["waiting"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pending", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    setup_test_environment()
    from queue_service.jobs.models import Job

    old_name = connection.settings_dict["NAME"]
    print(f"median ms per cycle ({args.repeats} cycles each); decide = scheduler.schedule()")
    print(f"{'pending':>8} {'steady':>10} {'decide':>8} {'shifted':>10} {'decide':>8}")
    for pending in args.pending:
        connection.creation.create_test_db(verbosity=0, autoclobber=True)
        try:
            populate(pending)
            timed_cycle()  # the first cycle stores every job's reason
            steady = [timed_cycle() for _ in range(args.repeats)]
            shifted = []
            for _ in range(args.repeats):
                head = Job.objects.filter(state="pending", queue_position=1).get()
                Job.objects.filter(pk=head.pk).update(state="cancelled", queue_position=None)
                shifted.append(timed_cycle())
            s_wall = statistics.median(w for w, _, _ in steady)
            s_dec = statistics.median(d for _, d, _ in steady)
            h_wall = statistics.median(w for w, _, _ in shifted)
            h_dec = statistics.median(d for _, d, _ in shifted)
            print(f"{pending:>8} {s_wall:>10.1f} {s_dec:>8.1f} {h_wall:>10.1f} {h_dec:>8.1f}")
        finally:
            connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
