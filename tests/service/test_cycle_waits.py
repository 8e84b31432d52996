"""What a cycle stores for each waiting job (reason, position, estimate), on PostgreSQL (its
own UPDATE ... FROM VALUES) and on the embedded default's SQLite (Django's bulk_update)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, submit_job
from queue_service.jobs.snapshot import _write_waits, run_cycle
from tests.conftest import spec

REPO = Path(__file__).resolve().parents[2]


def positions() -> list[tuple[str, int | None]]:
    return list(
        Job.objects.filter(state=Job.State.PENDING)
        .order_by("queue_position")
        .values_list("name", "queue_position")
    )


def test_every_waiting_job_moves_up_when_the_head_leaves(
    people: dict[str, Any], local_cluster: Any
) -> None:
    # 2 nodes x 4 GPUs: a 3-node job can never fit, nor can anything behind a full cluster.
    jobs = [
        submit_job(people["alice"], spec(name=f"j{i}", nodes=3, gpus_per_node=4)).job
        for i in range(4)
    ]
    run_cycle()
    assert positions() == [("j0", 1), ("j1", 2), ("j2", 3), ("j3", 4)]
    waiting = Job.objects.get(pk=jobs[3].pk)
    assert waiting.reason["code"] == "unsatisfiable" and "3 nodes x 4" in waiting.reason["message"]

    cancel_job(people["alice"], jobs[0])
    run_cycle()

    assert positions() == [("j1", 1), ("j2", 2), ("j3", 3)]
    assert Job.objects.get(pk=jobs[0].pk).queue_position is None


def test_a_job_that_left_the_queue_while_the_cycle_ran_gets_no_position(
    people: dict[str, Any], local_cluster: Any
) -> None:
    job = submit_job(people["alice"], spec(name="gone", nodes=3, gpus_per_node=4)).job
    cancel_job(people["alice"], job)  # after the cycle read it as pending
    before = Job.objects.get(pk=job.pk).reason
    reason = {"code": "unsatisfiable", "message": "x", "details": {}}

    _write_waits([(job.pk, reason, 1, None)])

    job.refresh_from_db()
    assert (job.state, job.queue_position, job.reason) == (Job.State.CANCELLED, None, before)


SQLITE_SCENARIO = textwrap.dedent(
    """
    from django.contrib.auth import get_user_model
    from queue_service.clusters.models import Cluster
    from queue_service.jobs.dispatch import sync_cluster
    from queue_service.jobs.models import Job
    from queue_service.jobs.services import cancel_job, submit_job
    from queue_service.jobs.snapshot import run_cycle
    from queue_service.tenancy.models import Membership, Quota, Team

    team = Team.objects.create(slug="vision", name="Vision")
    Quota.objects.create(team=team, gpu_model="*", nominal_gpus=8)
    alice = get_user_model().objects.create_user("alice")
    Membership.objects.create(user=alice, team=team, role="member")
    cluster = Cluster.objects.create(name="local", kind="local", settings={
        "workdir": WORKDIR, "nodes": [{"name": "n1", "gpus": 4, "gpu_model": "SIM-A100"}]})
    sync_cluster(cluster.pk)
    spec = {"command": ["true"], "nodes": 2, "gpus_per_node": 4}
    jobs = [submit_job(alice, {**spec, "name": f"j{i}"}).job for i in range(3)]

    def positions():
        return list(Job.objects.filter(state="pending").order_by("queue_position")
                    .values_list("queue_position", flat=True))

    run_cycle()
    first = positions()
    cancel_job(alice, jobs[0])
    run_cycle()
    print("positions", first, "then", positions())
    """
)


def test_the_embedded_default_stores_waits_on_sqlite(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path}/gpuq.sqlite3",
        "CELERY_BROKER_URL": "",
    }
    manage = [sys.executable, str(REPO / "manage.py")]
    subprocess.run([*manage, "migrate", "--verbosity", "0"], env=env, check=True, timeout=300)
    script = f"WORKDIR = {str(tmp_path / 'jobs')!r}\n" + SQLITE_SCENARIO
    result = subprocess.run(
        [*manage, "shell", "--verbosity", "0", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "positions [1, 2, 3] then [1, 2]"
