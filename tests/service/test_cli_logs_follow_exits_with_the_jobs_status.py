"""`gpuq logs -f JOB` follows the job until it ends, then exits as `submit -f` does: with the
job's own status, and how it ended on stderr. Before, it exited 0 whatever the end, so
`gpuq logs -f $ID && next-step` went on after a job that failed."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

from typing import Any

import pytest

from tests.service.test_cli import Gpuq, gpuq, job_file, submitted_id  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("command", "stream", "code", "out", "end"),
    [
        ("echo going; exit 7", [], 7, "going\n", " ended failed: exit code 7\n"),
        ("echo going >&2; exit 3", ["--stderr"], 3, "going\n", " ended failed: exit code 3\n"),
        ("echo fine", [], 0, "fine\n", ""),
    ],
)
def test_logs_follow_exits_with_the_job_s_status(
    gpuq: Gpuq,
    job_file: Any,
    job_loop: Any,
    command: str,
    stream: list[str],
    code: int,
    out: str,
    end: str,
) -> None:
    job_id = submitted_id(gpuq("alice", "submit", job_file(f'name: j\ncommand: "{command}"\n')))

    followed = gpuq("alice", "logs", "-f", "--interval", "0.2", *stream, job_id)

    assert (followed.code, followed.out) == (code, out), followed.err
    assert followed.err == (f"gpuq: job {job_id}{end}" if end else "")
    # Without -f it reads what there is and says nothing of how the job ended.
    read = gpuq("alice", "logs", *stream, job_id)
    assert (read.code, read.out, read.err) == (0, out, "")
