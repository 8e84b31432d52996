"""The web UI at the edges of valid data: a quota of one MIG slice saved through its form, a
1000-task array's rerun link, a log cut inside a character or continued by a new attempt, a
dashboard or timeline with more rows than it draws, and a download the cluster stops answering.
Each of these once lost or hid something; the tests say what the page must do instead."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from queue_service.backends import BackendError
from queue_service.backends.base import LogChunk
from queue_service.jobs.models import Job, JobEvent
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from queue_service.tenancy.services import set_quota
from tests.conftest import spec
from tests.ui.test_views import posted


def client_of(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def quota_form(page: str, model: str) -> dict[str, str]:
    """What the team page's form for its `model` quota sends, as one value per input."""
    sent = posted(page, f'<div class="quota-edit" data-model="{model}">')
    return {name: values[-1] for name, values in sent.items()}


def poll(client: Client, url: str) -> tuple[str, str]:
    """One ask of the log poller: the fragment, and the URL its poller asks next ("" at the
    end), as the browser follows it."""
    piece = client.get(url).content.decode()
    following = re.search(r'<div id="log-poller"[^>]* hx-get="([^"]+)"', piece)
    return piece, html.unescape(following[1]) if following else ""


def log_text(pieces: list[str]) -> str:
    """The text the page's output panel holds after these polls: what each appended."""
    return "".join(
        html.unescape(re.sub(r"<[^>]+>", "", m))
        for piece in pieces
        for m in re.findall(r'<div hx-swap-oob="beforeend:#log-text">(.*?)</div>', piece, re.S)
    )


# --- team admin: a quota's form sends back what it shows ------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("nominal_gpus", 1 / 7),  # one 1g slice of a 7-slice GPU
        ("nominal_gpus", 3 / 4),  # three slices of a 4-slice A30
        ("nominal_gpus", 12.0),
        ("borrowing_limit_gpus", 2 / 7),  # two slices of an idle 7-slice GPU
        ("lending_limit_gpus", 1e-5),  # "0" in two decimals
    ],
)
def test_saving_a_quota_form_unchanged_keeps_its_gpu_amounts_exactly(
    people: Any, field: str, value: float
) -> None:
    # Quotas are GPU amounts with fractions for MIG slices; site staff set them through the
    # API. Vision's team admin then changes only "Max running jobs" and saves the form as drawn.
    set_quota(
        people["staff"],
        people["alice"].memberships.get().team,
        "SIM-A100",
        {"nominal_gpus": 1.0, "borrowing_limit_gpus": 2.0, field: value},
    )
    dana = client_of(people["dana"])
    form = quota_form(dana.get("/teams/vision/").content.decode(), "SIM-A100")

    saved = dana.post("/teams/vision/quotas/", {**form, "max_running_jobs": "2"})

    assert saved.status_code == 302
    quota = Quota.objects.get(team__slug="vision", gpu_model="SIM-A100")
    assert quota.max_running_jobs == 2
    # The float itself, not its two decimals: the scheduler compares with 1e-9 slack, so a
    # nominal of "0.14" is less than one slice, and a 1g job would have to borrow.
    assert getattr(quota, field) == value


# --- arrays: "Resubmit the N that did not succeed" -----------------------------------------


def test_the_link_to_resubmit_a_stepped_arrays_failed_tasks_fits_the_servers_request_line(
    people: Any,
) -> None:
    from gunicorn.config import Config

    # A sweep over even seeds (Slurm's --array=0-1998:2): 1000 tasks, this site's default most.
    first = submit_job(people["alice"], spec(name="sweep", array="0-1998:2%3")).job
    Job.objects.filter(array_id=first.array_id).update(state="failed")  # a bad image: all fail
    alice = client_of(people["alice"])

    page = alice.get(f"/jobs/{first.pk}/").content.decode()
    link = re.search(r'<p id="array-again"><a href="([^"]+)"', page)
    assert link is not None
    href = html.unescape(link[1])
    # The production server (gunicorn, docker-compose.yml and the Dockerfile) answers a request
    # line longer than its limit_request_line (4094) with 414 URI Too Long: the link is dead.
    assert len(f"GET {href} HTTP/1.1") <= Config().limit_request_line, len(href)

    # The form it opens holds every failed index, and the array's limit.
    form = posted(alice.get(href).content.decode())
    assert form["array"] == [",".join(str(i) for i in range(0, 1999, 2)) + "%3"]
    assert form["from"] == [str(first.pk)]


# --- the job page's output ------------------------------------------------------------------


def test_a_lost_jobs_output_cut_inside_a_character_ends_instead_of_being_polled_forever(
    people: Any, local_cluster: Any
) -> None:
    # The machine restarted under the job: the local backend finds its supervisor gone (no
    # result.json, so its logs never say eof) and sync marks it lost. Its stdout stops in the
    # middle of a UTF-8 character ("€" is e2 82 ac), as a killed write leaves it.
    job = submit_job(people["alice"], spec(name="rebooted")).job
    job_dir = Path(local_cluster.settings["workdir"]) / str(job.pk) / "1"
    job_dir.mkdir(parents=True)
    (job_dir / "stdout").write_bytes(b"step 1 cost 3 \xe2\x82")
    Job.objects.filter(pk=job.pk).update(
        state="lost", cluster=local_cluster, external_id=f"{job.pk}/1", attempts=1
    )
    alice = client_of(people["alice"])

    url, polls = f"/jobs/{job.pk}/log/?offset=0", []
    while url and len(polls) < 4:  # the page asks again while the fragment carries a poller
        piece, url = poll(alice, url)
        polls.append(piece)

    # The two bytes are all there will ever be: shown (as U+FFFD) and the end said, not asked
    # for every 2 s for as long as the page stays open ("Reading the rest…").
    assert 'data-eof="true"' in polls[-1] and not url, polls[-1]
    assert log_text(polls) == "step 1 cost 3 \N{REPLACEMENT CHARACTER}"


def test_a_page_following_a_requeued_job_shows_the_new_attempts_output_from_its_start(
    people: Any, local_cluster: Any
) -> None:
    # A job runs (attempt 1), is preempted and requeued, and runs again (attempt 2, a new
    # external id and a new output file), while its page stays open and follows the log.
    job = submit_job(people["alice"], spec(name="finetune")).job
    workdir = Path(local_cluster.settings["workdir"]) / str(job.pk)
    (workdir / "1").mkdir(parents=True)
    (workdir / "1" / "stdout").write_bytes(b"epoch 1 loss 0.9\n" * 10)
    (workdir / "2").mkdir(parents=True)
    (workdir / "2" / "stdout").write_bytes(b"resumed from checkpoint epoch 1\n")
    running = {"state": "running", "cluster": local_cluster}
    Job.objects.filter(pk=job.pk).update(**running, external_id=f"{job.pk}/1", attempts=1)
    alice = client_of(people["alice"])
    first, url = poll(alice, f"/jobs/{job.pk}/log/?offset=0")
    assert 'data-offset="170"' in first and "epoch 1 loss 0.9" in first

    # Requeued: back in the queue without an external id, and dispatched as attempt 2, which
    # the cluster has not named yet. Nothing to read: the page keeps its place in attempt 1.
    Job.objects.filter(pk=job.pk).update(state="dispatching", external_id="", attempts=2)
    waiting, url = poll(alice, url)
    assert 'data-offset="170"' in waiting and "attempt=1" in url

    Job.objects.filter(pk=job.pk).update(**running, external_id=f"{job.pk}/2")
    pieces = []
    for _ in range(2):  # the poller's next asks, with the attempt and offset it carries
        piece, url = poll(alice, url)
        pieces.append(piece)

    # Attempt 2's output from its first byte, under a line saying a new attempt began.
    assert log_text([first, waiting, *pieces]) == (
        "epoch 1 loss 0.9\n" * 10 + "— attempt 2 —" + "resumed from checkpoint epoch 1\n"
    )
    assert url.endswith("attempt=2&offset=32")


@pytest.mark.parametrize(
    ("asked", "attempts", "shown"),
    [
        ("", 1, "456789"),  # a page from before attempts were named: the current one
        ("&attempt=1", 1, "456789"),  # the same attempt: on from the offset
        ("&attempt=0", 1, "0123456789"),  # opened before it first ran: from the start
        ("&attempt=1", 3, "— attempt 3 —0123456789"),  # requeued twice since
    ],
)
def test_the_log_poller_reads_on_in_the_attempt_it_names_or_starts_the_current_one(
    people: Any, local_cluster: Any, asked: str, attempts: int, shown: str
) -> None:
    job = submit_job(people["alice"], spec(name="finetune")).job
    current = Path(local_cluster.settings["workdir"]) / str(job.pk) / str(attempts)
    current.mkdir(parents=True)
    (current / "stdout").write_bytes(b"0123456789")
    Job.objects.filter(pk=job.pk).update(
        state="running",
        cluster=local_cluster,
        external_id=f"{job.pk}/{attempts}",
        attempts=attempts,
    )

    piece, url = poll(client_of(people["alice"]), f"/jobs/{job.pk}/log/?offset=4{asked}")

    assert log_text([piece]) == shown
    assert url.endswith(f"attempt={attempts}&offset=10")


# --- the dashboard --------------------------------------------------------------------------


def test_the_dashboards_waiting_count_counts_every_waiting_job_not_the_rows_shown(
    people: Any,
) -> None:
    # The count is of jobs (an array's held tasks each count, though shown as one row): past
    # the 50 rows the card lists, the count stopped at 50 while 60 jobs waited.
    for n in range(60):
        submit_job(people["alice"], spec(name=f"eval-{n}"))

    page = client_of(people["bob"]).get("/live/dashboard/").content.decode()

    waiting = re.search(r'Waiting <span class="count">(\d+)</span>', page)
    assert waiting is not None and int(waiting[1]) == 60


@pytest.mark.parametrize(("jobs", "shown", "link"), [(3, 3, False), (55, 55, True)])
def test_the_dashboards_running_count_counts_every_running_job(
    people: Any, jobs: int, shown: int, link: bool
) -> None:
    for n in range(jobs):
        submit_job(people["alice"], spec(name=f"train-{n}"))
    Job.objects.update(state="running")

    page = client_of(people["bob"]).get("/live/dashboard/").content.decode()

    running = re.search(r'Running <span class="count">(\d+)</span>', page)
    assert running is not None and int(running[1]) == shown
    assert ('href="/queue/?state=active"' in page) is link


# --- the job page's timeline ----------------------------------------------------------------


@pytest.mark.parametrize(("extra", "earlier"), [(10, 0), (49, 0), (2000, 1951)])
def test_the_timeline_draws_the_latest_events_and_says_how_many_earlier_ones_it_leaves_out(
    people: Any, extra: int, earlier: int
) -> None:
    # A dispatch retried for hours logs an event per try; the fragment is drawn every 3 s.
    job = submit_job(people["alice"], spec(name="retrying")).job  # its "submitted" event
    JobEvent.objects.bulk_create(
        JobEvent(job=job, code="dispatch_retry", message=f"try {n}") for n in range(extra)
    )

    page = client_of(people["alice"]).get(f"/jobs/{job.pk}/live/").content.decode()

    drawn = [
        re.sub(r"<[^>]+>", "", m).strip() for m in re.findall(r'event-msg">(.*?)</span>', page)
    ]
    assert len(drawn) == min(extra + 1, 50)
    # The latest, oldest first: the last try at the bottom.
    assert drawn[-1] == f"dispatch_retry try {extra - 1}"
    assert drawn[0] == (
        f"dispatch_retry try {earlier - 1}" if earlier else "submitted submitted by alice"
    )
    said = re.search(r'id="timeline-earlier">(\d+) earlier event', page)
    assert (int(said[1]) if said else 0) == earlier
    if earlier:
        assert f'href="/api/v1/jobs/{job.pk}/events/"' in page


# --- the log's download ---------------------------------------------------------------------


def test_a_download_the_cluster_stops_answering_ends_with_a_line_saying_it_is_incomplete(
    people: Any, local_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = submit_job(people["alice"], spec(name="big-log")).job
    Job.objects.filter(pk=job.pk).update(
        state="running", cluster=local_cluster, external_id=f"{job.pk}/1"
    )

    def read_logs(job: Any, *, offset: int, limit: int, stream: str, attempt: Any) -> LogChunk:
        if offset:  # the second read: the SSH connection dropped
            raise BackendError("connection reset")
        return LogChunk(b"a" * 10 + b"\n", 11)

    monkeypatch.setattr("frontend.views.jobs.read_logs", read_logs)
    response = client_of(people["alice"]).get(f"/jobs/{job.pk}/log/download/")

    body = b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]
    assert response.status_code == 200  # the answer had begun
    assert body.startswith("a" * 10 + "\n")
    assert body.endswith(
        "\n[gpuq: download incomplete: the cluster did not return the log after byte 11:"
        " connection reset]\n"
    )
