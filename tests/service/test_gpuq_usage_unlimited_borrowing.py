"""`gpuq usage` shows a quota's borrowing limit as the API gives it, and null (no limit:
the Quota model, scheduler/types.py) as "unlimited", as the UI's quota bar says "borrowing
unlimited" ("none" would read as "may borrow nothing")."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import pytest

from queue_service.cli import main
from queue_service.tenancy.models import Quota
from queue_service.tenancy.services import create_token


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("limit", "shown"), [(None, "unlimited"), (0, "0"), (2.5, "2.5")])
def test_gpuq_usage_shows_the_borrowing_limit_and_null_as_unlimited(
    live_server: Any, people: Any, limit: float | None, shown: str
) -> None:
    Quota.objects.filter(team__slug="vision").update(borrowing_limit_gpus=limit)
    _, key = create_token(people["dana"], "cli")
    out = io.StringIO()
    with contextlib.redirect_stderr(io.StringIO()):
        code = main(
            ["usage", "vision"], environ={"GPUQ_URL": live_server.url, "GPUQ_TOKEN": key}, out=out
        )

    assert code == 0
    row = next(line for line in out.getvalue().splitlines() if line.startswith("SIM-A100"))
    assert row.split()[3] == shown, out.getvalue()
