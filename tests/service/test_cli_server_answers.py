"""`gpuq` against a server whose answer is JSON, but not what gpuq expects.

The CLI promises exit status 1 and a message for a bad server answer (it already says so for
an answer that is not JSON at all: "is GPUQ_URL a gpuq service?"). A JSON answer of another
shape (another JSON service behind GPUQ_URL, a gateway's own 401 body) must not end in a
Python traceback either."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from queue_service.cli import main
from tests.service.test_cli import serving

JOB = "00000000-0000-0000-0000-000000000001"


@contextlib.contextmanager
def json_server(status: int, body: bytes) -> Iterator[str]:
    """Answers every request with `status` and the JSON `body`."""

    class Handler(BaseHTTPRequestHandler):
        def answer(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PATCH = answer

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        yield url


def run(url: str, *argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(
                list(argv),
                environ={"GPUQ_URL": url, "GPUQ_TOKEN": "review-token-123"},
                out=io.StringIO(),
            )
        except SystemExit as exc:
            code = int(exc.code or 0)
        except Exception as exc:  # what the user sees as a traceback
            pytest.fail(f"gpuq raised {type(exc).__name__}: {exc!r} instead of a message")
    return code, err.getvalue()


@pytest.mark.parametrize("body", [b"{}", b"[]"], ids=["empty-object", "empty-list"])
def test_a_401_whose_json_body_says_nothing_is_a_message_not_a_traceback(body: bytes) -> None:
    # _http_error: `_flatten(body)[0]` on a body that flattens to no line.
    with json_server(401, body) as url:
        code, err = run(url, "ls")
    assert code == 1
    assert "not signed in" in err or "401" in err
    assert "review-token-123" not in err


LISTING_WITH_A_BAD_TIME = json.dumps(
    {
        "results": [
            {
                "id": JOB,
                "name": "n",
                "team": "t",
                "user": "u",
                "state": "pending",
                "submitted_at": "yesterday",
                "spec": {},
            }
        ],
        "next": None,
    }
).encode()


@pytest.mark.parametrize(
    ("argv", "body"),
    [
        (["ls"], b'{"status": "ok"}'),
        (["show", JOB], b'{"detail": "ok"}'),
        (["cancel", JOB], b'{"status": "ok"}'),
        (["me"], b"[]"),
        (["ls"], LISTING_WITH_A_BAD_TIME),
        (["ls"], b"[" * 100_000 + b"]" * 100_000),
    ],
    ids=["ls", "show", "cancel", "me", "ls-a-time-that-is-not-one", "ls-json-nested-too-deep"],
)
def test_a_json_answer_of_another_shape_is_a_message_not_a_traceback(
    argv: list[str], body: bytes
) -> None:
    # A time that is not one was fromisoformat's ValueError, and JSON nested too deep json's
    # RecursionError: both were tracebacks.
    with json_server(200, body) as url:
        code, err = run(url, *argv)
    assert code == 1
    assert err.startswith("gpuq: ")
