"""`deploy/run-embedded` (`make run`) serves on 8000 unless GPUQ_PORT (or its argument) says
another port, and the links in its emails (GPUQ_PUBLIC_URL, unless given) follow the port.
Run with a stand-in for the venv's Python that records how it was started (and runs the
port check, `-c`, as the real one)."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_embedded(
    tmp_path: Path, *args: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    (tmp_path / "deploy").mkdir(exist_ok=True)
    shutil.copy(REPO / "deploy" / "run-embedded", tmp_path / "deploy" / "run-embedded")
    stub = tmp_path / ".venv" / "bin" / "python"
    stub.parent.mkdir(parents=True, exist_ok=True)
    log = tmp_path / "started"
    stub.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = -c ]; then exec {shlex.quote(sys.executable)} "$@"; fi\n'
        f'echo "$* GPUQ_PUBLIC_URL=$GPUQ_PUBLIC_URL" >> {shlex.quote(str(log))}\n'
        # The worker runs in the background and the script kills it when runserver returns:
        # runserver's stand-in waits (5 s at most) until the worker's has said how it started.
        'case "$*" in *runserver*) i=0;'
        f" until grep -q gpuq_worker {shlex.quote(str(log))} || [ $i -ge 100 ];"
        " do sleep 0.05; i=$((i+1)); done;; esac\n"
    )
    stub.chmod(0o755)
    base = {k: v for k, v in os.environ.items() if k not in ("GPUQ_PORT", "GPUQ_PUBLIC_URL")}
    result = subprocess.run(
        ["bash", str(tmp_path / "deploy" / "run-embedded"), *args],
        cwd=tmp_path,
        env={**base, "DATABASE_URL": "sqlite:///var/x.sqlite3", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result, log.read_text().splitlines() if log.exists() else []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("how", ["env", "argument"])
def test_run_embedded_serves_on_the_port_given_and_links_emails_to_it(
    tmp_path: Path, how: str
) -> None:
    port = str(free_port())
    if how == "env":
        result, started = run_embedded(tmp_path, GPUQ_PORT=port)
    else:
        result, started = run_embedded(tmp_path, port)

    assert result.returncode == 0, result.stderr
    url = f"http://127.0.0.1:{port}"
    assert f"manage.py runserver 127.0.0.1:{port} --noreload GPUQ_PUBLIC_URL={url}" in started
    assert f"manage.py gpuq_worker --interval 1 GPUQ_PUBLIC_URL={url}" in started
    assert f"gpuq is serving {url} (UI)" in result.stdout


def test_run_embedded_keeps_a_public_url_of_its_own(tmp_path: Path) -> None:
    port = str(free_port())
    result, started = run_embedded(
        tmp_path, GPUQ_PORT=port, GPUQ_PUBLIC_URL="https://gpuq.example.org"
    )
    assert result.returncode == 0, result.stderr
    assert (
        f"manage.py runserver 127.0.0.1:{port} --noreload GPUQ_PUBLIC_URL=https://gpuq.example.org"
        in started
    )


@pytest.mark.parametrize("port", ["0", "65536", "80a", ""])
def test_run_embedded_refuses_a_port_that_is_none(tmp_path: Path, port: str) -> None:
    result, started = run_embedded(tmp_path, GPUQ_PORT=port)
    assert result.returncode == 2
    assert f"GPUQ_PORT={port!r}" in result.stderr or "not a port" in result.stderr
    assert started == []


def test_run_embedded_on_a_port_in_use_says_so_and_starts_nothing(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result, started = run_embedded(tmp_path, GPUQ_PORT=port)
    assert result.returncode == 1
    assert f"127.0.0.1:{port} is already in use" in result.stderr
    assert started == []
