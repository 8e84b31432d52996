"""Submitting, watching and cancelling jobs in a real browser."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from playwright.sync_api import expect

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.spec import JobSpecSerializer
from tests.conftest import spec

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
JOB_URL = re.compile(r".*/jobs/[0-9a-f-]{36}/$")


def job_page(page: Any) -> Job:
    page.wait_for_url(JOB_URL)
    return Job.objects.get(pk=page.url.rstrip("/").rsplit("/", 1)[1])


def test_signing_in_shows_the_dashboard_and_signing_out_returns_to_sign_in(
    people: Any, new_page: Any
) -> None:
    page = new_page()
    page.goto("/queue/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/queue/$"))
    page.fill("#id_username", "alice")
    page.fill("#id_password", "wrong")
    page.click("button[type=submit]")
    expect(page.get_by_role("alert")).to_contain_text("do not match")
    page.fill("#id_password", "pw-alice")
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/queue/$"))
    page.get_by_label("Main").get_by_role("link", name="Dashboard").click()
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()
    expect(page.locator(".page-head")).to_contain_text("vision")
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/login/$"))
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/$"))


def test_a_training_job_from_the_form_reaches_running_then_succeeded_without_a_reload(
    people: Any, sign_in: Any, job_loop: Any
) -> None:
    page = sign_in("alice")
    page.get_by_label("Main").get_by_role("link", name="Submit").click()
    page.fill("#f-name", "form-trained")
    page.fill("#f-command", "echo started; sleep 5; echo done")
    page.fill("#f-gpus_per_node", "2")
    page.fill("#f-time_limit", "10m")
    expect(page.locator("#preview [data-verdict]")).to_have_attribute("data-verdict", "starts")
    page.get_by_role("button", name="Submit job").click()
    job = job_page(page)
    assert (job.spec["gpus_per_node"], job.spec["time_limit"], job.user.username) == (
        2,
        600,
        "alice",
    )
    state = page.locator("#job-state")
    expect(state).to_have_text("Running", timeout=20_000)
    expect(page.locator("#external-id")).not_to_have_text("—")
    expect(state).to_have_text("Succeeded", timeout=20_000)
    expect(page.locator("#exit-code")).to_have_text("0")
    expect(page.locator("#log-text")).to_have_text("started\ndone\n")
    timeline = page.locator(".timeline .state")
    expect(timeline).to_have_text(
        ["pending", "admitted", "dispatching", "queued", "running", "succeeded"]
    )
    # A finished job's page stops polling: its live part no longer asks for updates.
    expect(page.locator("#job-live")).not_to_have_attribute("hx-trigger", re.compile("."))


def api_message(*, without: str, **overrides: Any) -> dict[str, str]:
    """What the API says about this spec, per field."""
    data = spec(**overrides)
    del data[without]
    serializer = JobSpecSerializer(data=data)
    assert not serializer.is_valid()
    return {k: str(v[0]) for k, v in serializer.errors.items() if isinstance(v, list)}


def test_a_bad_form_shows_the_apis_messages_at_the_fields_and_keeps_what_was_typed(
    people: Any, sign_in: Any, local_cluster: Any
) -> None:
    page = sign_in("alice")
    page.goto("/submit/")
    page.fill("#f-name", "too-big")
    page.fill("#f-command", "")
    page.fill("#f-gpus_per_node", "99")
    page.fill("#f-time_limit", "soon")
    page.get_by_role("button", name="Submit job").click()
    expect(page.get_by_role("alert").first).to_contain_text("not submitted")
    expected = api_message(without="command", gpus_per_node=99, time_limit="soon")
    for field in ("command", "gpus_per_node", "time_limit"):
        expect(page.locator(f"#e-{field}")).to_have_text(expected[field])
        expect(page.locator(f"#f-{field}")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#f-name")).to_have_value("too-big")
    expect(page.locator("#f-gpus_per_node")).to_have_value("99")
    assert not Job.objects.exists()


def test_someone_in_no_team_is_told_why_nothing_was_submitted(
    make_user: Any, teams: Any, sign_in: Any
) -> None:
    make_user("eve")
    page = sign_in("eve")
    expect(page.locator(".page-head")).to_contain_text("You are not in a team yet")
    page.goto("/submit/")
    page.fill("#f-name", "orphan")
    page.fill("#f-command", "echo hi")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("ul.errors.top")).to_have_text("team: you are not a member of any team")
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("yaml_text", "line", "message"),
    [
        ("name: broken\ncommand: [echo, hi\ngpus_per_node: 1\n", 3, "line 3"),
        ("name: big\ncommand: echo hi\ngpus_per_node: 99\n", 3, "less than or equal to 16"),
        ("name: t\ncommand: echo\nenv:\n  GPUQ_X: 1\n", 3, "env.GPUQ_X: is set by gpuq"),
    ],
    ids=["syntax", "field", "nested-field"],
)
def test_pasted_yaml_with_an_error_points_at_its_line(
    people: Any, sign_in: Any, local_cluster: Any, yaml_text: str, line: int, message: str
) -> None:
    page = sign_in("alice")
    page.goto("/submit/")
    page.get_by_role("link", name="Paste YAML").click()
    page.fill("#f-yaml", yaml_text)
    page.get_by_role("button", name="Submit job").click()
    bad = page.locator(f'.listing li[data-line="{line}"]')
    expect(bad).to_have_class(re.compile(r"\bbad\b"))
    expect(bad.locator(".line-error")).to_contain_text(f"line {line}: ")
    expect(bad.locator(".line-error")).to_contain_text(message)
    expect(page.locator(".listing li.bad")).to_have_count(1)
    expect(page.locator("#f-yaml")).to_have_value(yaml_text)
    assert not Job.objects.exists()


def test_valid_pasted_yaml_is_submitted(people: Any, sign_in: Any, local_cluster: Any) -> None:
    page = sign_in("alice")
    page.goto("/submit/?mode=yaml")
    page.fill("#f-yaml", "name: from-yaml\ncommand: [/bin/echo, hi]\ngpus_per_node: 2\n")
    page.get_by_role("button", name="Submit job").click()
    job = job_page(page)
    assert (job.name, job.spec["command"], job.spec["gpus_per_node"]) == (
        "from-yaml",
        ["/bin/echo", "hi"],
        2,
    )
    expect(page.get_by_role("heading", name="from-yaml")).to_be_visible()


def test_cancelling_a_running_job_asks_first_then_stops_it(
    people: Any, sign_in: Any, job_loop: Any
) -> None:
    job = submit_job(people["alice"], spec(name="long", command=["sleep", "60"])).job
    page = sign_in("alice")
    page.goto(f"/jobs/{job.pk}/")
    expect(page.locator("#job-state")).to_have_text("Running", timeout=20_000)
    page.get_by_role("link", name="Cancel…").click()
    expect(page.get_by_role("heading", name="Cancel long?")).to_be_visible()
    page.get_by_role("link", name="No, keep it").click()
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    page.get_by_role("link", name="Cancel…").click()
    page.get_by_role("button", name="Yes, cancel the job").click()
    expect(page.locator(".messages")).to_contain_text("Cancelling long")
    expect(page.locator("#job-state")).to_have_text("Cancelled", timeout=20_000)
    expect(page.get_by_role("link", name="Cancel…")).to_have_count(0)
    # The transitions (notes, such as the stop being sent to the cluster, have no state).
    states = [s for s in job.events.values_list("to_state", flat=True) if s]
    assert states[-2:] == ["cancelling", "cancelled"]


def test_a_running_job_suspended_from_its_page_stops_and_resumes(
    people: Any, sign_in: Any, job_loop: Any
) -> None:
    job = submit_job(people["alice"], spec(name="agent", command=["sleep", "60"])).job
    page = sign_in("alice")
    page.goto(f"/jobs/{job.pk}/")
    expect(page.locator("#job-state")).to_have_text("Running", timeout=20_000)

    page.get_by_role("button", name="Suspend").click()

    expect(page.locator(".messages")).to_contain_text("Suspending agent: its cluster stops it")
    expect(page.locator("#job-state")).to_have_text("Suspended", timeout=20_000)
    expect(page.locator(".reason-box")).to_contain_text("suspended by alice")
    expect(page.locator("#job-live")).to_contain_text("It holds no GPUs while suspended.")
    expect(page.get_by_role("button", name="Suspend")).to_have_count(0)
    page.get_by_role("button", name="Resume").click()
    expect(page.locator(".messages")).to_contain_text("Resumed agent")
    expect(page.locator("#job-state")).to_have_text("Running", timeout=20_000)
    job.refresh_from_db()
    assert job.attempts == 2
    assert [s for s in job.events.values_list("to_state", flat=True) if s][-7:] == [
        "suspending",
        "suspended",
        "pending",
        "admitted",
        "dispatching",
        "queued",
        "running",
    ]
    page.get_by_role("button", name="Suspend").click()  # leaves no process behind
    expect(page.locator("#job-state")).to_have_text("Suspended", timeout=20_000)


def test_a_teammate_cannot_cancel_anothers_job_and_is_told_why(
    people: Any, sign_in: Any, local_cluster: Any
) -> None:
    job = submit_job(people["alice"], spec(name="alices")).job
    page = sign_in("bob")
    page.goto(f"/jobs/{job.pk}/")
    expect(page.get_by_role("link", name="Cancel…")).to_have_count(0)
    page.goto(f"/jobs/{job.pk}/cancel/")
    expect(page.locator("main")).to_contain_text("You cannot cancel it")
    expect(page.get_by_role("button", name="Yes, cancel the job")).to_have_count(0)
    token = page.locator("input[name=csrfmiddlewaretoken]").first.input_value()
    response = page.request.post(f"/jobs/{job.pk}/cancel/", form={"csrfmiddlewaretoken": token})
    assert response.status == 403
    assert "only the job's owner or a team admin" in html.unescape(response.text())
    job.refresh_from_db()
    assert job.state == Job.State.PENDING
    expect(page.get_by_role("button", name="Suspend")).to_have_count(0)
    response = page.request.post(f"/jobs/{job.pk}/suspend/", form={"csrfmiddlewaretoken": token})
    assert response.status == 403
    job.refresh_from_db()
    assert job.state == Job.State.PENDING


def test_an_outsider_opening_another_teams_job_gets_a_404_page(
    people: Any, sign_in: Any, local_cluster: Any
) -> None:
    job = submit_job(people["alice"], spec(name="secret-run")).job
    page = sign_in("charlie")
    response = page.goto(f"/jobs/{job.pk}/")
    assert response.status == 404
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    expect(page.locator("main")).not_to_contain_text("secret-run")
    for part in ("live/", "log/?offset=0", "log/download/", "cancel/"):
        assert page.request.get(f"/jobs/{job.pk}/{part}").status == 404
    assert page.request.get(f"/submit/?from={job.pk}").status == 404


def test_the_log_tail_grows_while_the_job_prints_and_downloads_whole(
    people: Any, sign_in: Any, job_loop: Any
) -> None:
    script = 'sleep 2; for i in 1 2 3 4 5 6 7 8; do echo "line $i: héllo"; sleep 1; done'
    job = submit_job(people["alice"], spec(name="printer", command=script)).job
    page = sign_in("alice")
    page.goto(f"/jobs/{job.pk}/")
    log = page.locator("#log-text")
    expect(log).to_contain_text("line 1: héllo", timeout=20_000)
    first = log.inner_text()
    assert "line 8" not in first
    expect(log).to_contain_text("line 8: héllo", timeout=20_000)
    expect(page.locator("#log-poller")).to_have_attribute("data-eof", "true", timeout=20_000)
    lines = log.inner_text().splitlines()
    assert lines == [f"line {i}: héllo" for i in range(1, 9)]
    with page.expect_download() as download:
        page.get_by_role("link", name="Download").click()
    path = download.value.path()
    with open(path, encoding="utf-8") as f:
        assert f.read().splitlines() == lines


def test_a_long_log_is_caught_up_on_and_the_page_keeps_only_its_end(
    people: Any, sign_in: Any, job_loop: Any
) -> None:
    command = "yes 0123456789abcdef | head -n 200000; echo THE-END"  # 3.4 MB
    job = submit_job(people["alice"], spec(name="chatty", command=command)).job
    page = sign_in("alice")
    page.goto(f"/jobs/{job.pk}/")
    expect(page.locator("#job-state")).to_have_text("Succeeded", timeout=30_000)
    poller = page.locator("#log-poller")
    expect(poller).to_have_attribute("data-eof", "true", timeout=30_000)
    assert poller.get_attribute("data-offset") == str(200000 * 17 + 8)
    expect(page.locator("#log-trimmed")).to_be_visible()
    text = page.locator("#log-text").evaluate("e => e.textContent")
    assert text.endswith("0123456789abcdef\nTHE-END\n")
    assert len(text) <= (1 << 20) + 256 * 1024


def test_a_waiting_jobs_priority_is_changed_from_its_page_and_shown_with_who_changed_it(
    people: Any, sign_in: Any, local_cluster: Any
) -> None:
    job = submit_job(people["alice"], spec(name="waits", priority="low", time_limit="2h")).job
    page = sign_in("alice")
    page.goto(f"/jobs/{job.pk}/")
    priority = page.locator(".facts dt:text-is('Priority') + dd")
    expect(priority).to_have_text("low")

    page.get_by_text("Change priority or time limit").click()
    expect(page.get_by_label("Time limit")).to_have_value("2h")
    page.get_by_label("Priority").select_option("high")
    # The job's live part is polled every 3 s: what was chosen survives the poll.
    with page.expect_response(lambda r: r.url.endswith(f"/jobs/{job.pk}/live/")):
        pass
    expect(page.get_by_label("Priority")).to_have_value("high")
    page.locator("#job-update").get_by_role("button", name="Save").click()  # not the Email one

    expect(page.locator(".messages")).to_contain_text("Updated waits.")
    expect(priority).to_have_text("high (never preempted)")
    expect(page.locator(".timeline")).to_contain_text("updated by alice: priority high (was low)")
    job.refresh_from_db()
    assert (job.priority_class.name, job.spec["time_limit"]) == ("high", 7200)


def test_what_a_running_job_emails_about_is_changed_from_its_page_and_survives_a_poll(
    people: Any, sign_in: Any, job_loop: Any
) -> None:
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    job = submit_job(people["alice"], spec(name="quiet", command=["sleep", "60"])).job
    page = sign_in("alice")
    page.goto(f"/jobs/{job.pk}/")
    expect(page.locator("#job-state")).to_have_text("Running", timeout=20_000)
    email = page.locator(".facts dt:text-is('Email') + dd")
    expect(email).to_contain_text("nothing")
    boxes = page.get_by_role("group", name="Email me when it")

    boxes.get_by_label("ends").check()
    # The job's live part is polled every 3 s: the ticks survive the polls of a few seconds.
    page.wait_for_timeout(3_500)
    with page.expect_response(lambda r: r.url.endswith(f"/jobs/{job.pk}/live/")):
        pass
    expect(boxes.get_by_label("ends")).to_be_checked()
    boxes.get_by_role("button", name="Save").click()

    expect(page.locator(".messages")).to_contain_text("Updated quiet.")
    expect(email).to_contain_text("on end → alice@example.org")
    expect(page.locator(".timeline")).to_contain_text(
        "updated by alice: email on end (was nothing)"
    )
    expect(boxes.get_by_label("ends")).to_be_checked()
    expect(boxes.get_by_label("fails")).not_to_be_checked()
    job.refresh_from_db()
    assert (job.state, job.spec["notify"]) == (Job.State.RUNNING, ["end"])


def test_resubmitting_as_a_copy_prefills_the_form(
    people: Any, sign_in: Any, local_cluster: Any
) -> None:
    original = submit_job(
        people["alice"],
        spec(
            name="copy-me",
            command=["python", "train.py", "--note", "it's $(here)"],
            gpus_per_node=3,
            time_limit="90m",
            env={"SEED": "7"},
        ),
    ).job
    page = sign_in("alice")
    page.goto(f"/jobs/{original.pk}/")
    page.get_by_role("link", name="Resubmit as a copy").click()
    expect(page.locator("#f-name")).to_have_value("copy-me")
    expect(page.locator("#f-gpus_per_node")).to_have_value("3")
    expect(page.locator("#f-time_limit")).to_have_value("90m")
    page.get_by_role("button", name="Submit job").click()
    copy = job_page(page)
    assert copy.pk != original.pk
    assert (copy.spec["gpus_per_node"], copy.spec["time_limit"], copy.spec["env"]) == (
        3,
        5400,
        {"SEED": "7"},
    )
    assert copy.spec["command"] == "python train.py --note 'it'\"'\"'s $(here)'"


def test_an_array_from_the_form_opens_its_first_task_with_the_arrays_tasks_running_live(
    people: Any, sign_in: Any, job_loop: Any
) -> None:
    page = sign_in("alice")
    page.goto("/submit/")
    page.fill("#f-name", "sweep")
    page.fill("#f-command", 'echo "task $GPUQ_ARRAY_TASK_ID"; sleep 1')
    page.get_by_label("Array").fill("0-3%2")
    expect(page.locator("#preview-array")).to_contain_text("for its first task")
    page.get_by_role("button", name="Submit job").click()

    first = job_page(page)
    assert (first.array_index, first.array.size, first.array.max_running) == (0, 4, 2)
    expect(page.locator(".messages")).to_contain_text("Submitted the array sweep: 4 tasks")
    expect(page.get_by_role("heading", level=1)).to_have_text("sweep[0]")
    expect(page.locator("#array-of")).to_have_text(
        "Task 0 of array sweep: one of 4 tasks (indices 0-3%2, at most 2 at once)"
    )
    summary = page.get_by_role("region", name="Array sweep")
    expect(summary.get_by_role("list", name="Tasks by index").get_by_role("link")).to_have_text(
        ["task 0", "task 1", "task 2", "task 3"]
    )
    # The summary follows the other tasks without a reload, and stops once all have ended.
    expect(summary.get_by_role("list", name="Tasks by state")).to_have_text(
        "Succeeded 4", timeout=30_000
    )
    expect(page.locator("#job-array")).to_have_attribute("data-finished", "true")
    expect(page.locator("#log-text")).to_have_text("task 0\n")
    summary.get_by_role("link", name="task 2").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("sweep[2]")
    expect(page.locator("#log-text")).to_have_text("task 2\n")
    expect(page.get_by_role("link", name="task 2")).to_have_attribute("aria-current", "page")


def test_an_address_confirmed_from_the_account_page_is_where_a_job_from_the_form_tells_its_end(
    people: Any, sign_in: Any, job_loop: Any
) -> None:
    from django.core import mail

    page = sign_in("alice")
    page.goto("/me/")
    page.get_by_label("Email address").fill("alice@example.org")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".messages")).to_contain_text(
        "A confirmation link was sent to alice@example.org; notify writes to no address"
    )
    [asked] = [m for m in mail.outbox if m.to == ["alice@example.org"]]
    page.goto(re.search(r"http://\S+?(/me/email/confirm/\S+/)", asked.body)[1])
    page.get_by_role("button", name="Confirm alice@example.org").click()
    expect(page.locator(".messages")).to_contain_text("now write to alice@example.org")
    page.get_by_label("Main").get_by_role("link", name="Submit").click()
    boxes = page.get_by_role("group", name="Email me when it")
    expect(boxes).to_contain_text("to alice@example.org")
    page.fill("#f-name", "mailed")
    page.fill("#f-command", "echo hi")
    boxes.get_by_label("ends").check()
    page.get_by_role("button", name="Submit job").click()

    job = job_page(page)
    assert job.spec["notify"] == ["end"]
    expect(page.locator(".facts")).to_contain_text("Email on end → alice@example.org")
    # Sent just after the job ends: the page follows it there without a reload.
    expect(page.locator("#job-state")).to_have_text("Succeeded", timeout=20_000)
    expect(page.locator(".notifications")).to_contain_text("end: sent", timeout=20_000)
    assert [m.to for m in mail.outbox if "mailed" in m.subject] == [["alice@example.org"]]
