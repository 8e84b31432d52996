"""Job arrays in the UI (one submit, one job per index), through Django's test client: the
form's Array field, a task's page with its array's summary, task names in the lists, and the
tasks an array's limit holds back as one row per array in the queue and the dashboard."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.db import connection
from django.db.models.signals import post_init
from django.test import Client
from django.test.utils import CaptureQueriesContext

from frontend.templatetags.gpuq import INDEX_CHARS, index_ranges
from queue_service.jobs.models import Job, JobArray
from queue_service.jobs.services import cancel_job, submit_job
from queue_service.jobs.snapshot import run_cycle
from queue_service.jobs.spec import JobSpecSerializer
from queue_service.tenancy.models import Membership
from tests.conftest import spec

S = Job.State
FORM = {"mode": "form", "kind": "training", "name": "sweep", "command": "echo $GPUQ_ARRAY_TASK_ID",
        "nodes": "1", "gpus_per_node": "1"}  # fmt: skip


def client_of(person: Any) -> Client:
    client = Client()
    client.force_login(person)
    return client


@pytest.fixture
def alice(people: Any) -> Client:
    return client_of(people["alice"])


def text(page: str) -> str:
    """The page's words, without tags, as a reader sees them."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", page)).split())


def tasks(first: Job) -> list[Job]:
    return list(Job.objects.filter(array_id=first.array_id).order_by("array_index"))


def test_an_array_from_the_form_makes_a_job_per_index_and_opens_the_first_task(
    alice: Client,
) -> None:
    response = alice.post("/submit/", {**FORM, "array": " 0-3%2 "}, follow=True)

    made = list(Job.objects.order_by("array_index"))
    assert [(j.array_index, j.display_name, j.spec["array"]) for j in made] == [
        (0, "sweep[0]", "0"),
        (1, "sweep[1]", "1"),
        (2, "sweep[2]", "2"),
        (3, "sweep[3]", "3"),
    ]
    assert response.redirect_chain == [(f"/jobs/{made[0].pk}/", 302)]
    words = text(response.content.decode())
    assert "Submitted the array sweep: 4 tasks, each a job of its own." in words
    assert "Task 0 of array sweep: one of 4 tasks (indices 0-3%2, at most 2 at once)" in words
    assert "<title>sweep[0] · gpuq</title>" in response.content.decode()


@pytest.mark.parametrize("array", ["5-1", "0-3%0", "x", "0-1000"])
def test_a_bad_array_shows_the_apis_message_at_the_field_and_stores_nothing(
    alice: Client, array: str
) -> None:
    serializer = JobSpecSerializer(data=spec(array=array))
    assert not serializer.is_valid()

    response = alice.post("/submit/", {**FORM, "array": array})

    page = response.content.decode()
    assert response.status_code == 400
    field = re.search(r'<div class="field has-error">\s*<label for="f-array">.*?</div>', page, re.S)
    assert field is not None, page
    assert 'aria-invalid="true"' in field[0]
    assert f'value="{html.escape(array)}"' in field[0]  # kept as typed
    assert text(field[0]).endswith(str(serializer.errors["array"][0]))
    assert (Job.objects.count(), JobArray.objects.count()) == (0, 0)


def test_an_array_in_pasted_yaml_makes_its_tasks_and_opens_the_first(alice: Client) -> None:
    yaml_text = "name: sweep\ncommand: echo hi\narray: 4-8:2\n"

    response = alice.post("/submit/", {"mode": "yaml", "yaml": yaml_text}, follow=True)

    assert [j.array_index for j in Job.objects.order_by("array_index")] == [4, 6, 8]
    assert "Task 4 of array sweep: one of 3 tasks (indices 4-8:2)" in text(
        response.content.decode()
    )


def test_a_copy_of_a_task_is_prefilled_with_its_index(alice: Client, people: Any) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-9")).job
    seventh = tasks(first)[7]

    page = alice.get(f"/submit/?from={seventh.pk}").content.decode()

    assert re.search(r'id="f-array" name="array" type="text" value="7"', page)
    assert "A copy of sweep[7]" in text(page)
    assert "it is that one task again" in text(page)


def test_a_tasks_page_shows_its_array_to_a_teammate_and_is_a_404_to_an_outsider(
    people: Any,
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-15%4")).job
    seventh = tasks(first)[7]

    page = client_of(people["bob"]).get(f"/jobs/{seventh.pk}/").content.decode()

    assert "<h1>sweep[7]</h1>" in page
    words = text(page)
    assert "Task 7 of array sweep: one of 16 tasks (indices 0-15%4, at most 4 at once)" in words
    assert "Array sweep 16 tasks" in words
    charlie = client_of(people["charlie"])
    for path in ("", "array/", "live/"):
        response = charlie.get(f"/jobs/{seventh.pk}/{path}")
        assert response.status_code == 404
        assert "sweep" not in response.content.decode()


def test_the_array_summary_counts_tasks_by_state_and_links_each(alice: Client, people: Any) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="1,3,5,7")).job
    one, three, five, _ = tasks(first)
    Job.objects.filter(pk=one.pk).update(state=S.SUCCEEDED)
    Job.objects.filter(pk=three.pk).update(state=S.RUNNING)
    Job.objects.filter(pk=five.pk).update(state=S.SUCCEEDED)

    page = alice.get(f"/jobs/{three.pk}/array/").content.decode()

    counts = re.search(r'<ul class="array-counts".*?</ul>', page, re.S)[0]
    assert text(counts) == "Pending 1 Running 1 Succeeded 2"
    listed = re.findall(r'<li data-index="(\d+)"><a href="/jobs/([0-9a-f-]+)/"([^>]*)>', page)
    assert listed == [
        ("1", str(one.pk), ""),
        ("3", str(three.pk), ' aria-current="page"'),
        ("5", str(five.pk), ""),
        ("7", str(tasks(first)[3].pk), ""),
    ]
    assert "hx-trigger" in page  # two tasks have not ended: it keeps polling
    Job.objects.filter(array_id=first.array_id).update(state=S.SUCCEEDED)
    ended = alice.get(f"/jobs/{three.pk}/array/").content.decode()
    assert "hx-trigger" not in ended and 'data-finished="true"' in ended
    single = submit_job(people["alice"], spec(name="single")).job
    assert alice.get(f"/jobs/{single.pk}/array/").status_code == 404


def test_a_big_array_lists_its_first_100_tasks_in_as_many_queries_as_a_small_one(
    alice: Client, people: Any
) -> None:
    small = submit_job(people["alice"], spec(name="small", array="0-2")).job
    big = submit_job(people["alice"], spec(name="big", array="0-999%10")).job
    Job.objects.filter(array_id=big.array_id, array_index__gte=990).update(state=S.FAILED)

    queries = []
    for first in (small, big):
        with CaptureQueriesContext(connection) as captured:
            page = alice.get(f"/jobs/{first.pk}/").content.decode()
        queries.append(len(captured))

    assert queries[0] == queries[1]
    assert re.findall(r'<li data-index="(\d+)">', page) == [str(i) for i in range(100)]
    words = text(page)
    assert "and 900 more (the first 100 by index are listed)" in words
    assert "Pending 990 Failed 10" in words


def test_lists_show_a_tasks_name_with_its_index(alice: Client, people: Any) -> None:
    first = submit_job(people["bob"], spec(name="sweep", array="0-1")).job
    running, waiting = tasks(first)
    Job.objects.filter(pk=running.pk).update(state=S.RUNNING)
    after = submit_job(people["alice"], spec(name="merge", after=[str(waiting.pk)])).job

    shown = {
        "/": (running, waiting),
        "/live/dashboard/": (running, waiting),
        "/queue/": (waiting,),
        "/live/queue/?state=all": (running, waiting),
    }
    for path, listed in shown.items():
        page = alice.get(path).content.decode()
        for task in listed:
            assert f'<a href="/jobs/{task.pk}/">{task.display_name}</a>' in page, path
    live = alice.get(f"/jobs/{after.pk}/live/").content.decode()
    assert f'<a href="/jobs/{waiting.pk}/">sweep[1]</a>' in live
    assert "Cancel sweep[1]?" in alice.get(f"/jobs/{waiting.pk}/cancel/").content.decode()


def test_the_preview_of_an_array_says_it_is_for_its_first_task(
    alice: Client, local_cluster: Any
) -> None:
    page = alice.post("/submit/preview/", {**FORM, "array": "0-99%10"}).content.decode()
    assert 'data-verdict="starts"' in page
    assert "That is for its first task" in page
    single = alice.post("/submit/preview/", FORM).content.decode()
    assert "That is for its first task" not in single


def test_a_job_after_an_array_names_the_array_and_how_far_it_is(alice: Client, people: Any) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-1")).job
    merge = submit_job(people["bob"], spec(name="merge", after=[str(first.array_id)])).job
    Job.objects.filter(pk=first.pk).update(state=S.SUCCEEDED)

    words = text(alice.get(f"/jobs/{merge.pk}/").content.decode())

    assert "array sweep[0-1] (1 of 2 tasks succeeded) (each must succeed first)" in words


# --- held tasks: one row per array ---------------------------------------------------------


@pytest.mark.parametrize(
    ("indices", "max_chars", "expected"),
    [
        ([], 0, ""),
        ([7], 0, "7"),
        ([0, 1], 0, "0-1"),
        (range(3, 12), 0, "3-11"),
        ([3, 5, 7, 8, 9], 0, "3,5,7-9"),
        ([9, 8, 3, 7, 5, 5], 0, "3,5,7-9"),  # in any order, each once
        (range(10_000), 0, "0-9999"),
        (list(range(10_000)), 0, "0-9999"),
        (range(5, 6), 0, "5"),
        (range(0, 100, 2), 20, "0,2,4,6,8,10,12,14,…"),  # the ranges that fit, then ",…"
        (range(0, 100, 2), 0, ",".join(str(i) for i in range(0, 100, 2))),
        ([1, 2, 3, 10], 5, "1-3,…"),
        ([1, 2, 3, 10], 6, "1-3,10"),  # it fits
        ([1, 2, 3], 2, "1-3"),  # nothing left out: no ",…" even past the limit
        ([100, 102], 4, "100,…"),  # at least the first range
    ],
)
def test_index_ranges_writes_indices_as_slurm_does(
    indices: Any, max_chars: int, expected: str
) -> None:
    assert index_ranges(indices, max_chars) == expected
    assert index_ranges(indices) == index_ranges(indices, INDEX_CHARS)


def test_index_ranges_are_cut_at_squeues_length_for_a_stepped_big_array() -> None:
    shown = index_ranges(range(0, 20_000, 2))
    assert shown.startswith("0,2,4,") and shown.endswith(",…")
    assert len(shown) <= INDEX_CHARS


def held_row(page: str) -> list[str]:
    return re.findall(r'<tr class="held" data-array="[^"]+">.*?</tr>', page, re.S)


def cells(row: str) -> list[str]:
    """A table row's cells as a reader sees them (a cell's lines apart)."""
    return [text(cell.replace("<div", " <div")) for cell in re.findall(r"<td.*?</td>", row, re.S)]


@pytest.fixture
def held_sweep(people: Any, local_cluster: Any) -> list[Job]:
    """Bob's job fills the cluster; Alice's array 0-5%2 without task 4: tasks 0 and 1 wait
    in the queue (let through), 2, 3 and 5 are held back by the array's limit."""
    submit_job(people["bob"], spec(name="big", nodes=2, gpus_per_node=4))
    first = submit_job(people["alice"], spec(name="sweep", array="0-5%2")).job
    cancel_job(people["alice"], tasks(first)[4])
    run_cycle()
    return tasks(first)


def test_an_arrays_held_tasks_are_one_queue_row_after_the_queue_for_owner_and_teammate(
    people: Any, held_sweep: list[Job]
) -> None:
    zero, one, two, three, _, five = held_sweep
    assert [t.reason["code"] for t in (two, three, five)] == ["array_limit"] * 3
    assert (zero.queue_position, one.queue_position) == (1, 2)
    # A reason without a code (the field's default) is not a held task's: it stays listed.
    bare = submit_job(people["bob"], spec(name="bare")).job
    Job.objects.filter(pk=bare.pk).update(reason={})

    for person in ("alice", "bob"):
        page = client_of(people[person]).get("/queue/").content.decode()

        (row,) = held_row(page)
        assert f'data-array="{two.array_id}"' in row
        assert f'<a href="/jobs/{two.pk}/">sweep[2-3,5]</a>' in row
        assert cells(row) == [
            "—",
            "sweep[2-3,5] 3 tasks · alice · now",
            "normal",
            "vision",
            "1 \N{MULTIPLICATION SIGN} any GPU each",
            two.reason["message"],
            "unknown",
        ]
        listed = [str(j.pk) for j in (zero, one, bare)]
        assert re.findall(r'<tr data-job="([^"]+)">', page) == listed
        assert page.index(f'data-job="{bare.pk}"') < page.index(row)
        for held in (three, five):
            assert f"/jobs/{held.pk}/" not in page
        # Still a count of jobs: the three in the queue and the three held.
        assert "6 jobs, 3 of them held back by their array's limit (a row per array)." in text(page)


def test_an_outsider_sees_his_teams_held_tasks_and_nothing_of_anothers(
    people: Any, held_sweep: list[Job]
) -> None:
    theirs = submit_job(people["charlie"], spec(name="theirs", array="0-3%1")).job
    run_cycle()

    charlie = client_of(people["charlie"])
    for path in ("/queue/", "/live/queue/", "/", "/live/dashboard/"):
        page = charlie.get(path).content.decode()
        (row,) = held_row(page)
        assert f'data-array="{theirs.array_id}"' in row and "theirs[1-3]" in row, path
        assert "sweep" not in page and str(held_sweep[0].array_id) not in page, path
    page = text(charlie.get("/live/queue/").content.decode())
    assert "4 jobs, 3 of them held back by their array's limit" in page


def test_the_live_queue_shows_held_tasks_as_one_row_with_the_pages_filters(
    alice: Client, held_sweep: list[Job], people: Any, teams: dict[str, Any]
) -> None:
    two = held_sweep[2]
    # A team of hers without the sweep (one she is not in is no filter: not in the menu).
    Membership.objects.create(user=people["alice"], team=teams["language"], role="member")

    live = alice.get("/live/queue/", headers={"HX-Request": "true"}).content.decode()
    (row,) = held_row(live)
    assert "sweep[2-3,5]" in row and 'hx-get="/live/queue/?"' in live
    narrowed = alice.get("/live/queue/?team=vision&state=pending").content.decode()
    assert len(held_row(narrowed)) == 1
    elsewhere = alice.get("/live/queue/?team=language").content.decode()
    assert held_row(elsewhere) == [] and "sweep" not in elsewhere
    # Only the queue of pending jobs gathers them: "all" lists each task.
    every = alice.get("/live/queue/?state=all").content.decode()
    assert held_row(every) == [] and f'<tr data-job="{two.pk}">' in every


def test_the_dashboard_lists_an_arrays_held_tasks_as_one_row_before_suspended_jobs(
    people: Any, held_sweep: list[Job]
) -> None:
    zero, one, two = held_sweep[:3]
    paused = submit_job(people["bob"], spec(name="paused", hold=True)).job

    for path in ("/", "/live/dashboard/"):
        page = client_of(people["bob"]).get(path).content.decode()

        (row,) = held_row(page)
        assert f'<a href="/jobs/{two.pk}/">sweep[2-3,5]</a>' in row
        assert cells(row) == [
            "—",
            "sweep[2-3,5] 3 tasks · alice · normal",
            "vision",
            "1 \N{MULTIPLICATION SIGN} any GPU each",
            two.reason["message"],
            "unknown",
        ]
        waiting = re.search(r'<section class="card" aria-labelledby="pending-h">.*?</section>',
                            page, re.S)[0]  # fmt: skip
        order = [waiting.index(f"/jobs/{j.pk}/") for j in (zero, one, two, paused)]
        assert order == sorted(order), path
        # A count of jobs: two let through, three held, one suspended.
        assert re.search(r'Waiting <span class="count">6</span>', waiting), path


def test_a_thousand_held_tasks_cost_the_queue_and_dashboard_no_more_than_a_few(
    alice: Client, people: Any, local_cluster: Any
) -> None:
    built: list[Job] = []

    def count_pending(sender: Any, instance: Job, **kwargs: Any) -> None:
        # Not instance.state: where it is deferred (only()), reading it would be a query.
        if instance.__dict__.get("state") == S.PENDING:
            built.append(instance)

    paths = ("/queue/", "/live/queue/", "/", "/live/dashboard/")

    def measure() -> dict[str, tuple[int, int, str]]:
        out = {}
        post_init.connect(count_pending, sender=Job)
        try:
            for path in paths:
                built.clear()
                with CaptureQueriesContext(connection) as captured:
                    page = alice.get(path).content.decode()
                out[path] = (len(captured), len(built), page)
        finally:
            post_init.disconnect(count_pending, sender=Job)
        return out

    submit_job(people["alice"], spec(name="small", array="0-2%1"))
    run_cycle()
    small = measure()
    submit_job(people["alice"], spec(name="big", array="0-999%4"))
    run_cycle()
    assert Job.objects.filter(name="big", reason__code="array_limit").count() == 996
    big = measure()

    for path in paths:
        (q_small, built_small, _), (q_big, built_big, page) = small[path], big[path]
        assert q_big == q_small, path
        assert (built_small, built_big) == (1, 2), path  # one pending Job per held array
        assert [cells(r)[1].split(" · ")[0] for r in held_row(page)] == [
            "small[1-2] 2 tasks",
            "big[4-999] 996 tasks",
        ], path


def test_a_tasks_page_offers_to_resubmit_the_tasks_that_did_not_succeed(
    alice: Client, people: Any
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-5")).job
    ended = {1: S.FAILED, 2: S.SUCCEEDED, 4: S.TIMEOUT, 5: S.LOST}
    for task in tasks(first):
        if task.array_index in ended:
            Job.objects.filter(pk=task.pk).update(state=ended[task.array_index])

    page = alice.get(f"/jobs/{first.pk}/").content.decode()

    # The link names the task; the submit page works out the indices (a URL listing them
    # could outgrow what the server takes).
    link = f'href="/submit/?from={first.pk}&amp;again=unsucceeded"'
    assert link in page
    assert "Resubmit the 3 that did not succeed (as an array of indices 1,4-5)" in text(page)
    form = alice.get(f"/submit/?from={first.pk}&again=unsucceeded").content.decode()
    assert re.search(r'name="array"[^>]*value="1,4-5"', form), form
    # Its Paste YAML tab opens the same copy, indices included.
    assert f'href="/submit/?mode=yaml&amp;from={first.pk}&amp;again=unsucceeded"' in form
    yaml = alice.get(f"/submit/?mode=yaml&from={first.pk}&again=unsucceeded").content.decode()
    assert re.search(r"^array: '?1,4-5'?$", html.unescape(yaml), re.M), yaml
    bob = client_of(people["bob"])
    made = bob.post("/submit/", {**FORM, "array": "1,4-5", "from": str(first.pk)}, follow=True)
    copy = Job.objects.get(pk=made.redirect_chain[0][0].split("/")[2])
    assert [t.array_index for t in tasks(copy)] == [1, 4, 5]


def test_a_hand_made_copy_of_a_limited_array_keeps_its_limit_unless_it_gives_its_own(
    alice: Client, people: Any
) -> None:
    # As the API's resubmit does (jobs.services.resubmit_job).
    first = submit_job(people["alice"], spec(name="sweep", array="0-9%2")).job

    form = alice.get(f"/submit/?from={first.pk}&array=3-5").content.decode()
    own = alice.get(f"/submit/?from={first.pk}&array=3-5%253").content.decode()

    assert re.search(r'name="array"[^>]*value="3-5%2"', form), form
    assert f'href="/submit/?mode=yaml&amp;from={first.pk}&amp;array=3-5%252"' in form
    assert re.search(r'name="array"[^>]*value="3-5%3"', own), own


def test_no_resubmit_offer_while_no_task_has_failed(alice: Client, people: Any) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-2")).job
    Job.objects.filter(pk=first.pk).update(state=S.SUCCEEDED)
    assert "did not succeed" not in alice.get(f"/jobs/{first.pk}/").content.decode()
