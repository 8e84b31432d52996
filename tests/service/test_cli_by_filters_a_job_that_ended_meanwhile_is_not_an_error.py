"""`gpuq cancel --array ID` (and suspend, resume, by any filters) lists the jobs, then acts on
each: one that ended between the two is reported as ended already, and is no failure of the
command (as scancel of an array is quiet about its finished tasks). A job named by its id
that has ended is still refused: the user asked for that one."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

import contextlib
import http.client
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from django.db import connection

from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, submit_job
from tests.conftest import spec
from tests.service.test_cli import Gpuq, gpuq, serving  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State


@contextlib.contextmanager
def ending_after_the_list(upstream: str, end: Callable[[], None]) -> Iterator[str]:
    """A proxy in front of the live server that runs `end` once the first listing has been
    answered, before the command reads that answer: a job then ends between the list and
    the acts."""
    done = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            target = http.client.HTTPConnection(urllib.parse.urlsplit(upstream).netloc, timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            target.request(self.command, self.path, body=body or None, headers=headers)
            answer = target.getresponse()
            data = answer.read()
            if (
                self.command == "GET"
                and self.path.startswith("/api/v1/jobs/?")
                and not done.is_set()
            ):
                try:
                    end()
                finally:
                    connection.close()  # this thread's own
                    done.set()
            self.send_response(answer.status)
            for k, v in answer.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = forward

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        yield url
    assert done.is_set()


@pytest.mark.parametrize("verb", ["cancel", "suspend"])
def test_an_arrays_task_that_ended_between_the_list_and_the_act_is_said_to_have_ended(
    gpuq: Gpuq, people: Any, live_server: Any, verb: str
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-2")).job
    tasks = list(Job.objects.filter(array_id=first.array_id).order_by("array_index"))
    gone = tasks[1]

    def end() -> None:
        cancel_job(people["dana"], Job.objects.get(pk=gone.pk))  # vision's admin

    with ending_after_the_list(live_server.url, end) as url:
        result = gpuq("alice", verb, "--array", str(first.array_id), url=url)

    assert result.code == 0, result.err
    assert result.err == ""
    done = "cancelled" if verb == "cancel" else "suspended"
    assert sorted(result.out.splitlines()) == sorted(
        [f"{t.pk}  {done}" for t in tasks if t.pk != gone.pk]
        + [f"{gone.pk}  cancelled (it had ended already)"]
    )


def test_a_job_named_by_its_id_that_ended_is_still_refused(gpuq: Gpuq, people: Any) -> None:
    job = submit_job(people["alice"], spec(name="one")).job
    cancel_job(people["alice"], job)

    result = gpuq("alice", "cancel", str(job.pk))

    assert result.code == 1
    assert "409" in result.err and "the job already ended" in result.err
