"""The queue's Team and Cluster filters are menus of the viewer's teams and the clusters there
are. A URL naming another (a bookmark from a team one has left, a cluster since removed)
filtered by it while the menu, having no such entry, read "all my teams" or "any": the page
said "0 jobs. Nothing is waiting with these filters" beside the viewer's own waiting jobs.
Such a filter is not applied, as an unknown state is not: the menus say what is shown."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from queue_service.jobs.services import submit_job
from tests.conftest import spec


@pytest.mark.parametrize("path", ["/queue/", "/live/queue/"])
@pytest.mark.parametrize(
    "query",
    [
        "team=vision",  # a team charlie is not in
        "cluster=gone",  # no such cluster
        "team=vision&cluster=gone&state=pending",
    ],
)
def test_a_filter_not_among_the_menus_choices_is_not_applied(
    people: Any, path: str, query: str
) -> None:
    job = submit_job(people["charlie"], spec(name="charlies-own")).job
    charlie = Client()
    charlie.force_login(people["charlie"])

    page = charlie.get(f"{path}?{query}", headers={"HX-Request": "true"}).content.decode()

    assert str(job.pk) in page
    assert "0 jobs" not in page
