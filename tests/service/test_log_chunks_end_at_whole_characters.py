"""The API's log chunks end at whole UTF-8 characters: `text` read chunk by chunk is the log's
text (a character cut by a chunk's end comes whole in the next), and `data_base64` holds the
same bytes, so `next_offset` counts them for every client alike (the CLI writes the bytes)."""

from __future__ import annotations

import base64
import sys
from typing import Any

import pytest

from queue_service.jobs.services import submit_job
from tests.conftest import spec
from tests.service.test_an_attempts_log_is_read_to_its_end_before_the_next import run_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_utf8_log_read_in_the_apis_default_chunks_has_no_replacement_characters(
    people: dict[str, Any], local_cluster: Any, client_for: Any
) -> None:
    """The default 65,536 bytes is no multiple of 3: each chunk of a log of euro signs ends
    inside one, which showed as U+FFFD at the end of one chunk and the start of the next."""
    printed = "€" * 50_000 + "\n"
    job = submit_job(
        people["alice"],
        spec(name="euros", command=[sys.executable, "-c", "print('\u20ac' * 50_000)"]),
    ).job
    run_until(job.pk, "succeeded")
    api = client_for("bob")

    offset, text, data = 0, "", b""
    for _ in range(10):
        chunk = api.get(f"/api/v1/jobs/{job.pk}/logs/", {"offset": offset}).json()
        text += chunk["text"]
        data += base64.b64decode(chunk["data_base64"])
        assert chunk["next_offset"] == offset + len(base64.b64decode(chunk["data_base64"]))
        if chunk["eof"]:
            break
        offset = chunk["next_offset"]

    assert "\N{REPLACEMENT CHARACTER}" not in text
    assert text == printed and data == printed.encode()


def test_a_limit_too_small_for_a_whole_character_still_reads_on(
    people: dict[str, Any], local_cluster: Any, client_for: Any
) -> None:
    job = submit_job(people["alice"], spec(name="euro", command=["printf", "\u20ac"])).job
    run_until(job.pk, "succeeded")

    chunks = [
        client_for("bob").get(f"/api/v1/jobs/{job.pk}/logs/", {"offset": o, "limit": 1}).json()
        for o in range(3)
    ]

    assert [c["next_offset"] for c in chunks] == [1, 2, 3]
    assert b"".join(base64.b64decode(c["data_base64"]) for c in chunks) == "€".encode()
    assert chunks[-1]["eof"] is True
