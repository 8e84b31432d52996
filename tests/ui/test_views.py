"""Server-side behaviour of the polled fragments, through Django's test client."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin

import pytest
from django.test import Client

from queue_service.clusters.models import Cluster, Node
from queue_service.jobs.dispatch import MAX_LOG_OFFSET, read_logs
from queue_service.jobs.models import Job, JobArray
from queue_service.jobs.services import submit_job, suspend_job, update_job
from queue_service.jobs.spec import duration_text
from queue_service.tenancy.models import Quota
from tests.conftest import spec


@pytest.fixture
def alice(people: Any) -> Client:
    client = Client()
    client.force_login(people["alice"])
    return client


class FormValues(HTMLParser):
    """What a browser sends for the first form it is fed: its inputs (the ticked radios and
    boxes only), each select's selected option (else its first), its textareas."""

    def __init__(self) -> None:
        super().__init__()
        self.data: list[tuple[str, str]] = []
        self.inside = self.done = False
        self.select: list[Any] | None = None  # [name, first, selected]
        self.option: list[Any] | None = None  # [value, selected, text]
        self.textarea: list[str] | None = None  # [name, text]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.inside = self.inside or (tag == "form" and not self.done)
        if not self.inside or ("name" not in a and tag != "option"):
            return
        kind = a.get("type", "text")
        if tag == "input" and (kind not in ("radio", "checkbox") or "checked" in a):
            if kind not in ("submit", "button"):
                self.data.append((a["name"], a.get("value", "on")))
        elif tag == "select":
            self.select = [a["name"], None, None]
        elif tag == "option" and self.select is not None:
            self.option = [a.get("value"), "selected" in a, ""]
        elif tag == "textarea":
            self.textarea = [a["name"], ""]

    def handle_data(self, data: str) -> None:
        for open_ in (self.textarea, self.option):
            if open_ is not None:
                open_[-1] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self.inside:
            self.inside, self.done = False, True
        elif tag == "option" and self.select is not None and self.option is not None:
            value = self.option[0] if self.option[0] is not None else self.option[2]
            self.select[1] = value if self.select[1] is None else self.select[1]
            self.select[2] = value if self.option[1] else self.select[2]
            self.option = None
        elif tag == "select" and self.select is not None:
            name, first, chosen = self.select
            self.data.append((name, chosen if chosen is not None else first or ""))
            self.select = None
        elif tag == "textarea" and self.textarea is not None:
            self.data.append((self.textarea[0], self.textarea[1].removeprefix("\n")))
            self.textarea = None


def posted(page: str, start: str = '<form id="submit-form"') -> dict[str, list[str]]:
    """What a browser sends for the first form of `page` from `start` on."""
    parser = FormValues()
    parser.feed(page[page.index(start) :])
    out: dict[str, list[str]] = {}
    for name, value in parser.data:
        if name != "csrfmiddlewaretoken":  # the test client checks none
            out.setdefault(name, []).append(value)
    return out


def test_a_log_the_cluster_cannot_return_is_reported_and_asked_again_later(
    alice: Client, people: Any, local_cluster: Any
) -> None:
    job = submit_job(people["alice"], spec()).job
    # An id the local backend refuses: its logs() raises BackendError.
    Job.objects.filter(pk=job.pk).update(cluster=local_cluster, external_id="../x", state="running")
    response = alice.get(f"/jobs/{job.pk}/log/?offset=7", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200
    assert "The cluster did not return the log (not a local job id" in html
    assert "offset=7" in html and "every 10s" in html  # same offset, slower
    download = alice.get(f"/jobs/{job.pk}/log/download/")
    assert download.status_code == 502
    assert b"not a local job id" in download.content


def test_a_finished_jobs_log_with_nothing_more_to_read_stops_polling(
    alice: Client, people: Any, local_cluster: Any
) -> None:
    job = submit_job(people["alice"], spec()).job
    Job.objects.filter(pk=job.pk).update(state="failed")  # never reached a cluster
    html = alice.get(f"/jobs/{job.pk}/log/?offset=0").content.decode()
    assert 'data-eof="true"' in html and "hx-trigger" not in html


def test_a_poll_without_a_session_sends_the_page_to_sign_in(people: Any) -> None:
    response = Client().get(
        "/live/queue/?state=all",
        headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/queue/?state=all"},
    )
    assert response.status_code == 200
    assert response["HX-Redirect"] == "/login/?next=/queue/%3Fstate%3Dall"
    plain = Client().get("/queue/")
    assert (plain.status_code, plain["Location"]) == (302, "/login/?next=/queue/")


@pytest.mark.parametrize(
    "path", ["/live/dashboard/", "/live/queue/", "/live/clusters/", "/submit/", "/me/", "/teams/"]
)
def test_every_page_needs_a_session(path: str, db: Any) -> None:
    response = Client().get(path)
    assert response.status_code == 302 and response["Location"].startswith("/login/?next=")


@pytest.mark.parametrize(
    ("sent", "data", "back"),
    [
        ("/jobs/{pk}/suspend/", {}, "/jobs/{pk}/"),
        ("/jobs/{pk}/update/", {"time_limit": "2h"}, "/jobs/{pk}/"),
        ("/jobs/{pk}/cancel/", {}, "/jobs/{pk}/"),
        ("/me/tokens/", {"name": "laptop"}, "/me/"),
        ("/teams/vision/members/bob/remove/", {}, "/teams/vision/"),
        ("/submit/", {"name": "x", "command": "true"}, "/submit/"),
    ],
    ids=["suspend", "update", "cancel", "token", "member", "submit"],
)
def test_a_form_sent_after_the_session_ended_signs_in_back_to_its_page_not_to_a_405(
    people: Any, sent: str, data: dict[str, str], back: str
) -> None:
    job = submit_job(people["alice"], spec(name="waits")).job
    sent, back = sent.format(pk=job.pk), back.format(pk=job.pk)
    browser = Client()  # the session ended while the page was open

    refused = browser.post(sent, data)

    assert (refused.status_code, refused["Location"]) == (302, f"/login/?next={quote(back)}")
    signed_in = browser.post("/login/", {"username": "dana", "password": "pw-dana", "next": back})
    assert signed_in["Location"] == back
    assert browser.get(back).status_code == 200
    assert Job.objects.get().state == Job.State.PENDING  # nothing was done unsigned


def test_a_form_sent_after_the_session_ended_goes_back_to_the_page_it_was_sent_from(
    people: Any,
) -> None:
    job = submit_job(people["alice"], spec(name="waits")).job
    suspend, page = f"/jobs/{job.pk}/suspend/", f"/jobs/{job.pk}/"

    def back_after(**headers: str) -> str:
        location = Client().post(suspend, headers=headers)["Location"]
        assert location.startswith("/login/?next="), location
        return location.removeprefix("/login/?next=")

    assert back_after(Referer="http://testserver/queue/?state=all") == "/queue/%3Fstate%3Dall"
    # Another site's page is no way back, nor a page drawn at a POST-only URL (a refused update).
    assert back_after(Referer="http://elsewhere.example/queue/") == quote(page)
    assert back_after(Referer=f"http://testserver/jobs/{job.pk}/update/") == quote(page)
    # The same for a poll of a page drawn there.
    drawn_at = f"http://testserver/jobs/{job.pk}/update/"
    poll = Client().get(
        f"/jobs/{job.pk}/live/", headers={"HX-Request": "true", "HX-Current-URL": drawn_at}
    )
    assert poll["HX-Redirect"] == f"/login/?next={quote(page)}"


def test_the_sign_in_page_with_itself_as_next_sends_one_signed_in_to_the_dashboard(
    alice: Client,
) -> None:
    # Django's LoginView raised on this "redirection loop": a 500.
    again = alice.get("/login/?next=/login/")
    assert (again.status_code, again["Location"]) == (302, "/")
    signing_in = Client().post(
        "/login/", {"username": "alice", "password": "pw-alice", "next": "/login/?x=1"}
    )
    assert (signing_in.status_code, signing_in["Location"]) == (302, "/")


def test_a_form_sent_twice_makes_one_job_and_an_edited_resend_a_new_one(alice: Client) -> None:
    form = {"mode": "form", "form_token": "t1", "kind": "training", "name": "twice",
            "command": "echo hi", "nodes": "1", "gpus_per_node": "1"}  # fmt: skip
    first = alice.post("/submit/", form)
    second = alice.post("/submit/", form)
    assert first.status_code == second.status_code == 302
    assert first["Location"] == second["Location"]
    assert Job.objects.count() == 1
    edited = alice.post("/submit/", {**form, "name": "twice-edited"})
    assert edited["Location"] != first["Location"]
    assert Job.objects.count() == 2


def test_a_bad_env_line_is_shown_with_the_apis_messages_for_the_other_fields(
    alice: Client,
) -> None:
    response = alice.post(
        "/submit/",
        {"mode": "form", "kind": "training", "name": "x", "gpus_per_node": "99", "env": "oops"},
    )
    html = response.content.decode()
    assert response.status_code == 400
    assert "line 1: expected NAME=value" in html
    assert "This field is required." in html  # command
    assert "Ensure this value is less than or equal to 16." in html
    assert not Job.objects.exists()


def _alias_bomb() -> str:
    """Nine levels of nine aliases: 9**9 (387 million) strings once expanded, 700 bytes."""
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join([*lines, "name: *i", "command: *i", ""])


HOSTILE_YAML = [
    ("alias bomb", _alias_bomb(), "holds more than 100,000 values"),
    ("nested past the recursion limit", "name: " + "[" * 5000 + "]" * 5000, "nested too deeply"),
    ("nested 40 deep", "name: x\ncommand: " + "[" * 40 + "]" * 40, "nested more than 32 levels"),
]


@pytest.mark.parametrize(
    ("case", "text", "message"), HOSTILE_YAML, ids=[c[0] for c in HOSTILE_YAML]
)
@pytest.mark.parametrize("path", ["/submit/", "/submit/preview/"])
def test_hostile_pasted_yaml_is_refused_without_expanding_it(
    alice: Client, case: str, text: str, message: str, path: str
) -> None:
    # The alias bomb used to hang the worker (str() of the expansion, gigabytes), and deep
    # nesting to end in a RecursionError: a 500.
    response = alice.post(path, {"mode": "yaml", "yaml": text})
    assert response.status_code == (400 if path == "/submit/" else 200)
    assert message in response.content.decode()
    assert Job.objects.count() == 0


NOT_JSON = [
    # A value tagged a date is a date to YAML (a bare one is text, as in JSON), a set a set:
    # the double-submit key, a digest of the document as JSON, was a TypeError (a 500)
    # before the API could refuse them.
    ("a date as the name", "name: !!timestamp 2024-06-01\ncommand: [/bin/true]\n",
     "line 1: name: expected a string"),
    ("a date as the time limit",
     "name: x\ncommand: [/bin/true]\ntime_limit: !!timestamp 2024-06-01\n",
     "line 3: time_limit: expected a duration"),
    ("a set as the environment", "name: x\ncommand: [/bin/true]\nenv: !!set {A, B}\n",
     "line 3: env: must be a mapping of NAME to value"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "text", "says"), NOT_JSON, ids=[c[0] for c in NOT_JSON])
def test_pasted_yaml_with_values_json_cannot_hold_is_refused_with_the_apis_listing(
    alice: Client, case: str, text: str, says: str
) -> None:
    response = alice.post("/submit/", {"mode": "yaml", "form_token": "f00d", "yaml": text})
    assert response.status_code == 400
    assert "The file has problems" in response.content.decode()
    assert says in html.unescape(response.content.decode())
    assert not Job.objects.exists()


def test_pasted_yaml_with_a_number_key_beside_the_fields_is_refused_naming_it_as_the_api_does(
    alice: Client,
) -> None:
    # A number key beside text keys once broke the sort of the keys: a 500.
    form = {"mode": "yaml", "form_token": "f00d", "yaml": "name: x\ncommand: [/bin/true]\n1: a\n"}
    first, again = alice.post("/submit/", form), alice.post("/submit/", form)  # a double click
    assert first.status_code == again.status_code == 400
    assert "unknown field" in first.content.decode()
    assert not Job.objects.exists()


@pytest.fixture
def dana(people: Any) -> Client:
    client = Client()
    client.force_login(people["dana"])  # vision's team admin
    return client


PERIODS = [
    ("to=0001-01-01", "Dates run from 2000-01-01 to today."),
    ("from=9999-12-31&to=9999-12-31", "Dates run from 2000-01-01 to today."),
    ("from=1999-12-31", "Dates run from 2000-01-01 to today."),
    ("to=31/01/2025", "Dates look like 2025-01-31."),
    ("from=2024-01-01&to=2025-06-01", "At most 366 days at once."),
]


@pytest.mark.parametrize(("query", "message"), PERIODS, ids=[q for q, _ in PERIODS])
def test_a_report_period_out_of_range_is_explained_not_a_server_error(
    dana: Client, query: str, message: str
) -> None:
    # Days near date.min or date.max overflowed the report's arithmetic: a 500.
    page = dana.get(f"/teams/vision/?{query}")
    assert page.status_code == 200
    assert message in page.content.decode()
    download = dana.get(f"/teams/vision/usage.csv?{query}")
    assert download.status_code == 400
    assert download.content.decode() == message


def quota_form(page: str, model: str) -> dict[str, list[str]]:
    """What the page's form for its `model` quota sends."""
    return posted(page, f'<div class="quota-edit" data-model="{model}">')


def test_staff_emptying_borrow_up_to_makes_the_quota_unlimited_as_the_page_draws_it(
    people: Any, dana: Client
) -> None:
    root = client_of(people["staff"])
    changed = root.post(
        "/teams/vision/quotas/",
        {"gpu_model": "SIM-A100", "nominal_gpus": "8", "borrowing_limit_gpus": ""},
    )
    added = root.post(  # the form that adds a quota
        "/teams/vision/quotas/",
        {"adding": "1", "gpu_model": "*", "nominal_gpus": "4", "borrowing_limit_gpus": ""},
    )

    assert changed.status_code == added.status_code == 302
    limits = Quota.objects.filter(team__slug="vision").values_list(
        "gpu_model", "borrowing_limit_gpus"
    )
    assert dict(limits) == {"SIM-A100": None, "*": None}
    page = root.get("/teams/vision/").content.decode()
    assert quota_form(page, "SIM-A100")["borrowing_limit_gpus"] == [""]  # the box drawn empty
    # A team admin may not: set_quota asks for a limit within the site's ceiling.
    refused = dana.post(
        "/teams/vision/quotas/", {"gpu_model": "*", "nominal_gpus": "4", "borrowing_limit_gpus": ""}
    )
    assert refused.status_code == 400
    assert "a team admin must give a limit: at most" in html.unescape(refused.content.decode())
    assert Quota.objects.get(team__slug="vision", gpu_model="*").borrowing_limit_gpus is None


def test_a_refused_quota_change_shows_what_was_typed_in_its_form(dana: Client) -> None:
    typed = {"gpu_model": "SIM-A100", "nominal_gpus": "40", "borrowing_limit_gpus": "6",
             "lending_limit_gpus": "", "max_running_jobs": "3"}  # fmt: skip

    response = dana.post("/teams/vision/quotas/", typed)

    page = response.content.decode()
    assert response.status_code == 400
    assert "may add up to 32 GPUs" in page  # vision's ceiling
    assert quota_form(page, "SIM-A100") == {k: [v] for k, v in typed.items()}
    assert Quota.objects.get(team__slug="vision").nominal_gpus == 8  # nothing changed
    # A refused new quota: the adding form open again, as typed.
    new = {"adding": "1", "gpu_model": "*", "nominal_gpus": "30", "borrowing_limit_gpus": "2"}
    page = dana.post("/teams/vision/quotas/", new).content.decode()
    assert posted(page, '<details class="more" open>') == {k: [v] for k, v in new.items()}


def test_a_log_poll_past_a_terabyte_asks_from_the_cap(
    alice: Client, people: Any, local_cluster: Any
) -> None:
    # Unbounded, such an offset reached the backends' seeks (SFTP packs it in 64 bits).
    job = submit_job(people["alice"], spec()).job
    html = alice.get(f"/jobs/{job.pk}/log/?offset={10**30}").content.decode()
    assert f"offset={MAX_LOG_OFFSET}" in html
    with pytest.raises(ValueError, match="a log offset runs from 0 to 1099511627776"):
        read_logs(job, offset=MAX_LOG_OFFSET + 1, limit=10, stream="stdout")


@pytest.mark.parametrize("source", ["not-a-uuid", "0" * 40, "00000000-0000-0000-0000-000000000000"])
def test_copying_from_something_that_is_not_a_visible_job_is_a_404(
    alice: Client, source: str
) -> None:
    assert alice.get(f"/submit/?from={source}").status_code == 404


def test_a_job_submitted_from_a_copy_names_its_original(alice: Client, people: Any) -> None:
    original = submit_job(people["bob"], spec(name="bobs", gpus_per_node=2)).job
    page = alice.get(f"/submit/?mode=yaml&from={original.pk}").content.decode()
    assert f'name="from" value="{original.pk}"' in page
    assert "team: vision" in page and "gpus_per_node: 2" in page

    text = "name: alices\ngpus_per_node: 4\ncommand: [/bin/true]\n"
    response = alice.post("/submit/", {"mode": "yaml", "yaml": text, "from": str(original.pk)})

    assert response.status_code == 302
    copy = Job.objects.get(name="alices")
    assert copy.events.get().message == f"submitted by alice as a copy of job {original.pk}"
    # Charlie cannot copy a job he cannot see; nothing is stored.
    charlie = Client()
    charlie.force_login(people["charlie"])
    refused = charlie.post("/submit/", {"mode": "yaml", "yaml": text, "from": str(original.pk)})
    assert refused.status_code == 404
    assert Job.objects.count() == 2


def test_a_copied_mig_jobs_yaml_is_submitted_as_it_is_shown(alice: Client, people: Any) -> None:
    body = spec(name="mig-agent", kind="agent", mig_profile="1g.10gb")
    del body["gpus_per_node"]
    original = submit_job(people["alice"], body).job
    page = alice.get(f"/submit/?mode=yaml&from={original.pk}").content.decode()
    shown = html.unescape(re.search(r'<textarea id="f-yaml"[^>]*>(.*?)</textarea>', page, re.S)[1])
    assert "gpus_per_node: 0" in shown  # as stored

    response = alice.post("/submit/", {"mode": "yaml", "yaml": shown, "from": str(original.pk)})

    assert response.status_code == 302, response.content.decode()[:2000]
    assert Job.objects.exclude(pk=original.pk).get().spec == original.spec


def copied_unchanged(client: Client, original: Job) -> tuple[str, Any]:
    """Open "Resubmit as a copy" and submit it as it opens: the page, and the response."""
    page = client.get(f"/submit/?from={original.pk}").content.decode()
    return page, client.post("/submit/", posted(page))


def copy_note(page: str) -> str:
    found = re.search(r'<p id="copy-note".*?</p>', page, re.S)
    return words(found[0]) if found else ""


def test_a_copy_the_form_holds_exactly_opens_in_the_form(alice: Client, people: Any) -> None:
    original = submit_job(
        people["alice"],
        spec(name="plain", gpus_per_node=2, env={"SEED": "7"}, time_limit="90m"),
    ).job

    page, response = copied_unchanged(alice, original)

    assert 'name="mode" value="form"' in page and copy_note(page) == ""
    assert response.status_code == 302
    copy = Job.objects.exclude(pk=original.pk).get()
    # The same job, its argv as one shell line that runs it (tests/ui/test_forms.py).
    assert {**copy.spec, "command": original.spec["command"]} == original.spec


def test_a_copy_keeps_the_spec_fields_the_form_has_no_input_for_by_opening_as_yaml(
    alice: Client, people: Any
) -> None:
    original = submit_job(
        people["alice"],
        spec(
            name="nccl", gpus_per_node=2, nccl_debug=True,
            retries={"max": 1, "on": ["preemption"]}, env={"OPTS": "--a\nB=c"},
        ),
    ).job  # fmt: skip

    page, response = copied_unchanged(alice, original)

    assert 'name="mode" value="yaml"' in page
    assert copy_note(page) == (
        "Opened as YAML: this job has settings the form cannot show"
        " (env.OPTS; nccl_debug; retries.on)."
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Job.objects.exclude(pk=original.pk).get().spec == original.spec
    # The Form tab still opens the form, saying what it would change.
    tab = re.search(r'<a href="([^"]*)"[^>]*>Form</a>', page)[1]
    form = alice.get(html.unescape(tab)).content.decode()
    assert 'name="mode" value="form"' in form
    assert "a copy sent from the form would lose or change them" in copy_note(form)


def test_a_copy_of_a_mig_job_stays_a_mig_job_while_its_mig_nodes_are_drained(
    alice: Client, people: Any, local_cluster: Any
) -> None:
    Node.objects.create(
        cluster=local_cluster, name="mig1", gpu_model="A100-SXM4-80GB", gpus=1, mig_enabled=True,
        mig=[{"gpu": 0, "profile": "1g.10gb", "start": 0, "size": 1}],
        state=Node.State.DRAIN, reason="maintenance",
    )  # fmt: skip
    body = spec(name="mig-agent", kind="agent", mig_profile="1g.10gb")
    del body["gpus_per_node"]
    original = submit_job(people["alice"], body).job

    page, response = copied_unchanged(alice, original)

    # The form offers no 1g.10gb now: it would have made a whole-GPU job (a GPU of quota).
    assert "mig_profile: 1g.10gb is not offered now" in copy_note(page)
    assert response.status_code == 302, response.content.decode()[:2000]
    copy = Job.objects.exclude(pk=original.pk).get()
    assert (copy.spec["mig_profile"], copy.gpus) == ("1g.10gb", original.gpus)


def test_a_copy_asking_for_a_gpu_model_no_node_has_now_keeps_it(
    alice: Client, people: Any, local_cluster: Any
) -> None:
    original = submit_job(people["alice"], spec(name="h100-run", gpu_model="H100")).job

    page, response = copied_unchanged(alice, original)

    assert "gpu_model: H100 is not offered now" in copy_note(page)
    assert response.status_code == 302
    assert Job.objects.exclude(pk=original.pk).get().spec["gpu_model"] == "H100"


def test_a_copy_pinned_to_a_cluster_since_disabled_is_refused_saying_so(
    alice: Client, people: Any, local_cluster: Any
) -> None:
    original = submit_job(people["alice"], spec(name="pinned", cluster="local")).job
    Cluster.objects.filter(pk=local_cluster.pk).update(enabled=False)

    page, response = copied_unchanged(alice, original)

    assert "cluster: local is not offered now" in copy_note(page)
    assert response.status_code == 400  # as the API's copy: not silently on any cluster
    assert "no enabled cluster named &#x27;local&#x27;" in response.content.decode()
    assert Job.objects.count() == 1


def test_suspended_jobs_are_listed_under_their_own_filter_and_on_the_dashboard(
    alice: Client, people: Any
) -> None:
    held = submit_job(people["bob"], spec(name="held-one")).job
    submit_job(people["bob"], spec(name="waiting-one"))
    suspend_job(people["bob"], held)

    suspended = alice.get("/live/queue/?state=suspended").content.decode()
    pending = alice.get("/live/queue/?state=pending").content.decode()

    assert "held-one" in suspended and "waiting-one" not in suspended
    assert "waiting-one" in pending and "held-one" not in pending
    # The dashboard's "Waiting" lists it after the queue, with why.
    dashboard = alice.get("/live/dashboard/").content.decode()
    assert dashboard.index("waiting-one") < dashboard.index("held-one")
    assert "suspended by bob: resume it to queue it again" in dashboard


def test_a_job_page_shows_what_the_job_runs_after(alice: Client, people: Any) -> None:
    first = submit_job(people["bob"], spec(name="prep-data")).job
    elsewhere = submit_job(people["charlie"], spec(name="theirs")).job  # alice cannot see it
    second = submit_job(people["alice"], spec(name="train", after=[str(first.pk)])).job
    Job.objects.filter(pk=second.pk).update(
        spec={**second.spec, "after": [str(first.pk), str(elsewhere.pk)]}
    )

    page = alice.get(f"/jobs/{second.pk}/live/").content.decode()

    shown = re.search(r'<dd id="after">(.*?)</dd>', page, re.S)[1]
    assert f'href="/jobs/{first.pk}/"' in shown and "prep-data" in shown and "Pending" in shown
    assert f"<code>{elsewhere.pk}</code>" in shown and "theirs" not in shown


def test_the_form_sends_run_after_ids_and_hold_and_shows_their_errors_at_the_field(
    alice: Client, people: Any
) -> None:
    first = submit_job(people["alice"], spec(name="prep")).job
    form = {"kind": "training", "name": "train", "command": "true", "gpus_per_node": "1"}

    refused = alice.post("/submit/", {**form, "after": "not-an-id"})
    accepted = alice.post("/submit/", {**form, "after": f" {first.pk} , "})

    assert refused.status_code == 400
    field = re.search(r'id="f-after".*?</div>', refused.content.decode(), re.S)[0]
    assert "Must be a valid UUID." in html.unescape(field)
    assert accepted.status_code == 302
    assert Job.objects.get(name="train").spec["after"] == [str(first.pk)]
    held = alice.post("/submit/", {**form, "name": "staged", "hold": "on"})
    assert held.status_code == 302
    assert Job.objects.get(name="staged").state == Job.State.SUSPENDED


def test_the_account_page_links_the_gpuq_command_which_needs_no_session(
    alice: Client, db: Any
) -> None:
    from queue_service import cli

    page = alice.get("/me/").content.decode()
    assert 'href="/cli/gpuq"' in page and 'curl -sSo gpuq "$GPUQ_URL/cli/gpuq"' in page
    download = Client().get("/cli/gpuq")  # no session
    assert download.status_code == 200
    assert download.content == Path(cli.__file__).read_bytes()
    assert download.content.startswith(b"#!/usr/bin/env python3\n")
    assert Client().post("/cli/gpuq").status_code == 405


# --- changing a waiting job's priority or time limit, or its array's limit -----------------


def client_of(person: Any) -> Client:
    client = Client()
    client.force_login(person)
    return client


def words(page: str) -> str:
    """The page's text, without tags, as a reader sees it."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", page)).split())


def field(page: str, name: str) -> str:
    """One input of the update forms with its label, help and errors."""
    found = re.search(rf'<div class="field[^"]*">\s*<label for="f-{name}">.*?</div>', page, re.S)
    assert found is not None, page
    return found[0]


def update_form(job: Job, **typed: str) -> dict[str, str]:
    """The priority and time-limit form as the page shows it for `job`, with `typed` changes."""
    shown = {
        "priority": job.priority_class.name,
        "time_limit": duration_text(job.spec["time_limit"]),
    }
    return {**shown, **{f"was_{k}": v for k, v in shown.items()}, **typed}


def test_the_update_form_is_offered_only_to_those_who_manage_a_waiting_job(people: Any) -> None:
    job = submit_job(people["alice"], spec(name="waits", priority="low", time_limit="90m")).job
    cases = [
        ("alice", "pending", True),
        ("alice", "suspended", True),
        ("dana", "pending", True),  # vision's team admin
        ("bob", "pending", False),  # a teammate who may not manage it
        ("alice", "admitted", False),
        ("alice", "running", False),
    ]
    for who, state, offered in cases:
        Job.objects.filter(pk=job.pk).update(state=state)

        page = client_of(people[who]).get(f"/jobs/{job.pk}/").content.decode()
        live = client_of(people[who]).get(f"/jobs/{job.pk}/live/").content.decode()

        assert ('id="job-update"' in page, 'id="job-update"' in live) == (offered, offered)
        if offered:
            assert "Change priority or time limit" in page
            assert '<option value="low" selected>low</option>' in field(page, "priority")
            assert 'name="time_limit" type="text" value="90m"' in field(page, "time_limit")


def test_the_owner_changes_a_waiting_jobs_priority_and_time_limit_from_its_page(
    alice: Client, people: Any
) -> None:
    job = submit_job(people["alice"], spec(name="waits", time_limit="2h")).job

    response = alice.post(
        f"/jobs/{job.pk}/update/", update_form(job, priority="high", time_limit="30m")
    )

    assert (response.status_code, response["Location"]) == (302, f"/jobs/{job.pk}/")
    job.refresh_from_db()
    assert (job.priority_class.name, job.spec["priority"], job.spec["time_limit"]) == (
        "high",
        "high",
        1800,
    )
    page = words(alice.get(response["Location"]).content.decode())
    assert "Updated waits." in page
    assert "updated by alice: priority high (was normal); time limit 30m (was 2h)" in page


def test_a_team_admin_changes_a_suspended_job_which_stays_suspended(
    dana: Client, people: Any
) -> None:
    job = submit_job(people["alice"], spec(name="held", hold=True)).job

    response = dana.post(f"/jobs/{job.pk}/update/", update_form(job, priority="low"))

    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.state, job.priority_class.name) == (Job.State.SUSPENDED, "low")
    assert job.events.get(code="updated").message == "updated by dana: priority low (was normal)"


def test_only_what_was_changed_on_the_form_is_sent_so_a_page_left_open_undoes_nothing(
    alice: Client, people: Any
) -> None:
    job = submit_job(people["alice"], spec(name="waits", time_limit="2h")).job
    form = update_form(job, time_limit="1h")  # the page Alice opened: priority normal
    update_job(people["dana"], job, {"priority": "high"})  # meanwhile, Dana raises it

    alice.post(f"/jobs/{job.pk}/update/", form)

    job.refresh_from_db()
    assert (job.priority_class.name, job.spec["time_limit"]) == ("high", 3600)
    unchanged = alice.post(f"/jobs/{job.pk}/update/", update_form(job), follow=True)
    assert "Nothing changed" in words(unchanged.content.decode())
    assert job.events.filter(code="updated").count() == 2


def test_a_teammate_who_may_not_manage_gets_a_403_and_an_outsider_a_404(
    people: Any,
) -> None:
    job = submit_job(people["alice"], spec(name="alices", time_limit="2h", array="0-3%2")).job
    form = update_form(job, priority="high", time_limit="1h")

    for who, status in (("bob", 403), ("charlie", 404)):
        client = client_of(people[who])
        refused = client.post(f"/jobs/{job.pk}/update/", form)
        assert refused.status_code == status
        assert client.post(f"/jobs/{job.pk}/update/", {"max_running": "4"}).status_code == status
        assert client.post(f"/jobs/{job.pk}/update/", {"max_running": "x"}).status_code == status
        if who == "bob":
            assert "only the job's owner or a team admin can update it" in words(
                refused.content.decode()
            )
        else:
            assert "alices" not in refused.content.decode()
    job.refresh_from_db()
    assert (job.priority_class.name, job.spec["time_limit"], job.array.max_running) == (
        "normal",
        7200,
        2,
    )
    assert not job.events.filter(code="updated").exists()
    assert client_of(people["alice"]).get(f"/jobs/{job.pk}/update/").status_code == 405


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ({"time_limit": "soon"}, "'soon' is not a duration"),
        ({"time_limit": "400d"}, "d on this site"),
        # A limit shorter than the job's checkpoint interval is refused at the limit.
        ({"time_limit": "20m"}, "the checkpoint interval is longer than the time limit"),
    ],
)
def test_a_bad_time_limit_is_shown_at_its_field_with_what_was_typed_and_changes_nothing(
    alice: Client, people: Any, typed: dict[str, str], says: str
) -> None:
    checkpoint = {"dir": "/ckpt", "interval": "30m"}
    job = submit_job(
        people["alice"], spec(name="waits", time_limit="2h", checkpoint=checkpoint)
    ).job

    response = alice.post(f"/jobs/{job.pk}/update/", update_form(job, priority="high", **typed))

    page = response.content.decode()
    assert response.status_code == 400
    shown = field(page, "time_limit")
    assert says in html.unescape(shown)
    assert f'value="{typed["time_limit"]}"' in shown and 'aria-invalid="true"' in shown
    assert re.search(r'<option value="high" selected>', field(page, "priority"))
    assert '<details id="job-update" class="more update" hx-preserve open>' in page
    assert "Not updated: fix the value marked below." in words(page)
    job.refresh_from_db()
    assert (job.priority_class.name, job.spec["time_limit"]) == ("normal", 7200)
    assert not job.events.filter(code="updated").exists()


def test_the_stream_tabs_of_the_page_a_refused_update_draws_open_the_jobs_page(
    alice: Client, people: Any
) -> None:
    job = submit_job(people["alice"], spec(name="waits")).job
    update = f"http://testserver/jobs/{job.pk}/update/"  # where the browser shows the page
    refused = alice.post(update, update_form(job, time_limit="soon"))
    assert refused.status_code == 400
    tabs = re.search(r'<nav class="tabs" aria-label="Stream">.*?</nav>', refused.content.decode())

    links = [urljoin(update, html.unescape(h)) for h in re.findall(r'href="([^"]*)"', tabs[0])]

    page = f"http://testserver/jobs/{job.pk}/"
    assert links == [f"{page}?stream=stdout#log-h", f"{page}?stream=stderr#log-h"]
    assert alice.get(links[1]).status_code == 200  # the POST-only URL's would be a 405


def test_a_job_that_has_started_is_not_updated_and_the_page_says_why(
    alice: Client, people: Any
) -> None:
    job = submit_job(people["alice"], spec(name="started", time_limit="2h")).job
    form = update_form(job, priority="high")
    Job.objects.filter(pk=job.pk).update(state="admitted")  # the cycle admitted it meanwhile

    response = alice.post(f"/jobs/{job.pk}/update/", form, follow=True)

    assert response.redirect_chain == [(f"/jobs/{job.pk}/", 302)]
    page = words(response.content.decode())
    assert (
        "Not updated: a job's priority and time limit can change only while it waits"
        " (pending or suspended); this one is admitted." in page
    )
    assert "Change priority or time limit" not in page
    job.refresh_from_db()
    assert job.priority_class.name == "normal"


def test_the_array_card_changes_how_many_of_its_tasks_run_at_once_whatever_the_tasks_state(
    alice: Client, people: Any
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-3%2")).job
    Job.objects.filter(pk=first.pk).update(state="running")  # allowed whatever its state
    page = alice.get(f"/jobs/{first.pk}/").content.decode()
    card = re.search(r'<form id="array-limit".*?</form>', page, re.S)[0]
    assert 'name="max_running"' in card and 'value="2"' in card
    assert "Run at most at once Set empty: no limit" in words(card)  # around the input
    assert 'id="array-limit"' in alice.get(f"/jobs/{first.pk}/array/").content.decode()
    bob = client_of(people["bob"])
    assert 'id="array-limit"' not in bob.get(f"/jobs/{first.pk}/").content.decode()
    assert 'id="array-limit"' not in bob.get(f"/jobs/{first.pk}/array/").content.decode()

    raised = alice.post(f"/jobs/{first.pk}/update/", {"max_running": "3"}, follow=True)

    array = JobArray.objects.get(pk=first.array_id)
    assert (array.max_running, array.indices) == (3, "0-3%3")
    assert "indices 0-3%3, at most 3 at once" in words(raised.content.decode())
    assert "its array's tasks: at most 3 at once (was at most 2 at once)" in words(
        raised.content.decode()
    )
    alice.post(f"/jobs/{first.pk}/update/", {"max_running": " "})  # empty: no limit
    array.refresh_from_db()
    assert (array.max_running, array.indices) == (None, "0-3")


@pytest.mark.parametrize(
    ("typed", "says"),
    [("0", "greater than or equal to 1"), ("two", "A valid integer is required.")],
)
def test_a_bad_array_limit_is_shown_at_its_input_and_changes_nothing(
    alice: Client, people: Any, typed: str, says: str
) -> None:
    first = submit_job(people["alice"], spec(name="sweep", array="0-3%2")).job

    response = alice.post(f"/jobs/{first.pk}/update/", {"max_running": typed})

    page = response.content.decode()
    assert response.status_code == 400
    card = re.search(r'<form id="array-limit".*?</form>', page, re.S)[0]
    assert says in html.unescape(card)
    assert f'value="{typed}"' in card and 'aria-invalid="true"' in card
    assert JobArray.objects.get(pk=first.array_id).max_running == 2


# --- email (a spec's notify): the submit form's boxes, the account page, the job page ---------


def with_email(person: Any, address: str = "alice@example.org") -> Any:
    person.email = address
    person.save()
    return person


def notify_group(page: str) -> str:
    """The submit form's "Email me when it" boxes with their help and errors."""
    found = re.search(r'<fieldset id="f-notify".*?</fieldset>', page, re.S)
    assert found is not None, page
    return found[0]


def ticked_boxes(page: str) -> list[str]:
    return re.findall(r'name="notify" value="(\w+)"[^>]* checked', notify_group(page))


SUBMIT_FORM = {"kind": "training", "name": "mailed", "command": "true", "gpus_per_node": "1"}


def test_the_email_boxes_put_notify_in_the_stored_spec_and_a_copy_ticks_them_again(
    alice: Client, people: Any
) -> None:
    with_email(people["alice"])
    page = alice.get("/submit/").content.decode()
    assert "Email me when it starts ends fails is requeued" in words(notify_group(page))
    assert ticked_boxes(page) == []

    response = alice.post("/submit/", {**SUBMIT_FORM, "notify": ["end", "start"]})
    plain = alice.post("/submit/", {**SUBMIT_FORM, "name": "quiet"})

    assert response.status_code == plain.status_code == 302
    job = Job.objects.get(name="mailed")
    assert job.spec["notify"] == ["start", "end"]  # the API's order
    assert "notify" not in Job.objects.get(name="quiet").spec  # none ticked: none asked for
    copy = alice.get(f"/submit/?from={job.pk}").content.decode()
    assert ticked_boxes(copy) == ["start", "end"]
    again = alice.post("/submit/", {**SUBMIT_FORM, "from": str(job.pk), "notify": ["start", "end"]})
    assert again.status_code == 302
    assert Job.objects.filter(name="mailed").exclude(pk=job.pk).get().spec["notify"] == [
        "start",
        "end",
    ]


def test_the_email_boxes_say_where_the_mail_goes(alice: Client, people: Any) -> None:
    none_yet = notify_group(alice.get("/submit/").content.decode())
    assert "set an email address on your account page first" in words(none_yet)
    assert '<a href="/me/#email">set an email address' in none_yet

    with_email(people["alice"])
    page = notify_group(alice.get("/submit/").content.decode())
    assert "to alice@example.org, the address on your account page" in words(page)


def test_without_an_email_address_the_notify_error_is_shown_at_the_boxes_and_nothing_is_stored(
    alice: Client,
) -> None:
    response = alice.post("/submit/", {**SUBMIT_FORM, "notify": ["fail"]})

    page = response.content.decode()
    assert response.status_code == 400
    group = notify_group(page)
    assert (
        "your account has no email address to write to: set one on your account page"
        in html.unescape(words(group))
    )
    assert 'id="e-notify"' in group and 'aria-invalid="true"' in group
    assert ticked_boxes(page) == ["fail"]  # as ticked
    assert "The job was not submitted" in page
    assert not Job.objects.exists()


def test_the_account_page_mails_a_link_to_a_new_address_and_clears_one_at_once(
    alice: Client, people: Any, mailoutbox: list[Any]
) -> None:
    user = people["alice"]
    assert "No address yet: a job cannot email you until you set one." in words(
        alice.get("/me/").content.decode()
    )

    response = alice.post("/me/email/", {"email": "  alice@example.org \n"})

    assert (response.status_code, response["Location"]) == (302, "/me/")
    user.refresh_from_db()
    assert user.email == ""  # not until the link is followed
    page = words(alice.get("/me/").content.decode())
    assert (
        "A confirmation link was sent to alice@example.org; notify writes to no address until"
        " you follow it (it works for 3 days)." in page
    )  # the message, for the address without the whitespace around it
    assert "No address yet" in page
    [mail] = mailoutbox
    assert mail.to == ["alice@example.org"]
    link = re.search(r"http://\S+(/me/email/confirm/\S+/)", mail.body)[1]
    assert alice.post(link).status_code == 302
    user.refresh_from_db()
    assert user.email == "alice@example.org"
    page = words(alice.get("/me/").content.decode())
    assert "Jobs that ask for email now write to alice@example.org." in page  # the message
    assert "write to alice@example.org; your teammates see it on those jobs' pages." in page
    again = words(
        alice.post("/me/email/", {"email": "alice@example.org"}, follow=True).content.decode()
    )
    assert "Jobs that ask for email write to alice@example.org already." in again
    assert len(mailoutbox) == 1  # the address it has: nothing mailed
    cleared = alice.post("/me/email/", {"email": ""}, follow=True)
    user.refresh_from_db()
    assert user.email == ""
    assert "Email address removed: no job can email you now." in words(cleared.content.decode())
    assert len(mailoutbox) == 1


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ("not-an-email", "Enter a valid email address."),
        ("a" * 288 + "@example.org", "Ensure this value has at most 254 characters (it has 300)."),
        ("alice@example.org\nBcc: all@example.org", "Enter a valid email address."),
    ],
    ids=["not-an-address", "300-characters", "a-newline-inside"],
)
def test_a_bad_email_address_is_shown_in_the_card_with_what_was_typed_and_changes_nothing(
    alice: Client, people: Any, typed: str, says: str
) -> None:
    with_email(people["alice"], "alice@example.org")

    response = alice.post("/me/email/", {"email": typed})

    page = response.content.decode()
    assert response.status_code == 400
    card = re.search(r'<section class="card" id="email".*?</section>', page, re.S)[0]
    assert says in html.unescape(card)
    assert f'value="{html.escape(typed)}"' in card and 'aria-invalid="true"' in card
    assert "write to alice@example.org;" in words(card)  # still the stored one
    people["alice"].refresh_from_db()
    assert people["alice"].email == "alice@example.org"


def test_setting_the_email_address_needs_a_session_and_a_post(
    alice: Client, people: Any, mailoutbox: list[Any]
) -> None:
    anonymous = Client().post("/me/email/", {"email": "eve@example.org"})
    # Signed in, back to the account page: the form's POST-only URL would be a 405.
    assert (anonymous.status_code, anonymous["Location"]) == (302, "/login/?next=/me/")
    assert alice.get("/me/email/?email=eve@example.org").status_code == 405
    people["alice"].refresh_from_db()
    assert people["alice"].email == ""
    assert mailoutbox == []


def test_the_job_page_says_whom_it_emails_and_how_each_email_went(
    alice: Client, people: Any
) -> None:
    from datetime import UTC, datetime

    from queue_service.jobs.models import Notification

    with_email(people["alice"])
    job = submit_job(people["alice"], spec(name="mailed", notify=["start", "end", "fail"])).job
    at = datetime(2025, 3, 1, 19, 30, tzinfo=UTC)
    for event, state, extra in [
        ("start", "sent", {"sent_at": at, "attempts": 1}),
        ("fail", "failed", {"attempts": 8, "error": "the mail server answered 550 no such user"}),
        ("end", "pending", {}),
    ]:
        Notification.objects.create(
            job=job, event=event, to="alice@example.org", subject="s", body="b", state=state,
            next_attempt_at=at, **extra,
        )  # fmt: skip
    quiet = submit_job(people["alice"], spec(name="quiet")).job

    for who in ("alice", "bob"):  # the owner, and a teammate
        for url in (f"/jobs/{job.pk}/", f"/jobs/{job.pk}/live/"):
            page = words(client_of(people[who]).get(url).content.decode())
            assert (
                "Email on start, end, fail → alice@example.org"
                " start: sent 19:30"
                " fail: failed after 8 attempts: the mail server answered 550 no such user"
                " end: pending" in page
            )
    for url in (f"/jobs/{quiet.pk}/", f"/jobs/{quiet.pk}/live/"):
        # Only those who may change what it emails about see a quiet job's Email line.
        page = client_of(people["bob"]).get(url).content.decode()
        assert 'id="notify"' not in page and "alice@example.org" not in page
        assert "Email nothing Email me when it" in words(alice.get(url).content.decode())
    outsider = client_of(people["charlie"]).get(f"/jobs/{job.pk}/live/")
    assert outsider.status_code == 404 and b"alice@example.org" not in outsider.content


def test_the_job_page_shows_the_last_ten_emails_in_one_more_query(
    alice: Client, people: Any
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from queue_service.jobs.models import Notification

    with_email(people["alice"])
    mailed = submit_job(people["alice"], spec(name="mailed", notify="all")).job
    quiet = submit_job(people["alice"], spec(name="quiet")).job
    for n in range(12):
        Notification.objects.create(
            job=mailed, event="requeue", to=f"old{n}@example.org", subject="s", body="b",
            state="sent", sent_at=mailed.submitted_at, next_attempt_at=mailed.submitted_at,
        )  # fmt: skip

    with CaptureQueriesContext(connection) as without:
        alice.get(f"/jobs/{quiet.pk}/live/")
    with CaptureQueriesContext(connection) as with_notify:
        page = words(alice.get(f"/jobs/{mailed.pk}/live/").content.decode())

    assert len(with_notify) == len(without) + 1
    assert "Email on start, end, fail, requeue → alice@example.org" in page
    # The newest ten, newest last; each sent to another address than the owner's now.
    shown = re.findall(r"\(to (old\d+)@example.org\)", page)
    assert shown == [f"old{n}" for n in range(2, 12)]


def test_a_finished_jobs_page_polls_until_its_last_email_is_sent(
    alice: Client, people: Any
) -> None:
    from queue_service.jobs.models import Notification

    with_email(people["alice"])
    job = submit_job(people["alice"], spec(name="mailed", notify=["end"])).job
    Job.objects.filter(pk=job.pk).update(state="succeeded")
    note = Notification.objects.create(
        job=job, event="end", to="alice@example.org", subject="s", body="b",
        next_attempt_at=job.submitted_at,
    )  # fmt: skip

    assert "hx-trigger" in alice.get(f"/jobs/{job.pk}/live/").content.decode()
    Notification.objects.filter(pk=note.pk).update(state="sent", sent_at=job.submitted_at)
    assert "hx-trigger" not in alice.get(f"/jobs/{job.pk}/live/").content.decode()
    # Refused once and waiting out its backoff (up to hours): the page stops asking.
    Notification.objects.filter(pk=note.pk).update(state="pending", attempts=1)
    assert "hx-trigger" not in alice.get(f"/jobs/{job.pk}/live/").content.decode()
    Notification.objects.filter(pk=note.pk).update(state="sending")
    assert "hx-trigger" in alice.get(f"/jobs/{job.pk}/live/").content.decode()


# --- changing what a job emails about from its page (until it ends) -------------------------


def notify_form(page: str) -> str | None:
    """The job page's "Email me when it" form, if shown."""
    found = re.search(r'<form id="job-notify".*?</form>', page, re.S)
    return found[0] if found else None


def job_ticked(page: str) -> list[str]:
    form = notify_form(page)
    assert form is not None, page
    return re.findall(r'name="notify" value="(\w+)"[^>]* checked', form)


def notify_post(page: str, *ticked: str) -> dict[str, Any]:
    """What the page's form sends with `ticked` boxes: its hidden inputs as drawn."""
    form = notify_form(page)
    assert form is not None, page
    hidden = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', form))
    hidden.pop("csrfmiddlewaretoken", None)
    return {**hidden, "notify": list(ticked)}


def test_the_email_boxes_are_offered_to_those_who_manage_a_job_until_it_ends(
    people: Any,
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with_email(people["alice"])
    job = submit_job(people["alice"], spec(name="mailed", notify=["end", "fail"])).job
    cases = [
        ("alice", "pending", True),
        ("alice", "running", True),
        ("alice", "suspended", True),
        ("dana", "running", True),  # vision's team admin
        ("bob", "running", False),  # a teammate who may not manage it
        ("alice", "succeeded", False),
        ("alice", "cancelled", False),
    ]
    for who, state, offered in cases:
        Job.objects.filter(pk=job.pk).update(state=state)
        client = client_of(people[who])

        for url in (f"/jobs/{job.pk}/", f"/jobs/{job.pk}/live/"):
            page = client.get(url).content.decode()
            assert "Email on end, fail → alice@example.org" in words(page)  # shown to all
            assert (notify_form(page) is not None) == offered, (who, state)
            if offered:
                assert job_ticked(page) == ["end", "fail"]
                legend = "Email me when it" if who == "alice" else "Email alice when it"
                assert f"{legend} starts ends fails is requeued Save" in words(page)
                assert "hx-preserve" in notify_form(page)

    # A quiet job: "nothing", and the boxes, for those who manage it; no line for the others.
    quiet = submit_job(people["alice"], spec(name="quiet")).job
    Job.objects.filter(pk=quiet.pk).update(state="running")
    page = client_of(people["alice"]).get(f"/jobs/{quiet.pk}/live/").content.decode()
    assert "Email nothing Email me when it" in words(page) and job_ticked(page) == []
    assert 'id="notify"' not in client_of(people["bob"]).get(f"/jobs/{quiet.pk}/").content.decode()
    # The boxes cost the poll no query: as many as a finished job's, which has none.
    Job.objects.filter(pk=job.pk).update(state="succeeded")
    ended = submit_job(people["alice"], spec(name="ended")).job
    Job.objects.filter(pk=ended.pk).update(state="succeeded")
    alice = client_of(people["alice"])
    with CaptureQueriesContext(connection) as with_boxes:
        alice.get(f"/jobs/{quiet.pk}/live/")
    with CaptureQueriesContext(connection) as without:
        alice.get(f"/jobs/{ended.pk}/live/")
    assert len(with_boxes) == len(without)


def test_ticking_boxes_on_a_running_job_stores_notify_and_unticking_all_stores_none(
    alice: Client, people: Any
) -> None:
    with_email(people["alice"])
    job = submit_job(people["alice"], spec(name="quiet")).job
    Job.objects.filter(pk=job.pk).update(state="running")
    page = alice.get(f"/jobs/{job.pk}/").content.decode()

    response = alice.post(f"/jobs/{job.pk}/update/", notify_post(page, "end", "fail"))

    assert (response.status_code, response["Location"]) == (302, f"/jobs/{job.pk}/")
    job.refresh_from_db()
    assert (job.state, job.spec["notify"]) == ("running", ["end", "fail"])
    page = alice.get(response["Location"]).content.decode()
    assert "Updated quiet." in words(page)
    assert "Email on end, fail → alice@example.org" in words(page)
    assert "updated by alice: email on end, fail (was nothing)" in words(page)
    assert job_ticked(page) == ["end", "fail"]

    cleared = alice.post(f"/jobs/{job.pk}/update/", notify_post(page), follow=True)

    job.refresh_from_db()
    assert "notify" not in job.spec  # none ticked: none asked for, as at submit
    page = cleared.content.decode()
    assert "updated by alice: email on nothing (was end, fail)" in words(page)
    assert "Email nothing" in words(page) and job_ticked(page) == []

    unchanged = alice.post(f"/jobs/{job.pk}/update/", notify_post(page), follow=True)

    assert "Nothing changed: quiet already had those values." in words(unchanged.content.decode())
    assert job.events.filter(code="updated").count() == 2


def test_a_page_left_open_undoes_no_one_elses_email_change(alice: Client, people: Any) -> None:
    with_email(people["alice"])
    job = submit_job(people["alice"], spec(name="waits", notify=["end"])).job
    page = alice.get(f"/jobs/{job.pk}/").content.decode()  # Alice's page: email on end
    update_job(people["dana"], job, {"notify": ["start", "end", "fail"]})  # meanwhile, Dana

    alice.post(f"/jobs/{job.pk}/update/", update_form(job, priority="high"))
    job.refresh_from_db()
    assert (job.priority_class.name, job.spec["notify"]) == ("high", ["start", "end", "fail"])
    unchanged = alice.post(f"/jobs/{job.pk}/update/", notify_post(page, "end"), follow=True)

    job.refresh_from_db()
    assert job.spec["notify"] == ["start", "end", "fail"]
    assert "Nothing changed" in words(unchanged.content.decode())
    assert list(job.events.filter(code="updated").values_list("message", flat=True)) == [
        "updated by dana: email on start, end, fail (was end)",
        "updated by alice: priority high (was normal)",
    ]


def test_without_an_address_the_refusal_is_shown_at_the_boxes_and_nothing_changes(
    alice: Client, dana: Client, people: Any
) -> None:
    job = submit_job(people["alice"], spec(name="quiet")).job
    Job.objects.filter(pk=job.pk).update(state="running")
    page = alice.get(f"/jobs/{job.pk}/").content.decode()
    assert "set an email address on your account page first" in words(notify_form(page))

    response = alice.post(f"/jobs/{job.pk}/update/", notify_post(page, "end"))

    assert response.status_code == 400
    page = response.content.decode()
    form = notify_form(page)
    assert (
        "your account has no email address to write to: set one on your account page"
        in html.unescape(words(form))
    )
    assert '<a href="/me/#email">set an email address on your account page</a>' in form
    assert 'id="e-job-notify"' in form and 'aria-invalid="true"' in form
    assert job_ticked(page) == ["end"]  # as ticked
    assert "Not updated: fix the value marked below." in words(page)

    # A team admin is told whose address is missing (and not sent to an account page).
    page = dana.get(f"/jobs/{job.pk}/").content.decode()
    refused = dana.post(f"/jobs/{job.pk}/update/", notify_post(page, "fail", "requeue"))

    assert refused.status_code == 400
    form = notify_form(refused.content.decode())
    assert "alice has no email address to write to" in html.unescape(words(form))
    assert "Email alice when it" in words(form) and "/me/" not in form
    job.refresh_from_db()
    assert "notify" not in job.spec
    assert not job.events.filter(code="updated").exists()


def test_the_email_boxes_of_a_page_left_open_on_a_job_that_has_ended_change_nothing(
    alice: Client, people: Any
) -> None:
    with_email(people["alice"])
    job = submit_job(people["alice"], spec(name="done", notify=["end"])).job
    page = alice.get(f"/jobs/{job.pk}/").content.decode()
    Job.objects.filter(pk=job.pk).update(state="succeeded")  # it ended meanwhile

    response = alice.post(f"/jobs/{job.pk}/update/", notify_post(page, "end", "fail"), follow=True)

    page = response.content.decode()
    assert "Not updated: the job already ended (succeeded): nothing is left to tell." in words(page)
    assert notify_form(page) is None
    job.refresh_from_db()
    assert job.spec["notify"] == ["end"]


def test_a_teammate_posting_the_email_boxes_gets_a_403_and_an_outsider_a_404(
    people: Any,
) -> None:
    with_email(people["alice"])
    job = submit_job(people["alice"], spec(name="alices", notify=["end"])).job
    Job.objects.filter(pk=job.pk).update(state="running")
    form = {"notify_form": "1", "was_notify": "end", "notify": []}

    for who, status in (("bob", 403), ("charlie", 404)):
        refused = client_of(people[who]).post(f"/jobs/{job.pk}/update/", form)
        assert refused.status_code == status
        assert b"alice@example.org" not in refused.content

    job.refresh_from_db()
    assert job.spec["notify"] == ["end"]
    assert not job.events.filter(code="updated").exists()
    # The same form from the owner does what it says.
    assert client_of(people["alice"]).post(f"/jobs/{job.pk}/update/", form).status_code == 302
    job.refresh_from_db()
    assert "notify" not in job.spec


@pytest.mark.parametrize(
    ("kind", "external_id", "shown"),
    [
        # What squeue -j and scancel take, without the attempt that names its log files.
        ("slurm", "4242@0f5e7d3a-1b2c-4d5e-8f90-123456789abc.2", "4242"),
        ("slurm", "alice:4242@0f5e7d3a-1b2c-4d5e-8f90-123456789abc.1", "alice:4242"),
        ("slurm", "4242", "4242"),  # submitted before attempts named log files
        ("kubernetes", "ml/vcjob/gpuq-0f5e7d3a", "ml/vcjob/gpuq-0f5e7d3a"),
    ],
)
def test_the_job_page_shows_the_id_the_clusters_own_tools_take(
    alice: Client, people: Any, kind: str, external_id: str, shown: str
) -> None:
    cluster = Cluster.objects.create(name=f"c-{kind}", kind=kind, settings={})
    job = submit_job(people["alice"], spec()).job
    Job.objects.filter(pk=job.pk).update(
        state=Job.State.QUEUED, cluster=cluster, external_id=external_id
    )
    page = alice.get(f"/jobs/{job.pk}/live/").content.decode()
    assert f'<code id="external-id" title="{external_id}">{shown}</code>' in page
