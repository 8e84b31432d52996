"""A request whose URL is longer than the HTTP client sends (httpx2's MAX_URL_LENGTH, 65,536
characters of the URL or of any one part of it) is refused by the client before anything is
sent, with its own exception: the backend answers it as its other errors, a permanent
BackendError saying why, never an exception a caller does not expect (a view's 500, a
task's crash). Nothing the service sends comes near it today (the poll's selector goes in
4 KiB pieces): a name, a namespace or a selector that long is a bug or a bad id, and the
same request would be refused again. Against the fake API server, which sees no request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from conftest import NAMESPACE, FakeClock, make_backend
from k8s_fakeapi import FakeApiServer
from k8s_sim import Sim

from queue_service.backends.base import BackendError

LIMIT = 65536
LONG = "a" * (LIMIT + 1)
CALLS: list[tuple[str, Callable[[Any], Any]]] = [
    ("a log of a long name", lambda b: b.logs(f"{NAMESPACE}/job/{LONG}")),
    ("a stop of a long name", lambda b: b.cancel(f"{NAMESPACE}/vcjob/{LONG}", grace_s=5)),
    ("a poll of a long namespace", lambda b: b.poll([f"{LONG}/job/gpuq-1"])),
]


def test_the_limit_is_the_http_clients() -> None:
    from httpx2._urlparse import MAX_URL_LENGTH

    assert MAX_URL_LENGTH == LIMIT
    with pytest.raises(httpx2.InvalidURL, match="too long"):
        httpx2.Request("GET", f"http://127.0.0.1/{LONG}")


@pytest.mark.parametrize("call", [c for _, c in CALLS], ids=[name for name, _ in CALLS])
def test_a_request_whose_url_is_too_long_is_a_permanent_backend_error_saying_so(
    api: FakeApiServer, sim: Sim, clock: FakeClock, call: Callable[[Any], Any]
) -> None:
    b = make_backend(api, clock, workload="indexed")
    before = len(api.requests)

    with pytest.raises(BackendError) as raised:
        call(b)

    assert raised.value.permanent
    message = raised.value.message
    assert "the request's URL is too long for the HTTP client (65,536 characters" in message
    assert len(message) < 1000, "the name is not repeated whole"
    assert len(api.requests) == before, "nothing was sent"
    assert clock.sleeps == [], "not retried"
