"""The web server as production runs it (docker-compose.yml's `web`, the Dockerfile's CMD):
a log download that takes longer than gunicorn's worker timeout is sent whole. A sync worker
does not tell gunicorn's arbiter it is alive while it streams, so one that streams for over
30 s is killed mid-answer (the file stops short, without the "download incomplete" line
docs/ui.md promises)."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from django.conf import settings
from django.db import connection
from django.test import Client

from queue_service.jobs.services import submit_job
from tests.conftest import spec
from tests.service.test_cli_follow_attempt import run_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def compose_web_command() -> list[str]:
    """docker-compose.yml's `web` server: the gunicorn command after the migration."""
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    shell = shlex.split(compose["services"]["web"]["command"])
    assert shell[:2] == ["sh", "-c"]
    (server,) = [shlex.split(part) for part in shell[2].split("&&") if "gunicorn" in part]
    return server


def dockerfile_command() -> list[str]:
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    (cmd,) = re.findall(r"^CMD (.*)$", text, re.M)
    command: list[str] = json.loads(cmd)
    return command


def test_the_image_and_the_compose_file_run_the_same_web_server() -> None:
    assert compose_web_command() == dockerfile_command()


def test_the_production_web_server_sends_a_large_log_download_whole(
    people: dict[str, Any], local_cluster: Any, tmp_path: Path
) -> None:
    job = submit_job(
        people["alice"],
        spec(
            name="chatty",
            command=[
                "/bin/sh",
                "-c",
                "yes 'step 12345 loss 0.1234 lr 0.0001' | head -c 60000000; echo done",
            ],
        ),
    ).job
    run_until(str(job.pk), "succeeded")
    client = Client()
    client.force_login(people["alice"])
    cookie = client.cookies["sessionid"].value
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    db = connection.settings_dict
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "SECRET_KEY": settings.SECRET_KEY,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
    }
    command = compose_web_command()
    assert command[0] == "gunicorn"
    command[0] = str(Path(sys.executable).parent / "gunicorn")
    command[command.index("--bind") + 1] = f"127.0.0.1:{port}"
    server = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(base + "/login/", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "gunicorn did not start"
                time.sleep(0.2)
        got, error = bytearray(), None
        try:
            with httpx.stream(
                "GET",
                f"{base}/jobs/{job.pk}/log/download/",
                cookies={"sessionid": cookie},
                timeout=60,
            ) as answer:
                assert answer.status_code == 200
                for piece in answer.iter_raw(65536):  # a reader at about 1.3 MB/s: ~45 s
                    got += piece
                    time.sleep(0.05)
        except httpx.TransportError as exc:
            error = exc
        assert error is None, f"the download was cut after {len(got):,} bytes: {error}"
        assert len(got) == 60_000_005 and got.endswith(b"done\n")
    finally:
        server.terminate()
        server.wait(timeout=30)
