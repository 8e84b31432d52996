"""The service's scheduling cycle under concurrent load, on real PostgreSQL: for `--duration`
seconds, processes of their own (each its own connection, as Celery workers and gunicorn's
are) do at once what the service does:

- cycle (x `--cycles`): `snapshot.run_cycle()` in a loop, the function the Celery task and
  the embedded loop call; after each, the invariants below read as one view
  (`snapshot.consistent_read`);
- submit (x `--submitters`): `services.submit_job` as the API would, as members of four
  teams with quotas: one to sixteen GPUs, both models, CPUs charged in GPUs, the three
  priority classes, arrays with a %N limit and notices, `after` dependencies, held jobs;
- update: `services.update_job` of waiting jobs (priority, time limit), timing its wait on
  the cycle's lock (`SchedulerLock.hold`);
- cancel: `services.cancel_job`, `suspend_job`, `resume_job` of jobs in any state;
- cluster: what the dispatcher does (`dispatch.dispatch_job` for admitted jobs and due
  retries, `dispatch.sync_cluster`) against a cluster of kind `stress`, a backend written
  here whose jobs start within 1.5 s of their submit, run 1-6 s and end (mostly exit 0, some
  exit 1, some node failures that requeue), and stop within a second of a cancel. Its state
  is files in a directory, so a stop sent from the cancelling process (embedded mode: the
  stop runs after the cancel's commit, in that process) reaches the cluster's.

Invariants, after every cycle and at the end, read as one view: no node's allocated GPUs
exceed its GPUs (nor is a GPU held twice); no team's non-preemptible usage of a model exceeds
its nominal quota, nor its usage nominal + borrowing limit; no array runs more tasks than its
%N; no job ran before its `after` jobs succeeded; every job is in a known state, with an event
history that leads to it through allowed moves (`services.ALLOWED`) and the fields that state
implies (a placement while holding GPUs, none while waiting; an end time once ended; an open
run only while running); every waiting job has a reason; queue positions only on pending jobs,
each once. At the end also: every job a submit returned exists, with each array's tasks, and
after one last cycle no pending job still says only "waiting for the next scheduling cycle".
(After a cycle the histories read are those of the jobs changed in the last 10 s or since the
last check; at the end, every job's.)

Errors: what an actor's call raised, by SQLSTATE for the database's (serialization failure,
deadlock, lock timeout) or by type, and what the service logged at WARNING or above (what a
robust on_commit hook or a sync catches); the service's refusals (409, 400) are counted apart.

Runs against PostgreSQL on 127.0.0.1 in a throwaway database `test_gpuq_stress`, created and
dropped here. Every connection has `lock_timeout` (`--lock-timeout-s`, 20 s): a wait that long
is reported as an error rather than hanging the run. The embedded mode (no broker): stops run
after the commit of what asked for them, in that process.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import multiprocessing as mp
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queue_service.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")
os.environ["CELERY_BROKER_URL"] = ""  # the embedded mode: nothing is enqueued

import django  # noqa: E402

DB_URL = "postgres://postgres@127.0.0.1:5432/gpuq_stress"

TEAMS = {  # slug: (nominal SIM-A100, borrowing limit, nominal SIM-H100)
    "vision": (12, 16, 4),
    "language": (12, 8, 2),
    "speech": (6, None, 1),
    "robotics": (2, 4, 1),
}
NODES = [
    *({"name": f"a{i}", "gpu_model": "SIM-A100", "gpus": 8, "cpus": 64} for i in range(4)),
    *({"name": f"h{i}", "gpu_model": "SIM-H100", "gpus": 4, "cpus": 32} for i in range(2)),
]
WAITING = ("pending", "suspended")


# --- the cluster: a backend whose jobs are files -----------------------------------------------


class StressBackend:
    """A cluster that runs nothing: each attempt is a JSON file saying when it starts and
    ends and how; a stop makes it end within a second (as cancelled)."""

    kind = "stress"

    def __init__(self, cluster: Any) -> None:
        self.dir = Path(cluster.settings["state_dir"])
        self.node_list = list(cluster.settings["nodes"])

    def _path(self, external_id: str) -> Path:
        return self.dir / f"{external_id}.json"

    def _read(self, external_id: str) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self._path(external_id).read_text()))
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def _write(self, external_id: str, state: dict[str, Any]) -> None:
        tmp = self.dir / f".{external_id}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(state))
        tmp.replace(self._path(external_id))  # readers see the old file or the new, whole

    def nodes(self) -> list[Any]:
        from queue_service.backends.base import NodeInfo

        return [
            NodeInfo(name=n["name"], gpu_model=n["gpu_model"], gpus=n["gpus"], cpus=n["cpus"])
            for n in self.node_list
        ]

    def submit(self, job: Any) -> Any:
        from queue_service.backends.base import SubmitResult

        external_id = f"{job.job_id}.{job.attempt}"
        if self._read(external_id) is not None:
            return SubmitResult(external_id, adopted=True)
        now = time.time()
        start = now + random.uniform(0.2, 1.5)
        roll = random.random()
        end = "succeeded" if roll < 0.86 else "failed" if roll < 0.95 else "node_failure"
        self._write(
            external_id,
            {"start": start, "end_at": start + random.uniform(1.0, 6.0), "end": end, "stop": None},
        )
        return SubmitResult(external_id)

    def _status(self, external_id: str, now: float) -> Any:
        from queue_service.backends.base import JobStatus, RemoteState

        s = self._read(external_id)
        if s is None:
            return JobStatus(external_id, RemoteState.LOST)
        if s["stop"] is not None and s["stop"] <= min(now, s["end_at"]):
            return JobStatus(
                external_id, RemoteState.CANCELLED, native_state="CANCELLED",
                started=s["start"] <= s["stop"],
            )  # fmt: skip
        if now >= s["end_at"]:
            code = {"succeeded": 0, "failed": 1}.get(s["end"])
            return JobStatus(external_id, s["end"], exit_code=code, started=True)
        if now >= s["start"]:
            return JobStatus(external_id, RemoteState.RUNNING)
        return JobStatus(external_id, RemoteState.QUEUED, reason="Priority")

    def poll(self, external_ids: Sequence[str]) -> dict[str, Any]:
        now = time.time()
        return {i: self._status(i, now) for i in external_ids}

    def cancel(self, external_id: str, grace_s: float = 30.0) -> bool:
        s = self._read(external_id)
        now = time.time()
        if s is None or now >= s["end_at"] or (s["stop"] is not None and s["stop"] <= now):
            return False  # it had ended
        if s["stop"] is None:
            s["stop"] = now + random.uniform(0.1, 1.0)
            self._write(external_id, s)
        return True

    def logs(self, external_id: str, offset: int = 0, limit: int = 65536, stream: str = "") -> Any:
        from queue_service.backends.base import LogChunk

        return LogChunk(b"", offset, eof=True)

    def log_size(self, external_id: str, stream: str = "stdout") -> int | None:
        return 0

    def close(self) -> None:
        pass


def create(cluster: Any) -> StressBackend:
    """The backend registry's entry point (backends._MODULES["stress"] names this module)."""
    return StressBackend(cluster)


# --- measuring --------------------------------------------------------------------------------


class Tally:
    """One actor's figures: latencies per operation, errors and refusals by kind, samples."""

    def __init__(self, actor: str) -> None:
        self.actor = actor
        self.ms: dict[str, list[float]] = defaultdict(list)
        self.errors: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.samples: dict[str, str] = {}
        self.violations: Counter[str] = Counter()
        self.violation_samples: dict[str, str] = {}
        self.logged: Counter[str] = Counter()  # warnings and errors the service logged
        self.submitted: list[str] = []
        self.arrays: list[tuple[str, int]] = []
        self.extra: Counter[str] = Counter()

    @contextlib.contextmanager
    def op(self, name: str) -> Iterator[None]:
        from rest_framework.exceptions import ValidationError

        from queue_service.jobs.services import JobConflict

        started = time.perf_counter()
        try:
            yield
        except (JobConflict, ValidationError) as exc:
            kind = f"{name}: {type(exc).__name__}"
            self.refused[kind] += 1
            self.samples.setdefault(kind, str(exc)[:300])
        except Exception as exc:
            kind = f"{name}: {error_kind(exc)}"
            self.errors[kind] += 1
            self.samples.setdefault(kind, traceback.format_exc()[-3000:])
            from django.db import connection

            if connection.in_atomic_block is False:
                connection.close()  # a broken session starts over
        finally:
            self.ms[name].append((time.perf_counter() - started) * 1000)

    def violated(self, problems: list[tuple[str, str]]) -> None:
        for kind, text in problems:
            self.violations[kind] += 1
            self.violation_samples.setdefault(kind, text)

    def result(self) -> dict[str, Any]:
        return {k: v if not isinstance(v, defaultdict) else dict(v) for k, v in vars(self).items()}


def error_kind(exc: BaseException) -> str:
    """A database error by its SQLSTATE's meaning; anything else by its type."""
    names = {
        "40001": "serialization failure",
        "40P01": "deadlock",
        "55P03": "lock timeout",
        "57014": "statement cancelled (timeout)",
    }
    seen: BaseException | None = exc
    while seen is not None:
        state = getattr(seen, "sqlstate", None)
        if state:
            return names.get(state, f"database error {state}")
        seen = seen.__cause__ or seen.__context__
    return type(exc).__name__


class Logged(logging.Handler):
    """Counts what the service logs at WARNING and above: exceptions it catches (a robust
    on_commit hook's, a sync's) never reach the actor."""

    def __init__(self, tally: Tally) -> None:
        super().__init__(logging.WARNING)
        self.tally = tally

    def emit(self, record: logging.LogRecord) -> None:
        kind = f"logged {record.levelname} by {record.name}"
        self.tally.logged[kind] += 1
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + "".join(traceback.format_exception(*record.exc_info))[-2500:]
        self.tally.samples.setdefault(kind, text)


class LockTimer:
    """An execute wrapper that times the statements taking the cycle's advisory lock: the
    cycle's of its session (`pg_advisory_lock(`), SchedulerLock.hold's of a transaction
    (`pg_advisory_xact_lock(`, which the cycle also takes, already holding the lock)."""

    def __init__(self, tally: Tally, name: str, statement: str) -> None:
        self.tally, self.name, self.statement = tally, name, statement

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if self.statement not in sql:
            return execute(sql, params, many, context)
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.tally.ms[self.name].append((time.perf_counter() - started) * 1000)


# --- invariants -----------------------------------------------------------------------------


def invariants(since: datetime | None = None) -> list[tuple[str, str]]:
    """What is wrong in the database, as (kind, example): read as one view."""
    from queue_service.jobs.snapshot import consistent_read

    return consistent_read(_invariants, since)


def _invariants(since: datetime | None) -> list[tuple[str, str]]:
    from queue_service.clusters.models import Node
    from queue_service.jobs.models import Job, JobArray, JobEvent, JobRun
    from queue_service.jobs.services import ALLOWED
    from queue_service.tenancy.models import Quota

    problems: list[tuple[str, str]] = []
    states = set(Job.State.values)
    nodes = {(n.cluster_id, n.name): n.gpus for n in Node.objects.all()}
    held: dict[tuple[int, str], Counter[int]] = defaultdict(Counter)
    used: dict[tuple[str, str], float] = defaultdict(float)
    fixed: dict[tuple[str, str], float] = defaultdict(float)
    quotas = {(q.team.slug, q.gpu_model): q for q in Quota.objects.select_related("team")}
    limits = dict(JobArray.objects.exclude(max_running=None).values_list("id", "max_running"))
    started: Counter[Any] = Counter()
    open_runs = Counter(
        JobRun.objects.filter(ended_at__isnull=True).values_list("job_id", flat=True)
    )
    positions: Counter[int] = Counter()
    after: list[tuple[Any, str, list[str]]] = []
    state_of: dict[str, str] = {}
    rows = Job.objects.values_list(
        "id", "state", "reason", "placement", "cluster_id", "gpus", "gpu_model", "team__slug",
        "priority_class__preemptible", "admitted_at", "finished_at", "updated_at", "array_id",
        "queue_position", "spec",
    )  # fmt: skip
    changed = []
    for pk, state, reason, placement, cluster_id, gpus, model, team, preemptible, admitted, \
            finished, updated, array_id, position, spec in rows:  # fmt: skip
        state_of[str(pk)] = state
        if since is None or updated >= since:
            changed.append((pk, state))
        if state not in states:
            problems.append(("unknown state", f"job {pk}: {state!r}"))
            continue
        if state in Job.ACTIVE:
            if not placement or cluster_id is None or admitted is None:
                problems.append(("holds GPUs unplaced", f"job {pk} {state}: {placement!r}"))
            for a in placement or ():
                held[(cluster_id, a["node"])].update(a.get("gpus", ()))
            used[(team, model)] += gpus
            if not preemptible:
                fixed[(team, model)] += gpus
            if array_id is not None:
                started[array_id] += 1
        elif placement and state in WAITING:
            problems.append(("waits placed", f"job {pk} {state}: {placement!r}"))
        if state in WAITING and not (
            isinstance(reason, dict) and reason.get("code") and reason.get("message")
        ):
            problems.append(("waits without a reason", f"job {pk} {state}: {reason!r}"))
        if state in Job.TERMINAL and finished is None:
            problems.append(("ended without an end time", f"job {pk} {state}"))
        if open_runs[pk] > 1 or (open_runs[pk] and state not in Job.RUNNING_STATES):
            problems.append(("a run left open", f"job {pk} {state}: {open_runs[pk]} open"))
        if position is not None:
            if state != "pending":
                problems.append(("a position out of the queue", f"job {pk} {state}: {position}"))
            positions[position] += 1
        if spec.get("after") and state not in (*WAITING, "cancelled"):
            after.append((pk, state, spec["after"]))
    for (cluster_id, name), taken in held.items():
        size = nodes.get((cluster_id, name))
        twice = sorted(g for g, n in taken.items() if n > 1)
        if size is None or sum(taken.values()) > size or twice or max(taken, default=-1) >= size:
            problems.append(
                ("node over-allocated", f"{name}: {sorted(taken.elements())} of {size} GPUs")
            )
    for (team, model), gpus in used.items():
        quota = quotas.get((team, model)) or quotas.get((team, "*"))
        nominal = quota.nominal_gpus if quota else 0.0
        if fixed[(team, model)] > nominal + 1e-9:
            problems.append(
                (
                    "non-preemptible usage over nominal",
                    f"{team} on {model}: {fixed[(team, model)]:g} GPUs of class high,"
                    f" nominal {nominal:g}",
                )
            )
        borrow = quota.borrowing_limit_gpus if quota else 0.0
        if borrow is not None and gpus > nominal + borrow + 1e-9:
            problems.append(
                (
                    "usage over nominal + borrowing limit",
                    f"{team} on {model}: {gpus:g} GPUs, nominal {nominal:g} + {borrow:g}",
                )
            )
    for array_id, n in started.items():
        if n > limits.get(array_id, n):
            problems.append(
                ("array over its %N", f"array {array_id}: {n} tasks of {limits[array_id]}")
            )
    if twice := sorted(p for p, n in positions.items() if n > 1):
        problems.append(("queue position held twice", f"positions {twice[:10]}"))
    for pk, state, deps in after:
        if not_yet := [d for d in deps if state_of.get(d) != "succeeded"]:
            states_now = [state_of.get(d) for d in not_yet]
            problems.append(("ran before its after", f"job {pk} {state}: after {states_now}"))
    events: dict[Any, list[tuple[str, str, str]]] = defaultdict(list)
    ids = [pk for pk, _ in changed]
    for first in range(0, len(ids), 2000):
        for job_id, frm, to, code in (
            JobEvent.objects.filter(job_id__in=ids[first : first + 2000])
            .exclude(to_state="")
            .order_by("id")
            .values_list("job_id", "from_state", "to_state", "code")
        ):
            events[job_id].append((frm, to, code))
    for pk, state in changed:
        history = events.get(pk, [])
        if not history or history[0][2] != "submitted" or history[0][0] != "":
            problems.append(("history without its submit", f"job {pk}: {history[:2]}"))
            continue
        at = history[0][1]
        for frm, to, code in history[1:]:
            if frm != at or to not in ALLOWED.get(frm, ()):
                problems.append(
                    ("history of a move not allowed", f"job {pk}: at {at}, {frm}->{to} ({code})")
                )
            at = to
        if at != state:
            problems.append(("history does not lead to the state", f"job {pk}: {state}, {at}"))
    return problems


# --- the actors ------------------------------------------------------------------------------


def cycle_actor(tally: Tally, deadline: float, rng: random.Random) -> None:
    from django.db import connection
    from django.utils import timezone

    from queue_service.jobs.snapshot import run_cycle

    since = None
    with connection.execute_wrapper(LockTimer(tally, "cycle: lock wait", "pg_advisory_lock(")):
        while time.monotonic() < deadline:
            result: dict[str, Any] = {}
            with tally.op("cycle"):
                result = run_cycle()
            if result:
                tally.ms["cycle: decide"].append(float(result["decide_ms"]))
                tally.extra["admitted"] += int(result["admitted"])
                tally.extra["preempted"] += int(result["preempted"])
                tally.extra["cancelled_after"] += int(result["cancelled_after"])
            checked = timezone.now() - timedelta(seconds=10)  # a commit may come late
            with tally.op("check"):
                tally.violated(invariants(since))
                tally.extra["checks"] += 1
            since = checked
            time.sleep(rng.uniform(0.0, 0.3))


def submit_actor(tally: Tally, deadline: float, rng: random.Random) -> None:
    from django.contrib.auth import get_user_model

    from queue_service.jobs.services import submit_job
    from queue_service.tenancy.models import Membership

    pairs = list(Membership.objects.values_list("user_id", "team__slug"))
    users = {u.pk: u for u in get_user_model().objects.all()}
    mine: dict[str, list[str]] = defaultdict(list)  # by team: `after` names a teammate's job
    while time.monotonic() < deadline:
        user_id, team = rng.choice(pairs)
        data = job_data(rng, team, mine[team])
        with tally.op("submit"):
            made = submit_job(users[user_id], data).job
            mine[team].append(str(made.pk))
            tally.submitted.append(str(made.pk))
            if made.array_id is not None:
                tally.arrays.append((str(made.array_id), int(made.array.size)))
        time.sleep(rng.uniform(0.05, 0.35))


def job_data(rng: random.Random, team: str, earlier: list[str]) -> dict[str, Any]:
    shapes: list[dict[str, Any]] = [
        {"gpus_per_node": 1},
        {"gpus_per_node": 2},
        {"gpus_per_node": 4},
        {"gpus_per_node": 8, "gpu_model": "SIM-A100"},
        {"nodes": 2, "gpus_per_node": 8, "gpu_model": "SIM-A100"},
        {"gpus_per_node": 1, "cpus_per_gpu": 24},  # charged 3 GPUs on an 8-CPU-a-GPU node
        {"gpus_per_node": 2, "gpu_model": "SIM-H100"},
        {"gpus_per_node": 1, "kind": "agent"},
    ]
    shape = rng.choices(shapes, weights=[30, 20, 12, 6, 3, 8, 8, 8])[0]
    data: dict[str, Any] = {
        "name": f"stress-{rng.randrange(10**6)}",
        "command": ["/bin/true"],
        "team": team,
        "priority": rng.choices(["normal", "low", "high"], weights=[60, 25, 15])[0],
        "time_limit": rng.choice(["20m", "1h", "2h", "6h"]),
        **shape,
    }
    roll = rng.random()
    if roll < 0.08:
        data["array"] = f"0-{rng.randrange(2, 6)}%{rng.randrange(1, 3)}"
        data["notify"] = ["start", "end"]
    elif roll < 0.13 and earlier:
        data["after"] = [rng.choice(earlier[-20:])]
    elif roll < 0.17:
        data["hold"] = True
    return data


def update_actor(tally: Tally, deadline: float, rng: random.Random) -> None:
    from django.db import connection

    from queue_service.jobs.models import Job
    from queue_service.jobs.services import update_job

    with connection.execute_wrapper(
        LockTimer(tally, "update: lock wait", "pg_advisory_xact_lock(")
    ):
        while time.monotonic() < deadline:
            job = pick(Job.objects.filter(state__in=WAITING), rng)
            if job is not None:
                changes = rng.choice(
                    [
                        {"priority": rng.choice(["normal", "low", "high"])},
                        {"time_limit": rng.choice(["30m", "1h", "3h", "12h"])},
                        {"priority": rng.choice(["normal", "high"]), "time_limit": "45m"},
                    ]
                )
                with tally.op("update"):
                    update_job(job.user, job, changes)
            time.sleep(rng.uniform(0.02, 0.15))


def cancel_actor(tally: Tally, deadline: float, rng: random.Random) -> None:
    from queue_service.jobs.models import Job
    from queue_service.jobs.services import cancel_job, resume_job, suspend_job

    live = Job.objects.exclude(state__in=Job.TERMINAL)
    while time.monotonic() < deadline:
        what = rng.choices(["cancel", "suspend", "resume"], weights=[4, 3, 3])[0]
        if what == "resume":
            job = pick(Job.objects.filter(state="suspended"), rng)
            act = resume_job
        elif what == "suspend":
            job = pick(live.filter(state__in=Job.SUSPENDABLE), rng)
            act = suspend_job
        else:
            job = pick(live, rng)
            act = cancel_job
        if job is not None:
            with tally.op(what):
                act(job.user, job)
        time.sleep(rng.uniform(0.1, 0.4))


def cluster_actor(tally: Tally, deadline: float, rng: random.Random) -> None:
    from django.utils import timezone

    from queue_service.backends import BackendError
    from queue_service.clusters.models import Cluster
    from queue_service.jobs.dispatch import dispatch_job, retries_due_now, sync_cluster
    from queue_service.jobs.models import Job

    cluster_id = Cluster.objects.get(name="sim").pk
    while time.monotonic() < deadline:
        admitted = [
            str(pk) for pk in Job.objects.filter(state="admitted").values_list("pk", flat=True)
        ]
        for job_id in admitted + retries_due_now(timezone.now()):
            with tally.op("dispatch"):
                try:
                    dispatch_job(job_id)
                except BackendError:
                    tally.extra["dispatch retries"] += 1
        with tally.op("sync"):
            counts = sync_cluster(cluster_id)
            tally.extra["sync changes"] += counts["changed"]
        time.sleep(rng.uniform(0.1, 0.3))


def pick(rows: Any, rng: random.Random) -> Any:
    ids = list(rows.values_list("pk", flat=True)[:500])
    if not ids:
        return None
    return rows.model.objects.select_related("user").filter(pk=rng.choice(ids)).first()


ACTORS: dict[str, Callable[[Tally, float, random.Random], None]] = {
    "cycle": cycle_actor,
    "submit": submit_actor,
    "update": update_actor,
    "cancel": cancel_actor,
    "cluster": cluster_actor,
}


def run_actor(role: str, name: str, seconds: float, seed: int, out: Any) -> None:
    from django.db import connection

    tally = Tally(name)
    logging.getLogger().addHandler(Logged(tally))
    try:
        ACTORS[role](tally, time.monotonic() + seconds, random.Random(seed))
    except Exception:
        tally.errors[f"{name} died: {error_kind(sys.exc_info()[1] or Exception())}"] += 1
        tally.samples[f"{name} died"] = traceback.format_exc()[-3000:]
    finally:
        connection.close()
        out.put(tally.result())


# --- setup and report -------------------------------------------------------------------------


def populate(state_dir: str) -> None:
    from django.contrib.auth import get_user_model

    from queue_service.clusters.models import Cluster
    from queue_service.jobs.dispatch import sync_cluster
    from queue_service.tenancy.models import Membership, Quota, Team

    User = get_user_model()
    for n, (slug, (a100, borrow, h100)) in enumerate(TEAMS.items()):
        team = Team.objects.create(slug=slug, name=slug.title())
        Quota.objects.create(
            team=team, gpu_model="SIM-A100", nominal_gpus=a100, borrowing_limit_gpus=borrow
        )
        Quota.objects.create(
            team=team, gpu_model="SIM-H100", nominal_gpus=h100, borrowing_limit_gpus=2
        )
        for i in range(2):
            user = User.objects.create(username=f"{slug}{i}", email=f"{slug}{i}@example.org")
            Membership.objects.create(user=user, team=team, role="admin" if i else "member")
        if n == len(TEAMS) - 1:  # one person in two teams: every submit names its team
            Membership.objects.create(
                user=user, team=Team.objects.get(slug="vision"), role="member"
            )
    cluster = Cluster.objects.create(
        name="sim", kind="stress", settings={"state_dir": state_dir, "nodes": NODES}
    )
    sync_cluster(cluster.pk)


def final_checks(tallies: list[dict[str, Any]]) -> list[tuple[str, str]]:
    from queue_service.jobs.models import Job, JobArray
    from queue_service.jobs.snapshot import run_cycle

    problems = invariants()
    submitted = {j for t in tallies for j in t["submitted"]}
    found = {str(pk) for pk in Job.objects.filter(pk__in=submitted).values_list("pk", flat=True)}
    problems += [("submitted job lost", f"job {j}") for j in sorted(submitted - found)]
    for array_id, size in {a for t in tallies for a in t["arrays"]}:
        tasks = Job.objects.filter(array_id=array_id).count()
        if tasks != size or not JobArray.objects.filter(pk=array_id).exists():
            problems.append(("array task lost", f"array {array_id}: {tasks} of {size}"))
    run_cycle()
    stale = Job.objects.filter(state="pending", reason__code="new").values_list("pk", flat=True)
    problems += [("pending after a cycle without its reason", f"job {pk}") for pk in stale]
    problems += invariants()
    return problems


def pct(values: list[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    if len(values) == 1:
        return values[0], values[0]
    return statistics.median(values), statistics.quantiles(values, n=100, method="inclusive")[98]


def report(tallies: list[dict[str, Any]], final: list[tuple[str, str]], seconds: float) -> int:
    from queue_service.jobs.models import Job, JobEvent

    print(f"\n{'actor':<10} {'operation':<20} {'count':>7} {'median ms':>10} {'p99 ms':>9}")
    for t in tallies:
        for name, values in sorted(t["ms"].items()):
            med, p99 = pct(values)
            print(f"{t['actor']:<10} {name:<20} {len(values):>7} {med:>10.1f} {p99:>9.1f}")
    cycles = [v for t in tallies for v in t["ms"].get("cycle", [])]
    med, p99 = pct(cycles)
    print(f"\ncycles: {len(cycles)} in {seconds:.0f} s, wall median {med:.1f} ms, p99 {p99:.1f} ms")
    waits = [v for t in tallies for v in t["ms"].get("update: lock wait", [])]
    med, p99 = pct(waits)
    print(f"update_job's wait on the cycle's lock: median {med:.1f} ms, p99 {p99:.1f} ms,"
          f" max {max(waits, default=0):.1f} ms")  # fmt: skip
    extra: Counter[str] = Counter()
    for t in tallies:
        extra.update(t["extra"])
    print("counts:", ", ".join(f"{k} {v}" for k, v in sorted(extra.items())))
    states = Counter(Job.objects.values_list("state", flat=True))
    by_state = ", ".join(f"{k} {v}" for k, v in states.most_common())
    print(f"jobs: {sum(states.values())} ({by_state}); events: {JobEvent.objects.count()}")
    refused: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    violations: Counter[str] = Counter()
    samples: dict[str, str] = {}
    for t in tallies:
        refused.update(t["refused"])
        errors.update(t["errors"])
        errors.update(t["logged"])
        violations.update(t["violations"])
        samples.update({k: v for k, v in t["samples"].items() if k not in samples})
        samples.update({k: v for k, v in t["violation_samples"].items() if k not in samples})
    for kind, text in final:
        violations[f"at the end: {kind}"] += 1
        samples.setdefault(f"at the end: {kind}", text)
    print("refused (the service's 409/400 answers):",
          ", ".join(f"{k} {v}" for k, v in sorted(refused.items())) or "none")  # fmt: skip
    print(
        "errors (raised, or logged as a warning or an error):",
        ", ".join(f"{k} {v}" for k, v in sorted(errors.items())) or "none",
    )
    print("invariant violations:",
          ", ".join(f"{k} {v}" for k, v in sorted(violations.items())) or "none")  # fmt: skip
    for kind, text in sorted(samples.items()):
        if kind in refused:
            print(f"  {kind}, e.g.: {text[:200]}")
    for kind in [*sorted(errors), *sorted(violations)]:
        print(f"\n--- {kind}:\n{samples.get(kind, '')}")
    return 1 if errors or violations else 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--cycles", type=int, default=2)
    parser.add_argument("--submitters", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lock-timeout-s", type=float, default=20.0)
    args = parser.parse_args()
    options = f"options=-c%20lock_timeout%3D{int(args.lock_timeout_s * 1000)}"
    os.environ["DATABASE_URL"] = f"{DB_URL}?{options}"
    django.setup()

    from django.db import connection
    from django.test.utils import setup_test_environment

    import queue_service.backends as backends

    backends._MODULES["stress"] = __name__  # this module is the `stress` kind's
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    state_dir = tempfile.mkdtemp(prefix="gpuq-stress-")
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        populate(state_dir)
        connection.close()  # each process opens its own
        roles = [
            *(("cycle", f"cycle{i}") for i in range(args.cycles)),
            *(("submit", f"submit{i}") for i in range(args.submitters)),
            ("update", "update"),
            ("cancel", "cancel"),
            ("cluster", "cluster"),
        ]
        ctx = mp.get_context("fork")
        out = ctx.Queue()
        procs = [
            ctx.Process(
                target=run_actor, args=(role, name, args.duration, args.seed * 100 + n, out)
            )
            for n, (role, name) in enumerate(roles)
        ]
        began = time.monotonic()
        for p in procs:
            p.start()
        tallies = []
        for _ in procs:  # read before joining: a child's large result would block its exit
            with contextlib.suppress(Exception):
                tallies.append(out.get(timeout=args.duration + 120))
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                print(f"actor process {p.pid} did not end: killed")
                p.kill()
        seconds = time.monotonic() - began
        missing = {n for _, n in roles} - {t["actor"] for t in tallies}
        if missing:
            print("no figures from:", ", ".join(sorted(missing)))
        order = {n: i for i, (_, n) in enumerate(roles)}
        tallies.sort(key=lambda t: order[t["actor"]])
        final = final_checks(tallies)
        code = report(tallies, final, seconds)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        shutil.rmtree(state_dir, ignore_errors=True)
    sys.exit(code or (1 if missing else 0))


if __name__ == "__main__":
    main()
