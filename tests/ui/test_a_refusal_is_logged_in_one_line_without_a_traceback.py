"""A page refused (403) is logged as Django logs any 4xx: one warning line. Django adds the
PermissionDenied's traceback, which is no fault of the code: a teammate's click on a button
they may not use filled the log with a stack each time."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from queue_service.jobs.services import submit_job
from tests.conftest import spec
from tests.ui.test_views import client_of

pytestmark = pytest.mark.django_db


def test_a_403_page_is_logged_as_one_warning_without_a_traceback(
    people: Any, caplog: pytest.LogCaptureFixture
) -> None:
    job = submit_job(people["alice"], spec(name="alices")).job

    with caplog.at_level(logging.WARNING, logger="django.request"):
        refused = client_of(people["bob"]).post(f"/jobs/{job.pk}/update/", {"priority": "high"})

    assert refused.status_code == 403
    logged = [r for r in caplog.records if r.name == "django.request"]
    assert [r.getMessage() for r in logged] == [
        f"Forbidden (Permission denied): /jobs/{job.pk}/update/"
    ]
    assert logged[0].exc_info is None and logged[0].levelno == logging.WARNING
