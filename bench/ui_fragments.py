"""What one poll of each live UI fragment costs the server, as the queue grows: median wall
ms and SQL queries per request for the dashboard, queue, job and clusters fragments with 100,
1,000 and 10,000 pending jobs (plus 200 running on 50 nodes x 8 GPUs), and the usage report
over 30 days of finished jobs. Each open, visible tab polls one fragment every 2-5 s.

    .venv/bin/python bench/ui_fragments.py [--pending 100 1000 10000] [--repeats 15]

Runs against PostgreSQL on 127.0.0.1 (a throwaway database `test_gpuq_uibench`, created
and dropped here) through Django's test client: the view, template and queries, no network.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queue_service.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")
os.environ["DATABASE_URL"] = "postgres://postgres@127.0.0.1:5432/gpuq_uibench"

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext, setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402

NODES, GPUS, RUNNING = 50, 8, 200


def populate(pending: int) -> dict[str, Any]:
    from queue_service.clusters.models import Cluster, Node
    from queue_service.jobs.models import Job, JobRun, PriorityClass
    from queue_service.tenancy.models import Membership, Quota, Team

    User = get_user_model()
    teams = [Team.objects.create(slug=f"team{i}", name=f"Team {i}") for i in range(10)]
    for team in teams:
        Quota.objects.create(team=team, gpu_model="A100", nominal_gpus=40, borrowing_limit_gpus=8)
    users = [User.objects.create(username=f"user{i}") for i in range(20)]
    for i, user in enumerate(users):
        Membership.objects.create(user=user, team=teams[i % 10], role="admin")
    cluster = Cluster.objects.create(name="big", kind="local")
    Node.objects.bulk_create(
        Node(cluster=cluster, name=f"n{i:03}", gpu_model="A100", gpus=GPUS) for i in range(NODES)
    )
    normal = PriorityClass.objects.get(name="normal")
    now = timezone.now()
    spec = {"nodes": 1, "gpus_per_node": 2, "command": "x", "time_limit": 3600, "kind": "training"}
    running = [
        Job(team=teams[i % 10], user=users[i % 20], name=f"run{i}", spec=spec, gpus=2,
            priority_class=normal, state="running", cluster=cluster, gpu_model="A100",
            placement=[{"node": f"n{i // 4:03}", "gpus": [2 * (i % 4), 2 * (i % 4) + 1]}],
            started_at=now - timedelta(minutes=i), admitted_at=now)
        for i in range(RUNNING)
    ]  # fmt: skip
    waiting = [
        Job(team=teams[i % 10], user=users[i % 20], name=f"wait{i}", spec=spec, gpus=2,
            priority_class=normal, queue_position=i + 1,
            reason={"code": "no_capacity", "message": "needs 1 node x 2 free GPU; best now 0"},
            estimated_start=now + timedelta(minutes=i))
        for i in range(pending)
    ]  # fmt: skip
    Job.objects.bulk_create(running + waiting, batch_size=2000)
    # 30 days of finished runs for team0's usage report: 20 a day.
    finished = []
    for day in range(30):
        for k in range(20):
            start = now - timedelta(days=day, hours=k)
            finished.append(
                Job(team=teams[0], user=users[k % 2 * 10], name=f"done{day}-{k}", spec=spec,
                    gpus=4, priority_class=normal, state="succeeded", started_at=start,
                    finished_at=start + timedelta(hours=2))
            )  # fmt: skip
    Job.objects.bulk_create(finished, batch_size=2000)
    JobRun.objects.bulk_create(
        JobRun(job=j, attempt=1, team=j.team, user=j.user, gpus=j.gpus, started_at=j.started_at,
               ended_at=j.finished_at, ended_by="succeeded")
        for j in finished
    )  # fmt: skip
    staff = User.objects.create(username="staff", is_staff=True)
    return {"user": users[0], "staff": staff, "job": running[0], "team": teams[0]}


def measure(client: Client, url: str, repeats: int) -> tuple[float, int]:
    client.get(url)  # warm caches (templates, compiled regexes)
    times = []
    with CaptureQueriesContext(connection) as queries:
        start = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - start) * 1000)
    assert response.status_code == 200, (url, response.status_code)
    count = len(queries)  # read now: the log is cleared by the next request
    for _ in range(repeats - 1):
        start = time.perf_counter()
        client.get(url)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pending", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    setup_test_environment()
    from queue_service.jobs.models import Job

    old_name = connection.settings_dict["NAME"]
    results: dict[str, dict[int, tuple[float, int]]] = {}
    for pending in args.pending:
        connection.creation.create_test_db(verbosity=0, autoclobber=True)
        try:
            made = populate(pending)
            member, staff = Client(), Client()
            member.force_login(made["user"])
            staff.force_login(made["staff"])
            job = Job.objects.get(pk=made["job"].pk)
            urls = [
                ("dashboard (member)", member, "/live/dashboard/"),
                ("queue (member: 1 team of 10)", member, "/live/queue/"),
                ("queue (staff: all teams)", staff, "/live/queue/"),
                ("job (live part)", member, f"/jobs/{job.pk}/live/"),
                ("clusters (50 nodes x 8)", member, "/live/clusters/"),
                ("team admin + 14-day usage", member, f"/teams/{made['team'].slug}/"),
            ]
            for name, client, url in urls:
                results.setdefault(name, {})[pending] = measure(client, url, args.repeats)
        finally:
            connection.creation.destroy_test_db(old_name, verbosity=0)
    sizes = args.pending
    print(f"median ms (SQL queries) per request; {args.repeats} requests each")
    print(f"{'fragment':32}" + "".join(f"{f'{n} pending':>20}" for n in sizes) + "   ratio")
    for name, by_size in results.items():
        cells = "".join(f"{f'{by_size[n][0]:.1f} ({by_size[n][1]})':>20}" for n in sizes)
        ratio = by_size[sizes[-1]][0] / by_size[sizes[0]][0]
        print(f"{name:32}{cells}   {ratio:.2f}x")


if __name__ == "__main__":
    main()
