"""The job page keeps only the last ~1 MB of a log, so a finished job's long log is shown from
about 1 MiB before its end (from a line's start), where its backend can tell the log's length
without reading it (a file: local, Slurm): not caught up on from byte 0 in 256 KiB reads, one
request and one backend read (SFTP, a pod log) after another for every viewer (81 for 20 MiB,
~8,000 for 2 GiB). The page says so; the download has all of it."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.services import submit_job
from tests.conftest import spec
from tests.service.test_an_attempts_log_is_read_to_its_end_before_the_next import run_until
from tests.ui.test_ui_edges import client_of, log_text, poll

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_job_page_shows_the_end_of_a_large_finished_log_in_a_few_reads(
    people: dict[str, Any], local_cluster: Any
) -> None:
    job = submit_job(
        people["alice"],
        spec(
            name="chatty",
            command=["/bin/sh", "-c", "yes 'step loss 0.1234' | head -c 20971520; echo done"],
        ),
    ).job
    run_until(job.pk, "succeeded")
    alice = client_of(people["alice"])

    url, pieces = f"/jobs/{job.pk}/log/?stream=stdout&offset=0", []
    while url and len(pieces) < 200:
        piece, url = poll(alice, url)
        pieces.append(piece)

    shown = log_text(pieces)
    assert len(pieces) <= 5, f"{len(pieces)} reads to show the end of a 20 MiB log"
    # head -c cut the last line; the first shown is whole.
    assert shown.endswith("\nstep loss 0.12done\n") and shown.startswith("step loss 0.1234\n")
    assert 1 << 20 >= len(shown) > (1 << 20) - 20
    assert "Showing the end of a 20.0" in pieces[0] and 'hx-swap-oob="true"' in pieces[0]


def test_a_short_finished_log_is_shown_whole(people: dict[str, Any], local_cluster: Any) -> None:
    job = submit_job(
        people["alice"], spec(name="short", command=["/bin/sh", "-c", "seq 1 100000"])
    ).job
    run_until(job.pk, "succeeded")

    url, pieces = f"/jobs/{job.pk}/log/?stream=stdout&offset=0", []
    while url and len(pieces) < 20:
        piece, url = poll(client_of(people["alice"]), url)
        pieces.append(piece)

    assert log_text(pieces) == "".join(f"{n}\n" for n in range(1, 100001))
    assert "Showing the end" not in "".join(pieces)
