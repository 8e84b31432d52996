"""A pytest plugin (loaded with -p from pyproject) that sets the test environment's defaults
before Django reads its settings: tests run against PostgreSQL and Redis on 127.0.0.1."""

from __future__ import annotations

import os

os.environ.setdefault("SECRET_KEY", "test-only-secret-key")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpuq")
os.environ.setdefault("GPUQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
