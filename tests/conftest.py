"""Fixtures shared by the whole suite: people, teams, a local cluster, API clients.

Alice and Bob are teammates in `vision` (Alice owns the jobs under test), Charlie is in
`language`: every endpoint is checked as owner, teammate and outsider."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def lab_missing(what: str) -> NoReturn:
    """A missing lab fails under CI=true and skips elsewhere, with a message saying which."""
    if IN_CI:
        pytest.fail(f"{what} is not available, and CI=true requires it", pytrace=False)
    pytest.skip(f"{what} is not available here")


@pytest.fixture(autouse=True)
def _fast_passwords(request: pytest.FixtureRequest) -> None:
    # PBKDF2's cost is for production; tests create many users. (Pure tests may run
    # without the Django plugin: -p no:django.)
    if request.config.pluginmanager.hasplugin("django"):
        settings = request.getfixturevalue("settings")
        settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def make_user(db: Any) -> Callable[..., Any]:
    from django.contrib.auth import get_user_model

    def make(username: str, *, staff: bool = False) -> Any:
        return get_user_model().objects.create_user(
            username=username, password="pw-" + username, is_staff=staff
        )

    return make


@pytest.fixture
def teams(db: Any) -> dict[str, Any]:
    from queue_service.jobs.models import PriorityClass
    from queue_service.tenancy.models import Quota, Team
    from scheduler.types import DEFAULT_PRIORITY_CLASSES

    # A transactional test's flush removes the migration's rows; put them back.
    for pc in DEFAULT_PRIORITY_CLASSES:
        PriorityClass.objects.get_or_create(
            name=pc.name, defaults={"value": pc.value, "preemptible": pc.preemptible}
        )
    vision = Team.objects.create(slug="vision", name="Vision", max_nominal_gpus=32)
    language = Team.objects.create(slug="language", name="Language", max_nominal_gpus=32)
    for team in (vision, language):
        Quota.objects.create(
            team=team, gpu_model="SIM-A100", nominal_gpus=8, borrowing_limit_gpus=8
        )
    return {"vision": vision, "language": language}


@pytest.fixture
def people(make_user: Callable[..., Any], teams: dict[str, Any]) -> dict[str, Any]:
    from queue_service.tenancy.models import Membership

    alice, bob, charlie = make_user("alice"), make_user("bob"), make_user("charlie")
    Membership.objects.create(user=alice, team=teams["vision"], role="member")
    Membership.objects.create(user=bob, team=teams["vision"], role="member")
    Membership.objects.create(user=charlie, team=teams["language"], role="admin")
    dana = make_user("dana")  # vision's team admin
    Membership.objects.create(user=dana, team=teams["vision"], role="admin")
    return {
        "alice": alice,
        "bob": bob,
        "charlie": charlie,
        "dana": dana,
        "staff": make_user("root", staff=True),
    }


@pytest.fixture
def client_for(people: dict[str, Any]) -> Callable[[str], Any]:
    """An API client authenticated with a real bearer token of that person."""
    from rest_framework.test import APIClient

    from queue_service.tenancy.services import create_token

    made = itertools.count(1)

    def make(name: str) -> APIClient:
        # A user's token names are unique: one client per call, each with a token of its own.
        _, key = create_token(people[name], f"test-{next(made)}")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        return client

    return make


# A GPU model only a cluster's `mig_profiles` describes (site_mig_cluster).
SITE_MIG_MODEL = "X-GPU-48GB"


@pytest.fixture
def site_mig_cluster(db: Any, tmp_path: Any) -> Any:
    """A local cluster named `site` with one MIG GPU of a model only its `mig_profiles`
    describes (4 compute and 4 memory slices), laid out as four 1g.12gb instances."""
    from queue_service.clusters.models import Cluster
    from queue_service.jobs.dispatch import sync_cluster

    cluster = Cluster.objects.create(
        name="site",
        kind="local",
        settings={
            "workdir": str(tmp_path / "jobs"),
            "nodes": [
                {
                    "name": "x1",
                    "gpus": 1,
                    "gpu_model": SITE_MIG_MODEL,
                    "mig": True,
                    "mig_layout": [
                        {"gpu": 0, "profile": "1g.12gb", "start": i, "size": 1} for i in range(4)
                    ],
                }
            ],
            "mig_profiles": {
                SITE_MIG_MODEL: {
                    "compute_slices": 4,
                    "memory_slices": 4,
                    "profiles": [
                        ["1g.12gb", 1, 1, 4, [0, 1, 2, 3], 1],
                        ["2g.24gb", 2, 2, 2, [0, 2], 2],
                    ],
                }
            },
        },
    )
    sync_cluster(cluster.pk)
    return cluster


@pytest.fixture
def local_cluster(db: Any, tmp_path: Any) -> Iterator[Any]:
    """A local cluster of 2 nodes x 4 simulated GPUs whose job directories live in tmp_path."""
    from queue_service.clusters.models import Cluster
    from queue_service.jobs.dispatch import sync_cluster

    cluster = Cluster.objects.create(
        name="local",
        kind="local",
        settings={
            "workdir": str(tmp_path / "jobs"),
            "grace_s": 2,
            "nodes": [
                {"name": "n1", "gpus": 4, "gpu_model": "SIM-A100"},
                {"name": "n2", "gpus": 4, "gpu_model": "SIM-A100"},
            ],
        },
    )
    sync_cluster(cluster.pk)
    yield cluster
    _kill_leftovers(tmp_path / "jobs")


@pytest.fixture(autouse=True)
def _no_processes_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """Jobs of the local backend that a test leaves running (a cluster of its own in
    tmp_path) are killed after it, ranks included."""
    uses_tmp = "tmp_path" in request.fixturenames
    tmp = request.getfixturevalue("tmp_path") if uses_tmp else None
    yield
    if tmp is not None:
        for workdir in tmp.glob("*jobs"):
            _kill_leftovers(workdir)


def _kill_leftovers(workdir: Any) -> None:
    import signal
    from pathlib import Path

    for pid_file in Path(workdir).glob("*/*/supervisor.pid"):
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    # The ranks run in process groups of their own: the supervisor's death leaves them.
    for started in Path(workdir).glob("*/*/started.json"):
        with contextlib.suppress(ValueError, OSError, KeyError, TypeError):
            for pid in json.loads(started.read_text())["pids"]:
                with contextlib.suppress(OSError):
                    os.killpg(int(pid), signal.SIGKILL)


def spec(**overrides: Any) -> dict[str, Any]:
    """A valid job spec; tests override what they are about."""
    base: dict[str, Any] = {
        "name": "train-resnet",
        "command": ["/bin/echo", "hello"],
        "gpus_per_node": 1,
    }
    base.update(overrides)
    return base


def record_runs(job: Any, *runs: tuple[Any, Any]) -> None:
    """A job's runs [start, end) as the dispatcher records them (end None: still running),
    attempts numbered from 1: history for usage reports and fair share."""
    from queue_service.jobs.models import JobRun

    for attempt, (start, end) in enumerate(runs, start=1):
        JobRun.objects.create(
            job=job,
            attempt=attempt,
            team_id=job.team_id,
            user_id=job.user_id,
            gpus=job.gpus,
            started_at=start,
            ended_at=end,
            ended_by="" if end is None else "pending",
        )


class JobLoop:
    """The embedded worker's loop (sync clusters, schedule, dispatch) on a background thread."""

    def __init__(self, interval_s: float = 0.25) -> None:
        self.interval_s = interval_s
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-loop", daemon=True)

    def _run(self) -> None:
        from django.db import connection

        from queue_service.jobs.dispatch import run_once

        try:
            while not self._stop.is_set():
                try:
                    run_once()
                except Exception as exc:  # shown by the test that owns the loop
                    self.errors.append(exc)
                self._stop.wait(self.interval_s)
        finally:
            connection.close()

    def start(self) -> JobLoop:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


@pytest.fixture
def job_loop(local_cluster: Any, live_server: Any) -> Iterator[JobLoop]:
    loop = JobLoop().start()
    yield loop
    loop.stop()
    assert not loop.errors, f"the job loop failed: {loop.errors[:3]}"


# The embedded default's database: a scenario runs in `manage.py shell` on a fresh SQLite file
# (pytest's own database is PostgreSQL), with alice of team vision (nominal 8 GPUs) and a
# local cluster `cluster` of one 4-GPU node already there.
SQLITE_PREAMBLE = """
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
"""


def on_sqlite(tmp_path: Path, scenario: str) -> list[str]:
    """What `scenario` (after SQLITE_PREAMBLE) prints, run on a migrated SQLite database."""
    import subprocess
    import sys

    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path}/gpuq.sqlite3",
        "CELERY_BROKER_URL": "",
    }
    manage = [sys.executable, str(Path(__file__).resolve().parents[1] / "manage.py")]
    subprocess.run([*manage, "migrate", "--verbosity", "0"], env=env, check=True, timeout=300)
    script = f"WORKDIR = {str(tmp_path / 'jobs')!r}\n" + SQLITE_PREAMBLE + scenario
    result = subprocess.run(
        [*manage, "shell", "--verbosity", "0", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()
