"""Edges of the CLI, the local backend, settings, packaging and the docs that describe them:
a lost job's ranks are found however they moved, a job of the embedded worker can be
interrupted, every `gpuq` command prints the API's JSON with --json, a reader that leaves
early gets 141, production's gunicorn serves the static files, `make test` uses
TEST_DATABASE_URL, gpuq_task runs any task, and a bad setting or option is refused naming it."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError

from queue_service.backends.base import RemoteState
from queue_service.backends.local import LocalBackend
from queue_service.jobs import tasks
from queue_service.jobs.management.commands.gpuq_task import TASKS
from queue_service.jobs.models import Job
from queue_service.settings import database_from_url, env_count, env_count_or_unlimited
from queue_service.tenancy.services import create_token
from tests.backends.test_local import (
    _config,
    alive,
    finished,
    gone_within,
    kill_everything_under,
    printed_pid,
    read_all,
    request,
    running,
    wait_for,
)
from tests.service.test_cli import Gpuq, gpuq, job_file, submitted_id  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
GPUQ = Path(sys.executable).parent / "gpuq"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the local backend ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "leader_gone"),
    [
        ("cd / && echo $$ && exec sleep 30", False),  # the rank itself moved
        ("cd / && { sleep 30 & echo $!; wait; }", True),  # what it started, its leader gone
    ],
)
def test_the_ranks_of_a_lost_job_that_changed_directory_do_not_run_on(
    tmp_path: Path, command: str, leader_gone: bool
) -> None:
    # ARCHITECTURE.md: "a job whose supervisor is gone is `lost`, its ranks killed". A rank
    # that starts with `cd /data && python train.py` no longer works in the job's directory:
    # once its supervisor is killed (OOM killer, kill -9), the job is reported lost and its
    # GPUs handed out again, so nothing of it may run on.
    backend = LocalBackend(_config(tmp_path))
    printed = None
    try:
        eid = backend.submit(request(["/bin/sh", "-c", command], time_limit_s=60)).external_id
        wait_for(backend, eid, running)
        printed = printed_pid(backend, eid)
        job_dir = backend._dir(eid)
        os.kill(int((job_dir / "supervisor.pid").read_text()), signal.SIGKILL)
        if leader_gone:
            os.kill(os.getpgid(printed), signal.SIGKILL)
            gone_within(os.getpgid(printed), 3)
        assert wait_for(backend, eid, finished).state == RemoteState.LOST
        assert gone_within(printed, 3), "a process of a job reported lost still runs"
    finally:
        kill_everything_under(tmp_path)
        if printed is not None:  # it works outside tmp_path: the helper above cannot find it
            with contextlib.suppress(OSError):
                os.killpg(os.getpgid(printed), signal.SIGKILL)


def test_a_process_group_that_is_no_longer_the_lost_jobs_is_not_killed(tmp_path: Path) -> None:
    # started.json names a group whose leader has another start time by now (a recycled
    # pid) and whose members carry no GPUQ_JOB_ID of this job: another program's, left be.
    backend = LocalBackend(_config(tmp_path))
    eid = "00000000-0000-0000-0000-00000000abcd/1"
    job_dir = backend._dir(eid)
    job_dir.mkdir(parents=True)
    other = subprocess.Popen(["sleep", "30"], start_new_session=True, cwd=job_dir)
    try:
        (job_dir / "supervisor.pid").write_text(str(os.getpid()))  # not its supervisor
        (job_dir / "started.json").write_text(
            json.dumps({"pids": [other.pid], "starts": [1], "at": 0})
        )
        assert backend.poll([eid])[eid].state == RemoteState.LOST
        time.sleep(0.2)
        assert alive(other.pid), "a group that is no longer the job's was killed"
    finally:
        other.kill()
        other.wait()


# What `make run` does: deploy/run-embedded starts `manage.py gpuq_worker &` from a bash
# script (no job control, so bash starts it with SIGINT and SIGQUIT ignored), and the worker
# dispatches with LocalBackend.submit.
LAUNCH = """
import pickle, sys
from queue_service.backends.local import LocalBackend
cluster, job = pickle.loads(bytes.fromhex(sys.argv[1]))
print(LocalBackend(cluster).submit(job).external_id)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGQUIT])
def test_a_job_of_the_embedded_worker_gets_sigint_as_any_process_does(
    tmp_path: Path, sig: signal.Signals
) -> None:
    # A job that interrupts itself (or a child it runs: `timeout -s INT`, a launcher stopping
    # its workers with SIGINT) is interrupted on Slurm, on Kubernetes, and on the local
    # backend under a worker started in the foreground: under `make run` too.
    cluster = _config(tmp_path)
    job = (
        f"import os, time; os.kill(os.getpid(), {int(sig)}); time.sleep(0.5);"
        " print('the signal did nothing')"
    )
    blob = pickle.dumps((cluster, request([sys.executable, "-c", job]))).hex()
    launched = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -c "$0" {blob} & wait', LAUNCH],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=True,
    )
    eid = launched.stdout.strip()
    backend = LocalBackend(cluster)
    try:
        status = wait_for(backend, eid, finished)
        assert read_all(backend, eid) == ""
        assert (status.state, status.exit_code) == (RemoteState.FAILED, 128 + sig)
    finally:
        kill_everything_under(tmp_path)


# -- the CLI ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("verb", "then"), [("cancel", None), ("suspend", "resume"), ("logs", None)]
)
def test_every_command_prints_the_api_json_with_json(
    gpuq: Gpuq, job_file: Any, verb: str, then: str | None
) -> None:
    # README: "Every command takes `--json` for the API's own JSON."
    job_id = submitted_id(gpuq("alice", "submit", job_file("name: x\ncommand: [/bin/true]\n")))
    for command in filter(None, (verb, then)):
        result = gpuq("alice", command, "--json", job_id)
        assert result.code == 0, result.err
        try:
            answer = json.loads(result.out)
        except ValueError:
            pytest.fail(f"`gpuq {command} --json` printed {result.out!r}, not JSON")
        if command == "logs":
            assert [set(chunk) >= {"data_base64", "next_offset", "eof"} for chunk in answer]
        else:
            assert [job["id"] for job in answer] == [job_id]


@pytest.mark.django_db(transaction=True)
def test_logs_follow_with_json_is_a_usage_error(gpuq: Gpuq, job_file: Any) -> None:
    # -f prints the output as it comes, as `submit -f --json` is refused already.
    job_id = submitted_id(gpuq("alice", "submit", job_file("name: x\ncommand: [/bin/true]\n")))
    result = gpuq("alice", "logs", "-f", "--json", job_id)
    assert result.code == 2
    assert "not with --json" in result.err


@pytest.mark.django_db(transaction=True)
def test_a_reader_that_leaves_before_the_first_line_gets_141_and_no_message(
    live_server: Any, people: dict[str, Any], gpuq: Gpuq, job_file: Any
) -> None:
    # cli.py: "141 the reader of the output left". `gpuq ls | true`: the output is still in
    # Python's buffer when the command returns, and its flush is where the pipe breaks.
    submitted_id(gpuq("alice", "submit", job_file("name: x\ncommand: [/bin/true]\n")))
    _, token = create_token(people["alice"], "pipe")
    env = {
        "GPUQ_URL": live_server.url,
        "GPUQ_TOKEN": token,
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
    }
    proc = subprocess.Popen([GPUQ, "ls"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before anything is written
    code = proc.wait(timeout=60)
    assert (code, proc.stderr.read()) == (141, b"")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("suffix", ["json", "yaml"])
def test_a_job_file_saved_with_a_byte_order_mark_is_submitted(
    gpuq: Gpuq, tmp_path: Path, suffix: str
) -> None:
    # Windows editors save UTF-8 with a BOM, which the server's JSON parser refuses.
    path = tmp_path / f"job.{suffix}"
    document = {"name": "bom", "command": ["true"]}
    text = json.dumps(document) if suffix == "json" else yaml.safe_dump(document)
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    result = gpuq("alice", "submit", str(path))
    assert result.code == 0, result.err
    assert Job.objects.get().name == "bom"


# -- production: docker-compose.yml's web ----------------------------------------------------


def test_the_production_web_server_serves_the_pages_stylesheets_and_scripts(
    tmp_path: Path,
) -> None:
    # docker-compose.yml's `web` is gunicorn on the WSGI app with GPUQ_DEBUG unset, with
    # nothing in front of it to serve /static/: the pages need their CSS, htmx and gpuq.js,
    # and /api/docs/ its Swagger UI.
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert "gunicorn queue_service.wsgi:application" in compose["services"]["web"]["command"]
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "SECRET_KEY": "review-only",
        "DATABASE_URL": f"sqlite:////{tmp_path}/gpuq.sqlite3",
    }
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "queue_service.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                page = httpx.get(base + "/login/", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "gunicorn did not start"
                time.sleep(0.2)
        assert page.status_code == 200
        docs = httpx.get(base + "/api/docs/", timeout=5)
        assets = re.findall(r'(?:href|src)="(/static/[^"]+)"', page.text + docs.text)
        assert any(a.endswith(".css") for a in assets)
        missing = [a for a in assets if httpx.get(base + a, timeout=5).status_code != 200]
        assert missing == [], f"the production server answers 404 for {missing}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_readme_names_every_file_docker_compose_needs_beside_it() -> None:
    # `docker compose up` stops at a missing secret file: the README must say to make it.
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    readme = (REPO / "README.md").read_text()
    needed = [s["file"].removeprefix("./") for s in compose["secrets"].values()]
    assert needed, "docker-compose.yml names no secret files"
    assert [f for f in needed if f not in readme] == []


# -- make, and the management commands ------------------------------------------------------


def test_make_test_runs_pytest_on_the_database_test_database_url_names() -> None:
    # README: `make test` runs pytest against PostgreSQL "(`TEST_DATABASE_URL`, default
    # postgres://postgres@127.0.0.1:5432/gpuq)"; CI runs it with no variables at all.
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "TEST_DATABASE_URL")}
    for given, expected in [
        (["TEST_DATABASE_URL=postgres://u@db.example:5433/other"], "u@db.example:5433/other"),
        ([], "postgres@127.0.0.1:5432/gpuq"),
    ]:
        planned = subprocess.run(
            ["make", "-n", "test", *given],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.splitlines()
        pytest_line = next(line for line in planned if re.search(r"/pytest\b", line))
        assert f"DATABASE_URL=postgres://{expected} " in pytest_line


def test_gpuq_task_knows_every_task_of_tasks_py() -> None:
    # ARCHITECTURE.md: "gpuq_task (any task of tasks.py inline)".
    names = {
        task.name.removeprefix("gpuq.")
        for task in vars(tasks).values()
        if getattr(task, "name", "").startswith("gpuq.")
    }
    assert names == set(TASKS)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "argv",
    [
        ["deliver_notifications"],
        ["sync_all_clusters"],
        ["schedule_cycle"],
    ],
)
def test_gpuq_task_runs_any_task_inline(argv: list[str]) -> None:
    call_command("gpuq_task", *argv, stdout=StringIO())


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["dispatch_job"], "dispatch_job takes a job id"),
        (["apply_mig_layout", "1"], "a node id and a MIG config name"),
        (["send_notification", "x"], "a notification id, not ['x']"),
        (["schedule_cycle", "1"], "schedule_cycle takes no arguments"),
    ],
)
def test_gpuq_task_with_the_wrong_arguments_says_what_it_takes(
    argv: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("gpuq_task", *argv, stdout=StringIO())


@pytest.mark.parametrize("interval", ["-1", "0", "nan", "inf"])
def test_gpuq_worker_refuses_an_interval_it_cannot_sleep(interval: str) -> None:
    # The sleep is outside the loop's try: -1 would end the engine with a traceback.
    with pytest.raises(CommandError, match="--interval must be a number of seconds above 0"):
        call_command("gpuq_worker", "--interval", interval)


# -- settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgres://gpuq@db:5432x/gpuq",
        "postgres://gpuq@db:99999/gpuq",
        "postgres://gpuq:secret@db:0/gpuq",
    ],
)
def test_a_database_url_with_a_bad_port_names_the_variable(url: str) -> None:
    # README: "a bad value stops the process with a message naming it", not urllib's bare
    # ValueError; and the message shows no password.
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL") as raised:
        database_from_url(url)
    assert "secret" not in str(raised.value)


@pytest.mark.parametrize("raw", ["²", "①", "١٢"])
def test_a_count_in_other_digits_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    # str.isdigit() is true of superscripts, circled and Arabic-Indic digits: a whole number
    # here is ASCII digits.
    monkeypatch.setenv("GPUQ_C", raw)
    with pytest.raises(ImproperlyConfigured, match="GPUQ_C"):
        env_count("GPUQ_C", 4, maximum=10)
    with pytest.raises(ImproperlyConfigured, match="GPUQ_C"):
        env_count_or_unlimited("GPUQ_C", 2)


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        # int(0.5) is 0: HSTS silently off.
        ({"GPUQ_HTTPS": "1", "GPUQ_HSTS_SECONDS": "0.5"}, "GPUQ_HSTS_SECONDS"),
        ({"GPUQ_HTTPS": "1", "GPUQ_HSTS_SECONDS": "-1"}, "GPUQ_HSTS_SECONDS"),
        # With debug off, every request would be a 400.
        ({"ALLOWED_HOSTS": ""}, "ALLOWED_HOSTS"),
        ({"ALLOWED_HOSTS": " , "}, "ALLOWED_HOSTS"),
    ],
)
def test_a_setting_that_would_silently_turn_something_off_is_refused(
    environ: dict[str, str], named: str
) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GPUQ_")},
        "SECRET_KEY": "x",
        "DJANGO_SETTINGS_MODULE": "queue_service.settings",
        **environ,
    }
    result = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; settings.DEBUG"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert f"ImproperlyConfigured: {named}" in result.stderr
