"""The `gpuq` command on odd input and odd answers: a usage error or a message, never a
traceback, and nothing a server echoes reaches the terminal raw. The command runs as
tests/service/test_cli.py runs it: main() in process, against pytest-django's live server
(or a stand-in server for odd answers)."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

import json
from typing import Any

import pytest

from queue_service.jobs.models import Job
from tests.service.test_cli import (  # noqa: F401
    Gpuq,
    gpuq,
    job_file,
    submitted_id,
)
from tests.service.test_cli_edges import calm
from tests.service.test_cli_server_answers import run

# -- --idempotency-key --------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_idempotency_key_with_a_line_break_is_a_usage_error_not_a_traceback(
    gpuq: Gpuq, job_file: Any
) -> None:
    # cmd_submit puts --idempotency-key in a header unchecked; http.client refuses a value
    # with a line break with a ValueError that main() does not catch: a traceback.
    result = calm(
        gpuq, "alice", "submit", "--idempotency-key", "run\n2", job_file("name: x\ncommand: [x]\n")
    )
    assert result.code == 2, result.err
    assert "idempotency" in result.err.lower()
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_an_idempotency_key_outside_latin1_is_sent_or_refused_not_a_traceback(
    gpuq: Gpuq, job_file: Any
) -> None:
    # A key such as "训练-1" (or one pasted with an en dash) cannot be encoded as latin-1 by
    # http.client: UnicodeEncodeError, uncaught, so the user gets a traceback.
    path = job_file("name: x\ncommand: [x]\n")
    result = calm(gpuq, "alice", "submit", "--idempotency-key", "训练-1", path)
    if result.code == 0:  # sent (encoded somehow): a repeat must return the same job
        again = calm(gpuq, "alice", "submit", "--idempotency-key", "训练-1", path)
        assert again.code == 0 and Job.objects.count() == 1
    else:
        assert result.code == 2, result.err
        assert "idempotency" in result.err.lower()
        assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_an_empty_idempotency_key_is_refused_not_replaced_by_a_random_one(
    gpuq: Gpuq, job_file: Any
) -> None:
    # `args.idempotency_key or f"gpuq-cli-{uuid4()}"`: `--idempotency-key "$KEY"` with KEY
    # unset silently gets a fresh key per run, so a script's retry submits the job twice
    # (the server refuses an empty key for exactly this reason; the CLI never sends it).
    path = job_file("name: x\ncommand: [x]\n")
    first = calm(gpuq, "alice", "submit", "--idempotency-key", "", path)
    calm(gpuq, "alice", "submit", "--idempotency-key", "", path)
    assert first.code in (1, 2), first.out
    assert "idempotency" in first.err.lower()
    assert Job.objects.count() == 0


# -- GPUQ_URL -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["http://gpuq..example.org", "https://.gpuq.example.org:8443"],
    ids=["double-dot", "lead-dot"],
)
def test_a_url_whose_host_has_an_empty_label_is_a_clear_error(url: str) -> None:
    # A typo such as gpuq..example.org made socket.getaddrinfo raise UnicodeError ("label
    # empty or too long"), which is not an OSError: Api.call let it through, a traceback.
    code, err = run(url, "ls")
    assert code == 2
    assert f"gpuq: error: GPUQ_URL has no valid host name: {url!r}" in err


# -- control characters in what the server echoes --------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_field_name_in_a_server_error_cannot_reach_the_terminal_raw(
    gpuq: Gpuq, job_file: Any
) -> None:
    # _flatten cleans each error message but prints the field path (the body's keys) raw;
    # the server names an unknown field of a job file as it was written, so a shared job
    # file's key "\x1b]0;...\x07" retitles the terminal (any escape sequence gets through).
    path = job_file(json.dumps({"name": "x", "command": ["true"], "\x1b]0;pwned\x07": 1}))
    result = calm(gpuq, "alice", "submit", path)
    assert result.code == 1
    assert "unknown field" in result.err
    assert not {"\x1b", "\x07"} & set(result.err), repr(result.err)
    assert r"\x1b]0;pwned\x07" in result.err


# -- filters ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_state_list_with_spaces_after_the_commas_filters_as_without(
    gpuq: Gpuq, job_file: Any
) -> None:
    # `--state "pending, suspended"` was sent as it was: a 400 naming ' suspended'.
    waiting = submitted_id(gpuq("alice", "submit", job_file("name: w\ncommand: [x]\n")))
    held = submitted_id(gpuq("alice", "submit", job_file("name: h\nhold: true\ncommand: [x]\n")))
    listed = calm(gpuq, "alice", "ls", "--state", " pending, suspended ,", "--json")
    assert listed.code == 0, listed.err
    assert sorted(j["id"] for j in json.loads(listed.out)) == sorted([waiting, held])
