"""`logs/?attempt=N` past the job's attempts is a 400 that says how many it has had, in
words that agree with the number: "no attempts", "1 attempt", "2 attempts" (it said "1
attempts" and "0 attempts")."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.conftest import spec

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("attempts", "said"),
    [
        (0, "the job has had no attempts so far"),
        (1, "the job has had 1 attempt so far"),
        (2, "the job has had 2 attempts so far"),
    ],
)
def test_an_attempt_past_the_jobs_says_how_many_it_had(
    people: dict[str, Any], client_for: Any, attempts: int, said: str
) -> None:
    job = submit_job(people["alice"], spec(name="tried")).job
    # As the cycle and the sync leave it after that many attempts (the log is not read).
    Job.objects.filter(pk=job.pk).update(attempts=attempts)

    answer = client_for("bob").get(f"/api/v1/jobs/{job.pk}/logs/", {"attempt": attempts + 1})

    assert answer.status_code == 400
    assert answer.json() == {"attempt": [said]}
