"""A pytest plugin (loaded with -p from pyproject) that sets the test environment's defaults
before Django reads its settings: tests run against PostgreSQL and Redis on 127.0.0.1.

It also takes a machine-wide lock for the run: the labs are one per machine (PostgreSQL's
test database, Redis database 15, which a test flushes, and the Slurm lab's queue, which a
fixture empties with `scancel -u`), so two runs at once, say in two checkouts, would break
each other's tests. The second run waits for the first."""

from __future__ import annotations

import fcntl
import os
import sys
import tempfile
from typing import Any

os.environ.setdefault("SECRET_KEY", "test-only-secret-key")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpuq")
os.environ.setdefault("GPUQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")

LOCK_PATH = os.environ.get("GPUQ_TEST_LOCK", os.path.join(tempfile.gettempdir(), "gpuq-tests.lock"))
_held: list[int] = []


def pytest_configure(config: Any) -> None:
    # O_NOFOLLOW: a symlink planted at the path cannot point the lock at another file.
    lock = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.stderr.write(f"gpuq: another test run holds the labs ({LOCK_PATH}); waiting for it\n")
        fcntl.flock(lock, fcntl.LOCK_EX)
    _held.append(lock)  # held until the process exits
