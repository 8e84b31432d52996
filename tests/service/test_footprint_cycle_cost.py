"""what the footprint costs a deep queue's cycle. bench/cycle_bench.py's
setting (50 nodes x 8 GPUs, full with 200 running jobs, so nothing starts), with the
nodes' CPUs known: the same queue of waiting jobs, once asking CPUs within their GPUs'
share and once asking CPUs that charge them 4 GPUs instead of 2."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from queue_service.clusters.models import Cluster, Node
from queue_service.jobs.models import Job, PriorityClass
from queue_service.jobs.snapshot import run_cycle
from queue_service.tenancy.models import Membership, Quota, Team

NODES, GPUS, RUNNING, TEAMS, PENDING = 50, 8, 200, 10, 500


def _populate() -> None:
    user_model = get_user_model()
    teams = [Team.objects.create(slug=f"team{i}", name=f"Team {i}") for i in range(TEAMS)]
    for team in teams:
        Quota.objects.create(team=team, gpu_model="A100", nominal_gpus=40, borrowing_limit_gpus=8)
    users = [user_model.objects.create(username=f"user{i}") for i in range(20)]
    for i, user in enumerate(users):
        Membership.objects.create(user=user, team=teams[i % TEAMS], role="member")
    cluster = Cluster.objects.create(name="big", kind="local")
    Node.objects.bulk_create(
        Node(
            cluster=cluster, name=f"n{i:03}", gpu_model="A100", gpus=GPUS, cpus=96,
            memory_mb=1_000_000,
        )
        for i in range(NODES)
    )  # fmt: skip
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
            priority_class=normal, submitted_at=now - timedelta(seconds=PENDING - i))
        for i in range(PENDING)
    ]  # fmt: skip
    Job.objects.bulk_create(running + waiting, batch_size=2000)


def _reasons_sent() -> int:
    """The reason documents a steady cycle's one UPDATE of the waits carries
    (snapshot._write_waits: 'each distinct reason once')."""
    sent: list[int] = []

    def spy(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if "jsonb_array_elements" in sql:
            sent.append(len(json.loads(params[1])))
        return execute(sql, params, many, context)

    run_cycle()  # stores every waiting job's reason
    with connection.execute_wrapper(spy):
        summary = run_cycle()
    assert summary["admitted"] == 0, summary
    (count,) = sent
    return count


def _ask_cpus(cpus_per_gpu: int | None) -> None:
    for job in Job.objects.filter(state="pending"):
        job.spec = {**job.spec, "cpus_per_gpu": cpus_per_gpu}
        job.save(update_fields=["spec"])


def test_waiting_jobs_charged_alike_share_one_reason_in_the_cycles_write(teams: Any) -> None:
    """A deep queue's cycle reads and writes every waiting job's reason; it stays cheap
    because jobs waiting for the same thing share one Reason, sent once (10,000 waits, a
    handful of documents). charged_reason builds a new Reason per charged job, so each is
    encoded and sent on its own: at 10,000 such jobs bench/cycle_bench.py's steady cycle
    went from 652 ms to 1,447 ms (nodes of 96 CPUs, jobs charged 4 GPUs for 40 CPUs)."""
    _populate()
    _ask_cpus(12)  # within its GPUs' share: charged its own 2 GPUs
    plain = _reasons_sent()
    _ask_cpus(20)  # 40 CPUs of 96: charged 4 GPUs
    charged = _reasons_sent()
    assert Job.objects.filter(reason__details__gpus_charged_per_node=4).count() == PENDING

    assert charged <= plain + 5, f"{charged} reason documents for {PENDING} waits ({plain} before)"
