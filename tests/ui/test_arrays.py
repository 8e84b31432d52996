"""Job arrays in the UI (one submit, one job per index), through Django's test client: the
form's Array field, a task's page with its array's summary, and task names in the lists."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from queue_service.jobs.models import Job, JobArray
from queue_service.jobs.services import submit_job
from queue_service.jobs.spec import JobSpecSerializer
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
