"""The navigation highlights the section a page belongs to, whatever URL drew the page.

A refused form is answered with its page drawn again at the URL the form was posted to
(`/teams/vision/quotas/`, `/me/email/`, ...), so that its errors and what was typed show:
that is still the team's admin page, or the account page, and its tab stays highlighted.
"""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import pytest
from django.test import Client

from queue_service.jobs.services import submit_job
from tests.conftest import spec


class CurrentTabs(HTMLParser):
    """The text of the top bar's links marked `aria-current="page"`."""

    def __init__(self) -> None:
        super().__init__()
        self.in_topbar = False
        self.link: list[str] | None = None
        self.current: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "header" and "topbar" in (a.get("class") or "").split():
            self.in_topbar = True
        elif tag == "a" and self.in_topbar and a.get("aria-current") == "page":
            self.link = []

    def handle_data(self, data: str) -> None:
        if self.link is not None:
            self.link.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "header":
            self.in_topbar = False
        elif tag == "a" and self.link is not None:
            self.current.append("".join(self.link).strip())
            self.link = None


def current_tabs(response: Any) -> list[str]:
    parser = CurrentTabs()
    parser.feed(response.content.decode())
    return parser.current


@pytest.fixture
def dana(people: Any) -> Client:
    """Vision's team admin: every page and form below is hers to open and send."""
    client = Client()
    client.force_login(people["dana"])
    return client


@pytest.mark.parametrize(
    ("url", "tab"),
    [
        ("/", "Dashboard"),
        ("/submit/", "Submit"),
        ("/submit/?mode=yaml", "Submit"),
        ("/queue/?state=all", "Queue"),
        ("/clusters/", "Clusters"),
        ("/teams/", "Teams"),
        ("/teams/vision/", "Teams"),
        ("/me/", "dana"),  # the account link, named after who is signed in
    ],
)
def test_each_page_highlights_its_own_tab_and_no_other(dana: Client, url: str, tab: str) -> None:
    response = dana.get(url)

    assert response.status_code == 200
    assert current_tabs(response) == [tab]


REFUSED_FORMS = [
    # (what, posted to, form, status, the page's tab)
    ("a submit form with a field error", "/submit/",
     {"mode": "form", "kind": "training", "name": "x", "gpus_per_node": "99"}, 400, "Submit"),
    ("pasted YAML that does not parse", "/submit/", {"mode": "yaml", "yaml": "name: [x"},
     400, "Submit"),
    ("a quota over the team's ceiling", "/teams/vision/quotas/",
     {"gpu_model": "SIM-A100", "nominal_gpus": "40", "borrowing_limit_gpus": "6"}, 400, "Teams"),
    ("deleting a quota there is not", "/teams/vision/quotas/delete/", {"gpu_model": "H100"},
     400, "Teams"),
    ("adding no such user", "/teams/vision/members/", {"username": "nobody", "role": "member"},
     400, "Teams"),
    ("removing one who is not a member", "/teams/vision/members/charlie/remove/", {},
     400, "Teams"),
    ("an email address that is not one", "/me/email/", {"email": "not an address"}, 400, "dana"),
    ("a token without a name", "/me/tokens/", {"name": ""}, 400, "dana"),
    ("a new token, shown once at the URL it was made at", "/me/tokens/", {"name": "laptop"},
     200, "dana"),
    ("revoking a token there is not", "/me/tokens/999999/revoke/", {}, 404, "dana"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("what", "url", "form", "status", "tab"), REFUSED_FORMS, ids=[c[0] for c in REFUSED_FORMS]
)
def test_a_page_drawn_at_the_url_its_form_was_posted_to_highlights_its_own_tab(
    dana: Client, what: str, url: str, form: dict[str, str], status: int, tab: str
) -> None:
    response = dana.post(url, form)

    assert response.status_code == status  # the page itself, not a redirect to it
    assert current_tabs(response) == [tab]


def test_a_jobs_page_is_in_no_section_at_its_own_url_or_its_update_forms(
    dana: Client, people: Any
) -> None:
    # A job is reached from the dashboard and from the queue alike: no tab claims it.
    job = submit_job(people["alice"], spec(name="waits")).job

    own = dana.get(f"/jobs/{job.pk}/")
    refused = dana.post(f"/jobs/{job.pk}/update/", {"time_limit": "forever"})
    cancel = dana.get(f"/jobs/{job.pk}/cancel/")

    assert (own.status_code, refused.status_code, cancel.status_code) == (200, 400, 200)
    assert current_tabs(own) == current_tabs(refused) == current_tabs(cancel) == []
