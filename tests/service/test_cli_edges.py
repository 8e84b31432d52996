"""The `gpuq` command at its edges, against the live test server as tests/service/test_cli.py
runs it: `logs -f` follows a job (not one attempt's log) until the job ends; an answer cut
short, a port that speaks no HTTP, a token a header cannot carry and a terminal that is not
UTF-8 each get a message and an exit status, never a traceback."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from queue_service.cli import main
from queue_service.jobs.models import Job
from queue_service.jobs.services import resume_job, submit_job, suspend_job
from queue_service.tenancy.services import create_token
from tests.conftest import spec
from tests.service.test_cli import (  # noqa: F401
    Gpuq,
    Run,
    gpuq,
    job_file,
    losing_proxy,
    serving,
    submitted_id,
)

pytestmark = pytest.mark.django_db(transaction=True)

GPUQ = Path(sys.executable).parent / "gpuq"
# The command run as a process imports this checkout's queue_service.cli.
SOURCE = str(Path(__file__).resolve().parents[2])


def calm(gpuq: Gpuq, *argv: str, url: str | None = None) -> Run:
    """`gpuq ARGS...` that must end with an exit status and a message, not an exception."""
    try:
        return gpuq(*argv, url=url)
    except Exception as exc:  # what the user would see as a traceback
        pytest.fail(f"gpuq raised {type(exc).__name__}: {exc!r} instead of saying what failed")


def wait_for(what: str, check: Any, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def first_line(proc: Any) -> bytes:
    """The follower's first line of output, once it has printed it (30 s at most)."""
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    assert ready, "`gpuq logs -f` printed nothing in 30 s"
    line: bytes = proc.stdout.readline()
    return line


def state_of(job_id: str) -> str:
    return str(Job.objects.get(pk=job_id).state)


@contextlib.contextmanager
def following(live_server: Any, people: dict[str, Any], job_id: str) -> Iterator[Any]:
    """`gpuq logs -f JOB` as the user runs it: its own process, killed at the end if it is
    still running."""
    _, token = create_token(people["alice"], "follow")
    env = {
        "GPUQ_URL": live_server.url,
        "GPUQ_TOKEN": token,
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": SOURCE,
    }
    proc = subprocess.Popen(
        [GPUQ, "logs", "-f", "--interval", "0.3", job_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


# -- `gpuq logs -f` ends with the job, not with one attempt's log -------------------------


def test_logs_follow_goes_on_through_a_suspend_and_resume_until_the_job_ends(
    gpuq: Gpuq,
    job_file: Any,
    job_loop: Any,
    live_server: Any,
    people: dict[str, Any],
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran-once"
    job_id = submitted_id(
        gpuq(
            "alice",
            "submit",
            job_file(
                f'name: twice\ncommand: "if [ -e {marker} ]; then echo second; else'
                f' touch {marker}; echo first; sleep 60; fi"\n'
            ),
        )
    )
    wait_for("the first attempt to run", lambda: marker.exists() and state_of(job_id) == "running")

    with following(live_server, people, job_id) as follower:
        first = first_line(follower)  # it has read "first" and waits for more
        suspend_job(people["alice"], Job.objects.get(pk=job_id))
        wait_for("the job to be suspended", lambda: state_of(job_id) == "suspended")
        time.sleep(2)
        # `logs -f`: "until the job ends". A suspended job has not ended.
        assert follower.poll() is None, (
            f"`gpuq logs -f` stopped (exit {follower.returncode}) while the job is suspended,"
            f" not ended: {first + follower.stdout.read()!r}"
        )
        resume_job(people["alice"], Job.objects.get(pk=job_id))
        wait_for("the second attempt to end", lambda: state_of(job_id) == "succeeded")
        out, err = follower.communicate(timeout=30)

    assert follower.returncode == 0, err
    # The second attempt's output from its start, not from the first attempt's offset.
    assert first + out == b"first\nsecond\n"


def test_logs_follow_of_a_job_that_is_lost_ends_when_the_job_does(
    gpuq: Gpuq,
    job_file: Any,
    job_loop: Any,
    live_server: Any,
    people: dict[str, Any],
    tmp_path: Path,
) -> None:
    job_id = submitted_id(
        gpuq("alice", "submit", job_file('name: doomed\ncommand: "echo started; sleep 60"\n'))
    )
    wait_for("the job to run", lambda: state_of(job_id) == "running")
    job = Job.objects.get(pk=job_id)
    job_dir = tmp_path / "jobs" / job.external_id
    wait_for(
        "its output", lambda: (job_dir / "stdout").exists() and (job_dir / "stdout").stat().st_size
    )

    with following(live_server, people, job_id) as follower:
        first = first_line(follower)
        # The machine "restarts": the supervisor and the job die without a result.json.
        os.kill(int((job_dir / "supervisor.pid").read_text()), signal.SIGKILL)
        for pid in json.loads((job_dir / "started.json").read_text())["pids"]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        wait_for("the job to be lost", lambda: state_of(job_id) == "lost")
        try:
            out, _ = follower.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            pytest.fail("`gpuq logs -f` still follows a job that ended (lost) 15 s ago")

    assert first + out == b"started\n"


# -- an answer cut short, or a server that does not speak HTTP -----------------------------


def test_a_submit_whose_answer_is_cut_short_is_reported_or_sent_again_not_a_traceback(
    gpuq: Gpuq, job_file: Any, live_server: Any
) -> None:
    with losing_proxy(live_server.url, cut_short=True) as url:  # it checks the POST was cut
        result = calm(gpuq, "alice", "submit", job_file("name: once\ncommand: [x]\n"), url=url)
    # The POST carries an Idempotency-Key: sent again, it returns the job the first one made.
    assert result.code == 0, result.err
    assert result.out.split() == [str(Job.objects.get().pk), "once", "pending"]


@contextlib.contextmanager
def not_http() -> Iterator[str]:
    """A port where something other than HTTP answers (sshd, as a mistyped GPUQ_URL finds)."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
                with contextlib.suppress(OSError):
                    conn.recv(65536)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def test_a_url_where_no_http_server_answers_is_a_clear_error(gpuq: Gpuq) -> None:
    with not_http() as url:
        result = calm(gpuq, "alice", "ls", url=url)
    assert result.code == 1
    assert result.err.startswith(f"gpuq: cannot reach {url}/api/v1/: ")


# -- a token with a character a header cannot carry ---------------------------------------


@pytest.mark.parametrize(
    ("mangle", "said"),
    [
        # A token file saved with Windows line ends, read with $(cat): the CR is dropped.
        pytest.param(lambda t: t + "\r", "", id="CRLF-file-read-with-$(cat)"),
        pytest.param(
            lambda t: f"\u201c{t}\u201d",
            "the API token holds a character a token cannot have",
            id="pasted-with-smart-quotes",
        ),
    ],
)
def test_a_token_a_header_cannot_carry_is_told_without_a_traceback_or_the_token(
    live_server: Any, people: dict[str, Any], mangle: Any, said: str
) -> None:
    _, token = create_token(people["alice"], "cli")
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            code = main(
                ["ls"],
                environ={"GPUQ_URL": live_server.url, "GPUQ_TOKEN": mangle(token)},
                out=io.StringIO(),
            )
        except SystemExit as exc:  # a usage error is a fine answer
            code = int(exc.code or 0)
        except Exception as exc:  # what the user sees as a traceback
            pytest.fail(f"a traceback: {type(exc).__name__}: {exc}")
    assert (code, said in stderr.getvalue()) == ((2, True) if said else (0, True))
    assert token not in stderr.getvalue()


# -- a terminal (or a redirect) that is not UTF-8 -----------------------------------------


def test_ls_on_a_stdout_that_is_not_utf8_shows_every_job_instead_of_a_traceback(
    live_server: Any, people: dict[str, Any]
) -> None:
    plain = submit_job(people["alice"], spec(name="plain")).job
    chinese = submit_job(people["bob"], spec(name="训练-🚀")).job
    _, token = create_token(people["alice"], "latin1")
    # What a latin-1 locale (LANG=de_DE.ISO-8859-1), or Windows' cp1252 when the output is
    # redirected (`gpuq ls > jobs.txt`), gives Python's stdout: that encoding, errors strict.
    env = {
        "GPUQ_URL": live_server.url,
        "GPUQ_TOKEN": token,
        "PATH": "/usr/bin:/bin",
        "PYTHONIOENCODING": "iso-8859-1",
        "PYTHONPATH": SOURCE,
    }
    listed = subprocess.run([GPUQ, "ls"], capture_output=True, env=env, timeout=60)

    assert listed.returncode == 0, listed.stderr.decode()[-400:]
    ids = [line.split()[0] for line in listed.stdout.decode("latin-1").splitlines()[1:]]
    assert ids == [str(chinese.pk), str(plain.pk)]


# -- `-f` waits out a service or cluster that does not answer for a while ------------------


@contextlib.contextmanager
def failing_log_reads(
    upstream: str, failing: range, status: int, body: bytes
) -> Iterator[tuple[str, list[int]]]:
    """A proxy in front of the live server that answers the log reads numbered in `failing`
    (from 0) with `status` itself: the cluster not answering a read (gpuq's 503, or its 502
    when the cluster refused), or a gateway whose upstream is restarting (504, 502)."""
    reads: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if "/logs/" in self.path:
                reads.append(len(reads))
                if reads[-1] in failing:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
            target = http.client.HTTPConnection(urllib.parse.urlsplit(upstream).netloc, timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            target.request("GET", self.path, headers=headers)
            answer = target.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.getheader("Content-Type", ""))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        yield url, reads


CLUSTER_SILENT = b'{"detail": "the cluster did not answer: SSH to login:22 timed out after 60s"}'


@pytest.mark.parametrize(
    ("status", "body"),
    [
        pytest.param(503, CLUSTER_SILENT, id="503-the-cluster-did-not-answer"),
        pytest.param(504, b"<html>Gateway Timeout</html>", id="504-from-a-gateway"),
        # nginx's answer while the service behind it restarts: its page, not gpuq's JSON.
        pytest.param(502, b"<html>502 Bad Gateway</html>", id="502-from-a-proxy"),
    ],
)
def test_logs_follow_waits_out_a_log_read_that_fails_for_a_while(
    gpuq: Gpuq, job_file: Any, job_loop: Any, live_server: Any, status: int, body: bytes
) -> None:
    job_id = submitted_id(
        gpuq("alice", "submit", job_file('name: steady\ncommand: "echo one; sleep 5; echo two"\n'))
    )
    with failing_log_reads(live_server.url, range(1, 5), status, body) as (url, reads):
        result = calm(gpuq, "alice", "logs", "-f", "--interval", "0.2", job_id, url=url)
    assert len(reads) > 5, "the job ended before the failing reads were over"
    assert (result.code, result.out) == (0, "one\ntwo\n"), result.err
    # Said once for the outage, on stderr: stdout stays the job's own output.
    assert result.err.count("still following") == 1, result.err


def test_logs_follow_ends_at_once_when_the_cluster_refuses_the_read(
    gpuq: Gpuq, job_file: Any, job_loop: Any, live_server: Any
) -> None:
    # gpuq's own 502 (JSON): the cluster answered with an error, which waiting does not mend.
    job_id = submitted_id(gpuq("alice", "submit", job_file('name: long\ncommand: "sleep 30"\n')))
    refused = b'{"detail": "the cluster answered with an error: no such job"}'
    with failing_log_reads(live_server.url, range(10**6), 502, refused) as (url, reads):
        result = calm(gpuq, "alice", "logs", "-f", "--interval", "0.2", job_id, url=url)
    assert result.code == 1
    assert "no such job" in result.err.splitlines()[-1]
    assert "still following" not in result.err
    assert len(reads) == 1


def test_logs_follow_gives_up_on_a_cluster_that_stays_silent(
    gpuq: Gpuq, job_file: Any, job_loop: Any, live_server: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr("queue_service.cli.FOLLOW_PATIENCE_S", 1.0)
    job_id = submitted_id(gpuq("alice", "submit", job_file('name: long\ncommand: "sleep 30"\n')))
    with failing_log_reads(live_server.url, range(10**6), 503, CLUSTER_SILENT) as (url, _):
        started = time.monotonic()
        result = calm(gpuq, "alice", "logs", "-f", "--interval", "0.2", job_id, url=url)
    assert result.code == 1
    assert "the cluster did not answer" in result.err.splitlines()[-1]
    assert time.monotonic() - started < 10
