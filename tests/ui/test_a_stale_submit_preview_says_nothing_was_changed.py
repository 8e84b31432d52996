"""The submit form's side panel asks the server, as one types, whether the job would start
(an htmx POST, sent with the page's CSRF token). Once its user signed out and in again in
another tab, that token is stale: the server's 403 (the app's "Nothing was changed" page) was
dropped by htmx, which swaps no 4xx, and the panel went on showing its last answer as if it
still held. A stale preview now answers with that page's words as a fragment, which the page
shows in the panel (the answer names how it is swapped: HX-Reswap)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from playwright.sync_api import expect

from tests.ui.test_a_form_from_before_signing_in_again_changes_nothing_and_says_so import (
    sign_in,
    sign_out_and_in_again,
    token_of,
)

PREVIEW = {"mode": "form", "kind": "training", "name": "probe", "command": "echo hi"}


@pytest.fixture
def alice(people: Any) -> Client:
    client = Client(enforce_csrf_checks=True)
    sign_in(client, "alice")
    return client


def test_a_stale_preview_is_answered_with_a_fragment_htmx_swaps(alice: Client) -> None:
    stale = token_of(alice.get("/submit/"))
    sign_out_and_in_again(alice, "alice", stale)

    response = alice.post(
        "/submit/preview/",
        PREVIEW,
        headers={
            "HX-Request": "true",
            "X-CSRFToken": stale,
            "HX-Current-URL": "http://testserver/submit/?mode=form",
            "Referer": "http://testserver/submit/?mode=form",
        },
    )

    body = response.content.decode()
    assert response.status_code == 403  # still a refusal, for anything but this page's htmx
    assert response.headers.get("HX-Reswap") == "innerHTML"
    assert "<html" not in body  # a fragment for the panel, not a page inside it
    assert "Nothing was changed" in body
    assert 'href="/submit/?mode=form"' in body


def test_a_stale_form_without_htmx_still_gets_the_whole_page(alice: Client) -> None:
    stale = token_of(alice.get("/submit/"))
    sign_out_and_in_again(alice, "alice", stale)

    response = alice.post("/submit/", {**PREVIEW, "csrfmiddlewaretoken": stale})

    page = response.content.decode()
    assert response.status_code == 403
    assert "HX-Reswap" not in response.headers
    assert "<html" in page and "Nothing was changed" in page


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_preview_panel_says_nothing_was_changed_once_the_page_is_stale(
    people: Any, local_cluster: Any, sign_in: Any
) -> None:
    page = sign_in("alice")
    page.goto("/submit/")
    page.fill("#f-name", "probe")
    page.fill("#f-command", "echo hi")
    expect(page.locator("#preview [data-verdict]")).to_have_attribute("data-verdict", "starts")

    other = page.context.new_page()  # another tab: signs out and in again
    other.goto("/")
    other.get_by_role("button", name="Sign out").click()
    other.fill("#id_username", "alice")
    other.fill("#id_password", "pw-alice")
    other.click("button[type=submit]")
    other.wait_for_url("**/")

    page.fill("#f-command", "echo changed")
    page.press("#f-command", "Tab")  # a change: the preview asks again

    panel = page.locator("#preview")
    expect(panel).to_contain_text("Nothing was changed")
    expect(panel.locator("[data-verdict]")).to_have_count(0)  # the last answer is gone
    again = panel.get_by_role("link", name="Open the page again")
    expect(again).to_have_attribute("href", re.compile(r"^/submit/"))
    again.click()
    page.fill("#f-name", "probe")
    page.fill("#f-command", "echo hi")
    expect(page.locator("#preview [data-verdict]")).to_have_attribute("data-verdict", "starts")
