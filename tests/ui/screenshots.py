"""Regenerate docs/screenshots/*.png from the real pages, with the demo data.

    .venv/bin/python tests/ui/screenshots.py [--out docs/screenshots]

Runs the embedded service the way `make run` does (migrate, gpuq_demo, gpuq_worker,
runserver) on a throwaway SQLite database, submits jobs through the REST API with the demo
users' tokens, lets the worker run them on the local backend, and photographs the pages with
Debian's Chromium. Two additions to the demo, so every part of the UI has something to show:
a MIG node (node-mig, 4 x A100-SXM4-80GB) joins the local cluster, and ten days of finished
runs are recorded for the usage report (back-dated runs and events: nothing ran then).
The demo's credentials file (var/demo-credentials.json) is put back as it was."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.ui.conftest import CHROMIUM, CHROMIUM_ARGS, PHONE  # noqa: E402

PY = str(REPO / ".venv" / "bin" / "python")
DESKTOP = {"width": 1360, "height": 900}
MIG_NODE = {
    "name": "node-mig",
    "gpus": 4,
    "gpu_model": "A100-SXM4-80GB",
    "pool": "inference",
    "mig": True,
    "mig_layout": [
        {"gpu": 0, "profile": "3g.40gb", "start": 0, "size": 4},
        {"gpu": 0, "profile": "2g.20gb", "start": 4, "size": 2},
        {"gpu": 0, "profile": "1g.10gb", "start": 6, "size": 1},
        *({"gpu": 1, "profile": "1g.10gb", "start": s, "size": 1} for s in range(7)),
        {"gpu": 2, "profile": "7g.80gb", "start": 0, "size": 8},
    ],
}
TRAIN = (
    "i=0; while [ $i -lt 2000 ]; do i=$((i+1)); "
    "awk -v i=$i 'BEGIN { printf \"epoch %d step %4d loss %.4f lr 3.0e-04 "
    "tok/s %d\\n\", i/40+1, i, 2.6*exp(-i/120)+0.31+(i%7)/200, 51000+(i*37)%900 }'; "
    "sleep 0.4; done"
)
JOBS: list[tuple[str, dict[str, Any]]] = [
    ("alice", {"name": "resnet50-imagenet", "command": TRAIN, "gpus_per_node": 4,
               "time_limit": "6h", "checkpoint": {"dir": "/ckpt/resnet50", "interval": "30m"},
               "notify": ["end", "fail"]}),
    ("carol", {"name": "llama-8b-finetune", "command": "sleep 3600", "gpus_per_node": 4,
               "time_limit": "3h", "priority": "high"}),
    ("carol", {"name": "chat-agent", "kind": "agent", "mig_profile": "3g.40gb",
               "command": "sleep 3600", "priority": "high", "time_limit": "8h"}),
    ("bob", {"name": "retrieval-agent", "kind": "agent", "mig_profile": "1g.10gb",
             "command": "sleep 3600", "priority": "high", "time_limit": "8h"}),
    ("bob", {"name": "vit-huge-pretrain", "command": "sleep 3600", "nodes": 2,
             "gpus_per_node": 4, "time_limit": "12h"}),
    ("alice", {"name": "sweep-lr-3e-4", "command": "sleep 3600", "gpus_per_node": 8,
               "time_limit": "4h", "priority": "low"}),
    ("carol", {"name": "tokenizer-eval", "command": "sleep 3600", "gpus_per_node": 4,
               "time_limit": "1h"}),
    ("bob", {"name": "smoke-test", "command": "echo checking GPUs; exit 3",
             "gpus_per_node": 1, "time_limit": "5m"}),
    # A job array on MIG slices (the training GPUs are taken): three shards at a time.
    ("alice", {"name": "eval-shards", "kind": "agent", "mig_profile": "1g.10gb",
               "array": "0-11%3", "command": 'echo "shard $GPUQ_ARRAY_TASK_ID"; sleep 20',
               "time_limit": "1h"}),
]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "screenshots"))
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="gpuq-shots-"))
    creds_file = REPO / "var" / "demo-credentials.json"
    saved = creds_file.read_bytes() if creds_file.exists() else None
    # Relative to the repo: the settings resolve sqlite:/// paths from there.
    db = os.path.relpath(tmp / "db.sqlite3", REPO)
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{db}",
        "SECRET_KEY": "screenshots-only",
        "GPUQ_DEBUG": "1",
        "GPUQ_LOCAL_WORKDIR": str(tmp / "jobs"),
        "CELERY_BROKER_URL": "",
        "GPUQ_PREEMPTION_GRACE_S": "1",
        "DJANGO_SETTINGS_MODULE": "queue_service.settings",
    }
    procs: list[subprocess.Popen[bytes]] = []
    try:
        manage(env, "migrate", "--verbosity", "0")
        manage(env, "gpuq_demo")
        creds = json.loads(creds_file.read_text())
        restore(creds_file, saved)
        os.environ.update(env)
        seed(creds)
        port = free_port()
        logs = (tmp / "worker.log").open("wb"), (tmp / "server.log").open("wb")
        procs.append(popen(env, logs[0], "gpuq_worker", "--interval", "1"))
        procs.append(popen(env, logs[1], "runserver", f"127.0.0.1:{port}", "--noreload"))
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: httpx.get(f"{base}/login/").status_code == 200, "the server")
        submit_all(base, creds)
        shoot(base, creds, out)
    finally:
        stop_jobs()
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        restore(creds_file, saved)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"screenshots in {out}")


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [PY, "manage.py", *args], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL
    )


def popen(env: dict[str, str], log: Any, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [PY, "manage.py", *args], cwd=REPO, env=env, stdout=log, stderr=log, start_new_session=True
    )


def restore(path: Path, saved: bytes | None) -> None:
    if saved is None:
        path.unlink(missing_ok=True)
    else:
        path.write_bytes(saved)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if check():
                return
        time.sleep(0.5)
    raise SystemExit(f"gave up waiting for {what}")


def seed(creds: dict[str, Any]) -> None:
    """The MIG node, and finished runs over the last ten days for the usage report."""
    import django

    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.utils import timezone

    from queue_service.clusters.models import Cluster
    from queue_service.jobs.dispatch import sync_cluster
    from queue_service.jobs.models import Job, JobEvent, JobRun
    from queue_service.jobs.services import submit_job

    cluster = Cluster.objects.get(name="local")
    nodes = [n for n in cluster.settings["nodes"] if n["name"] != MIG_NODE["name"]]
    cluster.settings = {**cluster.settings, "nodes": [*nodes, MIG_NODE]}
    cluster.save()
    sync_cluster(cluster.pk)
    users = {u.username: u for u in get_user_model().objects.all()}
    today = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    for day in range(10, 0, -1):
        for who, gpus, start_h, hours in [
            ("alice", 4, 1 + day % 3, 3 + (day * 5) % 7),
            ("bob", 8, 9, 2 + (day * 3) % 5),
            ("alice", 2, 14, 1 + day % 4),
            ("carol", 4, 6, 4 + day % 3),
        ]:
            if (day + gpus) % 5 == 0:
                continue  # not every run every day
            start = today - timedelta(days=day, hours=-start_h)
            end = start + timedelta(hours=hours)
            with transaction.atomic():  # the worker never sees it pending
                job = submit_job(
                    users[who],
                    {"name": f"nightly-{who}-{start:%m%d}", "command": "python train.py",
                     "gpus_per_node": gpus},
                ).job  # fmt: skip
                JobEvent.objects.filter(job=job).update(at=start - timedelta(minutes=5))
                for to_state, when in (("running", start), ("succeeded", end)):
                    event = JobEvent.objects.create(job=job, to_state=to_state)
                    JobEvent.objects.filter(pk=event.pk).update(at=when)
                JobRun.objects.create(
                    job=job, attempt=1, team_id=job.team_id, user_id=job.user_id, gpus=gpus,
                    gpu_model="A100-SXM4-80GB", started_at=start, ended_at=end,
                    ended_by="succeeded",
                )  # fmt: skip
                Job.objects.filter(pk=job.pk).update(
                    state="succeeded", exit_code=0, started_at=start, finished_at=end,
                    submitted_at=start - timedelta(minutes=5), gpu_model="A100-SXM4-80GB",
                    reason={},
                )  # fmt: skip


def submit_all(base: str, creds: dict[str, Any]) -> None:
    for who, spec in JOBS:
        response = httpx.post(
            f"{base}/api/v1/jobs/",
            json=spec,
            headers={"Authorization": f"Bearer {creds[who]['token']}"},
        )
        response.raise_for_status()
        time.sleep(1.2)  # one scheduling cycle apart, as people would submit

    def settled() -> bool:
        from queue_service.jobs.models import Job

        states = list(Job.objects.filter(name__in=[s["name"] for _, s in JOBS],
            array__isnull=True).values_list("state", flat=True))  # fmt: skip
        return states.count("running") >= 4 and "queued" not in states

    wait_until(settled, "the demo jobs to start")
    time.sleep(12)  # some output in the training log


def shoot(base: str, creds: dict[str, Any], out: Path) -> None:
    from playwright.sync_api import sync_playwright

    from queue_service.jobs.models import Job

    job = Job.objects.get(name="resnet50-imagenet")
    task = Job.objects.get(name="eval-shards", array_index=0)
    pages = [
        ("dashboard", "/", DESKTOP, "light", None),
        ("queue", "/queue/", DESKTOP, "light", None),
        ("job", f"/jobs/{job.pk}/", DESKTOP, "light", None),
        ("job-array", f"/jobs/{task.pk}/", DESKTOP, "light", None),
        ("clusters", "/clusters/", DESKTOP, "light", None),
        ("team-admin", "/teams/vision/", DESKTOP, "light", None),
        ("submit", "/submit/", DESKTOP, "light", fill_submit_form),
        ("dashboard-phone", "/", PHONE, "light", None),
        ("job-dark", f"/jobs/{job.pk}/", DESKTOP, "dark", None),
    ]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for name, path, viewport, scheme, prepare in pages:
            context = browser.new_context(
                viewport=viewport, base_url=base, color_scheme=scheme, device_scale_factor=1
            )
            page = context.new_page()
            page.goto("/login/")
            page.fill("#id_username", "alice")
            page.fill("#id_password", creds["alice"]["password"])
            page.click("button[type=submit]")
            page.wait_for_url("**/")
            page.goto(path)
            page.wait_for_load_state("networkidle")
            if prepare is not None:
                prepare(page)
            page.wait_for_timeout(1500)  # the log tail's first polls
            page.screenshot(path=str(out / f"{name}.png"), full_page=True)
            context.close()
        browser.close()


def fill_submit_form(page: Any) -> None:
    """A job too big to start now, so the preview says why it would wait."""
    page.fill("#f-name", "llama-70b-pretrain")
    page.fill("#f-command", "torchrun --nproc-per-node 8 pretrain.py --config 70b.yaml")
    page.fill("#f-nodes", "2")
    page.fill("#f-gpus_per_node", "8")
    page.fill("#f-time_limit", "12h")
    page.check("#f-notify-end")
    page.check("#f-notify-fail")
    page.locator("#preview [data-verdict]").wait_for()


def stop_jobs() -> None:
    """Stop the jobs' processes through the backend (the worker is about to go)."""
    from django.apps import apps

    if not apps.ready:
        return
    from queue_service.jobs.dispatch import backend_for
    from queue_service.jobs.models import Job

    for job in Job.objects.exclude(external_id="").select_related("cluster"):
        with contextlib.suppress(Exception):
            backend_for(job.cluster).cancel(job.external_id, grace_s=0)


if __name__ == "__main__":
    main()
