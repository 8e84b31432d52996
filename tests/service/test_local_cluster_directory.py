"""Where a local cluster's jobs live on the machine is their identity (a worker finds its
running jobs there, or declares them lost and kills them): it depends on nothing that can
change under running jobs, neither the cluster's editable name nor the directory a process
of the service was started in."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps

from queue_service.backends.base import ClusterConfig
from queue_service.backends.local import LocalBackend
from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.backends.test_local import alive, kill_everything_under
from tests.conftest import spec
from tests.service.test_job_flow import run_until

S = Job.State
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def default_workdir_cluster(db: Any, tmp_path: Path, settings: Any) -> Iterator[Cluster]:
    """A local cluster as `gpuq_demo` makes one: no `workdir` of its own, so its jobs live
    under the service's GPUQ_LOCAL_WORKDIR (here in tmp_path)."""
    settings.GPUQ_LOCAL_WORKDIR = tmp_path / "local-jobs"
    cluster = Cluster.objects.create(
        name="local",
        kind="local",
        settings={"grace_s": 1, "nodes": [{"name": "n1", "gpus": 4, "gpu_model": "SIM-A100"}]},
    )
    sync_cluster(cluster.pk)
    yield cluster
    kill_everything_under(tmp_path / "local-jobs")


@pytest.mark.django_db(transaction=True)
def test_renaming_a_local_cluster_keeps_its_running_jobs_running(
    people: Any, default_workdir_cluster: Cluster, tmp_path: Path
) -> None:
    """A cluster's name is a label staff may edit in the admin: a local cluster without a
    `workdir` of its own keeps its jobs under GPUQ_LOCAL_WORKDIR/cluster.<id>, so after a
    rename the next sync still finds its running jobs, which keep running."""
    cluster = default_workdir_cluster
    job = submit_job(people["alice"], spec(command=["/bin/sh", "-c", "echo $$; exec sleep 60"])).job
    job = run_until(job, lambda j: j.state == S.RUNNING)
    job_dir = tmp_path / "local-jobs" / f"cluster.{cluster.pk}" / job.external_id
    (pid,) = json.loads((job_dir / "started.json").read_text())["pids"]

    cluster.name = "lab-a"
    cluster.save()
    sync_cluster(cluster.pk)
    time.sleep(0.3)

    job.refresh_from_db()
    assert (job.state, alive(pid)) == (S.RUNNING, True), (job.state, job.reason)


@pytest.mark.django_db
def test_an_upgrade_pins_existing_local_clusters_to_their_by_name_directory(
    settings: Any, tmp_path: Path
) -> None:
    """Earlier versions kept a local cluster's jobs under GPUQ_LOCAL_WORKDIR/<name>: the
    migration to by-id directories names that directory as each such cluster's `workdir`,
    so jobs running across the upgrade are found where they are (and stay there through a
    later rename). A cluster with a `workdir` of its own, or of another kind, is left as
    it is."""
    settings.GPUQ_LOCAL_WORKDIR = tmp_path / "local-jobs"
    legacy = Cluster.objects.create(name="local", kind="local", settings={"grace_s": 1})
    own = Cluster.objects.create(name="own", kind="local", settings={"workdir": "/srv/x"})
    slurm = Cluster.objects.create(name="hpc", kind="slurm", settings={"host": "h"})
    migration = importlib.import_module("queue_service.clusters.migrations.0004_pin_local_workdirs")
    migration.pin_by_name_workdirs(apps, None)
    found = {
        c.name: c.settings for c in Cluster.objects.filter(pk__in=[legacy.pk, own.pk, slurm.pk])
    }
    assert found == {
        "local": {"grace_s": 1, "workdir": str(tmp_path / "local-jobs" / "local")},
        "own": {"workdir": "/srv/x"},
        "hpc": {"host": "h"},
    }


def _local_workdir_seen_from(cwd: Path, workdir_setting: str) -> str:
    """Where a process of the service started in `cwd` puts (and looks for) the jobs of a
    local cluster (id 1) without a `workdir` of its own."""
    script = (
        "from queue_service.clusters.models import Cluster\n"
        "from queue_service.jobs.dispatch import backend_for\n"
        "print(backend_for(Cluster(pk=1, name='local', kind='local', settings={})).workdir)\n"
    )
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPUQ_", "SECRET_KEY", "DJANGO_ALLOW_ASYNC_UNSAFE"))
    }
    environ.update(
        SECRET_KEY="test-only",
        GPUQ_LOCAL_WORKDIR=workdir_setting,
        DATABASE_URL="sqlite:////" + str(cwd / "unused.sqlite3").lstrip("/"),
        CELERY_BROKER_URL="",
    )
    result = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "shell", "--verbosity", "0", "-c", script],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return result.stdout.strip() or result.stderr.strip().splitlines()[-1]


def test_a_relative_local_workdir_is_the_project_directorys_for_every_process(
    tmp_path: Path,
) -> None:
    """GPUQ_LOCAL_WORKDIR=var/local-jobs (a relative path, as in an .env file) is the
    project directory's, as a sqlite:/// DATABASE_URL is: the web server (which reads the
    logs) and a worker started from anywhere else look in one directory."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    seen = {
        _local_workdir_seen_from(REPO, "var/local-jobs"),
        _local_workdir_seen_from(elsewhere, "var/local-jobs"),
    }
    assert seen == {str(REPO / "var" / "local-jobs" / "cluster.1")}


@pytest.mark.parametrize(
    ("workdir", "expected"),
    [
        ("var/lab-jobs", REPO / "var" / "lab-jobs"),
        ("/srv/lab-jobs", Path("/srv/lab-jobs")),
    ],
)
def test_a_clusters_own_relative_workdir_is_the_project_directorys(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workdir: str, expected: Path
) -> None:
    """A cluster's own `workdir`, when relative, is the project directory's too, whatever
    directory the process reading it was started in; an absolute one is as it is."""
    monkeypatch.chdir(tmp_path)
    config = ClusterConfig(id=1, name="lab", kind="local", settings={"workdir": workdir})
    assert LocalBackend(config).workdir == expected
