"""The GPU maps colour each GPU by the team holding it. What the colours say must also be
said in words: to a screen reader (the drawing's name says who holds how many; a drawing
that holds links to jobs is a group of named links, not an image, whose children ARIA makes
presentational, so that a keyboard reached links a screen reader could not name: axe-core's
"nested-interactive"), and on the dashboard, whose small map has no labels in its cells, by a
key naming the teams' colours, as the clusters page has."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from django.test import Client

from frontend.charts import node_map, team_colour
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import run_cycle
from tests.conftest import spec

SVG = "{http://www.w3.org/2000/svg}"


def gpu(i: int, team: str | None = None, job: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"gpu": i, "team": team, "job": job, **extra}


def test_a_map_with_links_to_jobs_is_a_group_of_named_links() -> None:
    svg = ET.fromstring(  # noqa: S314 - our own output
        node_map("n1", "up", [gpu(0, "vision", "j1"), gpu(1, "language"), gpu(2)], 8)
    )

    assert svg.get("role") == "group"
    (link,) = svg.iter(f"{SVG}a")
    assert link.get("href") == "/jobs/j1/"
    assert link.get("aria-label") == "GPU 0: a job of vision"


def test_a_map_without_links_is_one_image() -> None:
    svg = ET.fromstring(node_map("n1", "up", [gpu(0, "language"), gpu(1)], 8))  # noqa: S314
    assert svg.get("role") == "img"
    assert not list(svg.iter(f"{SVG}a"))


def test_the_maps_name_says_who_holds_how_many_gpus() -> None:
    mig = [
        {"profile": "1g.10gb", "start": 0, "size": 1, "team": "vision", "job": None},
        {"profile": "1g.10gb", "start": 1, "size": 1, "team": None, "job": None},
    ]
    layout = [gpu(0, "vision"), gpu(1, "language"), gpu(2, "vision"), gpu(3), gpu(4, mig=mig)]
    svg = ET.fromstring(node_map("n1", "up", layout, 8))  # noqa: S314

    assert svg.get("aria-label") == (
        "node n1 (up): 5 GPUs, 3 whole GPUs in use (vision 2, language 1);"
        " MIG slices in use: vision 1"
    )


def test_the_dashboards_map_names_the_colour_of_each_team_holding_gpus(
    people: Any, local_cluster: Any
) -> None:
    submit_job(people["alice"], spec(name="mine", gpus_per_node=2))
    submit_job(people["charlie"], spec(name="theirs", gpus_per_node=2))
    run_cycle()
    client = Client()
    client.force_login(people["alice"])

    page = client.get("/").content.decode()

    card = page[page.index('id="map-h"') :]
    card = card[: card.index("</section>")]
    key = re.findall(r'<span class="chip" style="--team: ([^"]+)">([^<]+)</span>', card)
    assert key == [(team_colour("language"), "language"), (team_colour("vision"), "vision")]
    assert "free" in re.sub(r"<[^>]+>", "", card)
