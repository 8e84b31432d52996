"""The job page's durations exact, the usage chart for a sliver of use, a followed log that
starts over in the same attempt, and text boxes given back as typed; through Django's test
client."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client

from queue_service.backends.base import LogChunk
from queue_service.jobs import dispatch
from queue_service.jobs.models import Job, JobRun
from queue_service.jobs.services import submit_job
from tests.conftest import spec
from tests.ui.test_ui_edges import log_text, poll


def client_of(user: Any) -> Client:
    # A server error comes back as a 500 answer, as a browser sees it, not as an exception.
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


UNITS = {"d": 86400, "h": 3600, "min": 60, "m": 60, "s": 1}


def seconds_in(text: str) -> int:
    """The duration a shown text says ("90s", "1 min 30 s", "1 d 12 h 30 min"), in seconds."""
    found = re.findall(r"(\d+)\s*(d|h|min|m|s)\b", text)
    return sum(int(n) * UNITS[unit] for n, unit in found)


def fact(page: str, term: str) -> str:
    """The text of the job page's <dd> under <dt>term</dt>, tags stripped."""
    found = re.search(rf"<dt>{re.escape(term)}</dt>\s*<dd[^>]*>(.*?)</dd>", page, re.S)
    assert found, f"no {term!r} on the page"
    return html.unescape(re.sub(r"<[^>]+>", "", found[1])).strip()


# --- durations on the job page -----------------------------------------------------------------


@pytest.mark.parametrize(("time_limit", "seconds"), [("90s", 90), ("2190m", 131_400)])
def test_the_job_page_shows_the_time_limit_the_job_has_not_one_rounded_down(
    people: Any, time_limit: str, seconds: int
) -> None:
    # The "Time limit" fact goes through the `span` filter, made for "3 h ago"-style
    # approximations: 90 s is shown as "1 min" and 1 d 12 h 30 min as "1 d 12 h", so the page
    # tells the owner their job will be killed earlier than it will be.
    job = submit_job(people["alice"], spec(time_limit=time_limit)).job
    page = client_of(people["alice"]).get(f"/jobs/{job.pk}/").content.decode()

    shown = fact(page, "Time limit")
    assert seconds_in(shown) == seconds, shown


def test_the_job_page_shows_a_short_checkpoint_interval_as_a_duration_not_as_now(
    people: Any,
) -> None:
    # The checkpoint interval goes through `span` too, which says "now" for anything under 5
    # seconds: a job checkpointing every 4 s reads "every now".
    job = submit_job(
        people["alice"], spec(time_limit="1h", checkpoint={"dir": "/ckpt", "interval": "4s"})
    ).job
    page = client_of(people["alice"]).get(f"/jobs/{job.pk}/").content.decode()

    shown = fact(page, "Checkpoints")
    assert "now" not in shown and seconds_in(shown.partition("every")[2]) == 4, shown


# --- the usage chart ---------------------------------------------------------------------------


def test_a_usage_period_holding_only_a_sliver_of_mig_use_is_drawn_not_a_server_error(
    people: Any,
) -> None:
    # nice_ticks rounds its ticks to 10 decimals, so a day whose total is below ~5e-11
    # GPU-hours (here a MIG slice's 1/7 GPU for the 1 µs of a run past midnight) gets ticks
    # that are all 0, and usage_chart divides by the top tick: the team admin page is a 500.
    job = submit_job(people["alice"], spec()).job
    JobRun.objects.create(
        job=job,
        attempt=1,
        team_id=job.team_id,
        user_id=job.user_id,
        gpus=1 / 7,
        started_at=datetime(2025, 3, 1, 23, 0, tzinfo=UTC),
        ended_at=datetime(2025, 3, 2, 0, 0, 0, 1, tzinfo=UTC),
        ended_by="succeeded",
    )

    response = client_of(people["dana"]).get("/teams/vision/?from=2025-03-02&to=2025-03-02")

    assert response.status_code == 200
    assert 'data-user="alice"' in response.content.decode()


# --- the log tail ------------------------------------------------------------------------------


class RestartingLogs:
    """A backend whose job's log starts over in the same attempt, as a Kubernetes container
    restarted in its pod (or a gang Volcano recreates) does: each log is named by `source`
    (the API's `log_id`)."""

    def __init__(self) -> None:
        self.source, self.data = "pod-a/0", b"loading shards 0-7\n"

    def logs(
        self, external_id: str, offset: int = 0, limit: int = 65536, stream: str = "stdout"
    ) -> LogChunk:
        piece = self.data[offset : offset + limit]
        return LogChunk(piece, offset + len(piece), eof=False, source=self.source)


def test_a_followed_log_that_starts_over_in_the_same_attempt_is_shown_from_its_first_byte(
    people: Any, local_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # job_log ignores LogChunk.source: after a container restart the poller keeps its byte
    # offset into the old log and reads the new one from there, so the page silently drops
    # the new log's first bytes (the API's log_id exists for this; the CLI starts over at 0).
    backend = RestartingLogs()
    monkeypatch.setattr(dispatch, "backend_for", lambda cluster: backend)
    job = submit_job(people["alice"], spec(name="finetune")).job
    Job.objects.filter(pk=job.pk).update(
        state="running", cluster=local_cluster, external_id="gpuq/finetune-1", attempts=1
    )
    alice = client_of(people["alice"])
    first, url = poll(alice, f"/jobs/{job.pk}/log/?offset=0")
    assert log_text([first]) == "loading shards 0-7\n"

    # The container is OOM-killed and restarted in its pod: the same gpuq attempt, a new log.
    backend.source = "pod-a/1"
    backend.data = b"restarted: resuming from step 1200\nloading shards 0-7\nepoch 3\n"
    pieces = []
    for _ in range(2):  # the poller's next asks, as the browser follows them
        piece, url = poll(alice, url)
        pieces.append(piece)

    shown = log_text([first, *pieces])
    assert shown.startswith("loading shards 0-7\n"), shown
    assert shown.endswith(backend.data.decode()), shown


# --- a refused form shows back what was typed ---------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "box"),
    [
        # Pasted YAML with a blank first line and a field error on line 4.
        ({"mode": "yaml", "yaml": "\nname: x\ncommand: [echo]\nnodes: -1\n"}, "yaml"),
        # An environment box whose second line is not NAME=value ("line 2: expected ...").
        ({"name": "x", "command": "echo", "env": "\nNOT A PAIR"}, "env"),
    ],
)
def test_a_refused_form_gives_back_a_text_box_that_starts_with_a_blank_line_as_typed(
    people: Any, sent: dict[str, str], box: str
) -> None:
    # The textareas are written as <textarea>{{ text }}</textarea>; HTML drops a newline right
    # after the start tag (Django's own Textarea writes one there for this), so the box drawn
    # again loses the blank first line and every error's "line N" points one line too low.
    from tests.ui.test_views import posted

    response = client_of(people["alice"]).post("/submit/", sent)
    assert response.status_code == 400

    # What the browser's box holds (and sends back) after the page is drawn again.
    assert posted(response.content.decode())[box] == [sent[box]]
