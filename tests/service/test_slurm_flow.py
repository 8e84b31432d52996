"""The service on the real Slurm lab: a node dies under two jobs; the one whose retry policy
covers node failures goes back to the queue and runs again elsewhere, the other fails."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_service.backends.slurm.backend import slurm_job_id
from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import run_once, sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from tests.backends.slurm.conftest import CLUSTER_JSON, kill_node, lab_up, second_account
from tests.conftest import lab_missing

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
S = Job.State


@pytest.fixture
def slurm(teams: Any) -> Iterator[Cluster]:
    if not CLUSTER_JSON.exists():
        lab_missing("the Slurm lab (deploy/slurm-lab/lab up)")
    lab_up()
    cluster = Cluster.objects.create(
        name="lab", kind="slurm", settings=json.loads(CLUSTER_JSON.read_text())
    )
    sync_cluster(cluster.pk)
    Quota.objects.create(team=teams["vision"], gpu_model="*", nominal_gpus=16)
    yield cluster
    lab_up()  # bring the killed node back


def wait(jobs: list[Job], done: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run_once()
        for job in jobs:
            job.refresh_from_db()
        if all(done(j) for j in jobs):
            return
        time.sleep(0.5)
    raise AssertionError([(j.name, j.state, j.reason) for j in jobs])


def test_a_node_failure_requeues_per_the_retry_policy(slurm: Cluster, people: Any) -> None:
    def job(name: str, retries: int) -> Job:
        return submit_job(
            people["alice"],
            {
                "name": name,
                "command": ["sleep", "600"],
                "gpus_per_node": 2,
                "cluster": "lab",
                "gpu_model": "A100-SXM4-80GB",
                "retries": {"max": retries, "on": ["node_failure"]},
            },
        ).job

    keeps, gives_up = job("keeps-going", 1), job("gives-up", 0)
    wait([keeps, gives_up], lambda j: j.state == S.RUNNING, timeout=60)
    nodes = {keeps.placement[0]["node"], gives_up.placement[0]["node"]}
    assert len(nodes) == 1, "best fit packs both 2-GPU jobs on one 4-GPU node"
    (dead,) = nodes
    kill_node(dead)
    wait([gives_up], lambda j: j.is_terminal, timeout=120)
    assert gives_up.state == S.FAILED
    assert gives_up.remote_state == "NODE_FAIL"
    wait([keeps], lambda j: j.state == S.RUNNING and j.attempts == 2, timeout=120)
    assert keeps.placement[0]["node"] != dead
    assert "requeued_node_failure" in [e.code for e in keeps.events.all()]
    from queue_service.backends import get_backend
    from queue_service.jobs.dispatch import cluster_config

    get_backend(cluster_config(slurm)).cancel(keeps.external_id, grace_s=1)


def test_a_job_that_ended_before_its_cancel_keeps_its_own_end(slurm: Cluster, people: Any) -> None:
    from queue_service.backends import get_backend
    from queue_service.backends.base import RemoteState
    from queue_service.jobs.dispatch import cluster_config
    from queue_service.jobs.services import cancel_job

    job = submit_job(
        people["alice"],
        {"name": "quick", "command": "sleep 2; echo done", "gpus_per_node": 1, "cluster": "lab"},
    ).job
    wait([job], lambda j: j.state == S.RUNNING, timeout=60)
    # It ends on the cluster; gpuq's next sync has not seen it when alice cancels.
    backend = get_backend(cluster_config(slurm))
    deadline = time.monotonic() + 60
    while backend.poll([job.external_id])[job.external_id].state != RemoteState.SUCCEEDED:
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.5)

    cancel_job(people["alice"], job)

    job.refresh_from_db()
    assert (job.state, job.exit_code) == (S.SUCCEEDED, 0)
    assert "ended_before_stop" in [e.code for e in job.events.all()]


def test_a_suspended_job_is_stopped_on_slurm_and_runs_again_when_resumed(
    slurm: Cluster, people: Any
) -> None:
    from queue_service.backends import get_backend
    from queue_service.backends.base import RemoteState
    from queue_service.jobs.dispatch import cluster_config
    from queue_service.jobs.services import cancel_job, resume_job, suspend_job

    job = submit_job(
        people["alice"],
        {"name": "agent", "command": ["sleep", "600"], "gpus_per_node": 1, "cluster": "lab"},
    ).job
    wait([job], lambda j: j.state == S.RUNNING, timeout=60)
    first = job.external_id
    backend = get_backend(cluster_config(slurm))

    suspend_job(people["alice"], job)
    wait([job], lambda j: j.state == S.SUSPENDED, timeout=120)

    assert backend.poll([first])[first].state in RemoteState.TERMINAL  # TERM ended it
    assert (job.external_id, job.placement) == (first, [])  # the last run's, for its logs
    resume_job(people["alice"], job)
    wait([job], lambda j: j.state == S.RUNNING, timeout=60)
    assert job.external_id != first and job.attempts == 2
    cancel_job(people["alice"], job)
    wait([job], lambda j: j.is_terminal, timeout=120)


def test_an_array_runs_on_slurm_one_sbatch_per_task_each_with_its_index(
    slurm: Cluster, people: Any
) -> None:
    from queue_service.jobs.dispatch import read_logs

    first = submit_job(
        people["alice"],
        {
            "name": "sweep",
            "command": 'echo "lr index $GPUQ_ARRAY_TASK_ID of $GPUQ_ARRAY_TASK_COUNT"',
            "gpus_per_node": 1,
            "cluster": "lab",
            "array": "2-6:2%2",
        },
    ).job
    tasks = list(Job.objects.filter(array=first.array_id).order_by("array_index"))

    wait(tasks, lambda j: j.is_terminal, timeout=120)

    assert [(t.array_index, t.state) for t in tasks] == [
        (2, S.SUCCEEDED),
        (4, S.SUCCEEDED),
        (6, S.SUCCEEDED),
    ]
    assert len({t.external_id for t in tasks}) == 3  # a Slurm job each
    outputs = [read_logs(t, offset=0, limit=4096, stream="stdout").data.decode() for t in tasks]
    assert outputs == ["lr index 2 of 3\n", "lr index 4 of 3\n", "lr index 6 of 3\n"]
    # %2: the last task was let through only once one of the first two had ended.
    assert tasks[2].admitted_at >= min(t.finished_at for t in tasks[:2])


def test_a_team_with_its_own_account_runs_as_it_through_the_service(
    slurm: Cluster, people: Any, teams: Any
) -> None:
    """charlie's team is mapped to the lab's second user: the dispatch picks that account from
    the job's team, and the sync, the logs and the cancel reach the job through it; alice's
    team stays on the cluster's user, with bare ids."""
    from queue_service.backends import get_backend
    from queue_service.jobs.dispatch import cluster_config, read_logs
    from queue_service.jobs.services import cancel_job

    account = second_account()
    slurm.settings = {**slurm.settings, "accounts": {"language": account}}
    slurm.save(update_fields=["settings"])
    Quota.objects.create(team=teams["language"], gpu_model="*", nominal_gpus=16)
    backend = get_backend(cluster_config(slurm))
    try:
        mine = submit_job(
            people["charlie"],
            {"name": "nlp", "command": "echo as-$(id -un); sleep 600", "cluster": "lab"},
        ).job
        theirs = submit_job(
            people["alice"], {"name": "cv", "command": ["sleep", "600"], "cluster": "lab"}
        ).job
        wait([mine, theirs], lambda j: j.state == S.RUNNING, timeout=60)
        assert mine.external_id.startswith(f"{account['user']}:")
        assert ":" not in theirs.external_id and slurm_job_id(theirs.external_id).isdigit()
        deadline = time.monotonic() + 30
        while b"as-" not in (text := read_logs(mine, offset=0, limit=4096, stream="stdout").data):
            assert time.monotonic() < deadline, text
            time.sleep(0.5)
        assert text == f"as-{account['user']}\n".encode()

        cancel_job(people["charlie"], mine)
        cancel_job(people["alice"], theirs)
        wait([mine, theirs], lambda j: j.is_terminal, timeout=120)
        assert (mine.state, theirs.state) == (S.CANCELLED, S.CANCELLED)
    finally:  # both accounts' jobs: one left running would hold its node for later tests
        backend.account_connection("language").run("scancel -u $(id -un)")
        backend.connection.run("scancel -u $(id -un)")


def test_a_job_stored_with_srun_options_in_its_env_runs_its_two_node_training_without_them(
    slurm: Cluster, people: Any
) -> None:
    """Multi-node training starts one torchrun per node through gpuq's srun, which holds the
    job's env: a job stored before SRUN_* names were refused would have its step started
    without PATH (`SRUN_EXPORT_ENV=NONE`) or refused (`SRUN_CPUS_PER_TASK=2`). It is handed
    over without them (test_a_job_stored_with_a_launcher_env_name_is_dispatched_without_it.py)
    and runs."""
    from queue_service.jobs.dispatch import read_logs

    # torchrun is not installed in the lab: a stand-in on PATH prints what it sees.
    bin_dir = Path("/tmp/gpuq-lab-bin-env")
    bin_dir.mkdir(exist_ok=True)
    stand_in = bin_dir / "torchrun"
    stand_in.write_text('#!/bin/sh\necho "$SLURMD_NODENAME $SEED ${SRUN_EXPORT_ENV-none}"\n')
    stand_in.chmod(0o755)
    job = submit_job(
        people["alice"],
        {
            "name": "old-env",
            "kind": "training",
            "command": ["train.py"],
            "nodes": 2,
            "gpus_per_node": 4,
            "gpu_model": "A100-SXM4-80GB",
            "cluster": "lab",
            "env": {"PATH": f"{bin_dir}:/usr/bin:/bin", "SEED": "7"},
        },
    ).job
    old_env = {**job.spec["env"], "SRUN_EXPORT_ENV": "NONE", "SRUN_CPUS_PER_TASK": "2"}
    Job.objects.filter(pk=job.pk).update(spec={**job.spec, "env": old_env})

    wait([job], lambda j: j.is_terminal, timeout=120)

    errors = read_logs(job, offset=0, limit=4096, stream="stderr").data
    assert job.state == S.SUCCEEDED, (job.reason, errors)
    text = read_logs(job, offset=0, limit=4096, stream="stdout").data.decode()
    lines = [line.split(" ", 1) for line in text.splitlines()]
    assert len({node for node, _ in lines}) == 2, text  # one torchrun per node
    assert {seen for _, seen in lines} == {"7 none"}
    assert job.events.filter(code="env_dropped").count() == 1
