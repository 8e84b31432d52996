"""`gpuq cancel --mine --name "$PREFIX"` with PREFIX unset must not cancel every job of yours:
an empty value given to a filter of `cancel`, `suspend`, `resume` or `update` is a usage
error (exit 2), as scancel refuses `-u ''`. It was dropped as "no filter", widening the
selection to all the other filters match. (`gpuq ls`, which changes nothing, still takes an
empty value as no filter, as the API does.)"""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.conftest import spec
from tests.service.test_cli import Gpuq, gpuq  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    "argv",
    [
        ("cancel", "--mine", "--name", ""),
        ("cancel", "--mine", "--team", " "),
        ("cancel", "--mine", "--state", ","),
        ("cancel", "--mine", "--name", "one", "--name", ""),
        ("cancel", "--mine", "--user", ""),
        ("cancel", "--mine", "--cluster", ""),
        ("cancel", "--mine", "--priority", ""),
        ("suspend", "--mine", "--name", ""),
        ("update", "--mine", "--team", "", "--priority", "high"),
    ],
)
def test_an_empty_filter_value_is_a_usage_error_and_acts_on_nothing(
    gpuq: Gpuq, people: dict[str, Any], argv: tuple[str, ...]
) -> None:
    job = submit_job(people["alice"], spec(name="one")).job

    result = gpuq("alice", *argv)

    assert (result.code, result.out) == (2, "")
    flag = argv[argv.index("") - 1] if "" in argv else argv[-2]
    assert f"{flag}: an empty value selects no job" in result.err, result.err
    job.refresh_from_db()
    assert (job.state, job.priority_class.name) == (Job.State.PENDING, "normal")


def test_ls_takes_an_empty_filter_value_as_no_filter(gpuq: Gpuq, people: dict[str, Any]) -> None:
    submit_job(people["alice"], spec(name="one"))

    result = gpuq("alice", "ls", "--name", "", "--state", "")

    assert result.code == 0, result.err
    assert len(result.out.splitlines()) == 2
