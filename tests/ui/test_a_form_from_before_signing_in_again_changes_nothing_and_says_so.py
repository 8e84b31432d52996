"""A page left open while its user signs out and in again (in another tab, or after the
session ended) holds forms whose CSRF token Django rotated at the sign-in: sending one is
refused. That refusal is the app's page, saying that nothing was changed and linking back to
the page to open again, not Django's bare "CSRF verification failed. Request aborted."."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.conftest import spec

TOKEN = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def token_of(page: Any) -> str:
    match = TOKEN.search(page.content.decode())
    assert match, "the page has no form with a CSRF token"
    return match.group(1)


def sign_in(client: Client, username: str) -> None:
    form = client.get("/login/")
    answer = client.post(
        "/login/",
        {"username": username, "password": f"pw-{username}", "csrfmiddlewaretoken": token_of(form)},
    )
    assert answer.status_code == 302


def sign_out_and_in_again(client: Client, username: str, token: str) -> None:
    assert client.post("/logout/", {"csrfmiddlewaretoken": token}).status_code == 302
    sign_in(client, username)


@pytest.fixture
def browser(people: Any) -> Client:
    """One browser (one cookie jar) that checks CSRF tokens as a real one does."""
    client = Client(enforce_csrf_checks=True)
    sign_in(client, "alice")
    return client


@pytest.mark.parametrize("action", ["suspend", "cancel"])
def test_a_job_action_from_a_page_drawn_before_signing_in_again_is_refused_with_a_clear_page(
    browser: Client, people: Any, action: str
) -> None:
    job = submit_job(people["alice"], spec(name="left-open")).job
    stale = token_of(browser.get(f"/jobs/{job.pk}/"))
    sign_out_and_in_again(browser, "alice", stale)

    response = browser.post(
        f"/jobs/{job.pk}/{action}/",
        {"csrfmiddlewaretoken": stale},
        headers={"Referer": f"http://testserver/jobs/{job.pk}/"},
    )

    page = response.content.decode()
    assert response.status_code == 403
    assert "CSRF verification failed" not in page
    assert "Nothing was changed" in page
    assert f'href="/jobs/{job.pk}/"' in page  # back to the page, to open it again
    assert "Sign out" in page  # the app's own page, signed in
    assert Job.objects.get(pk=job.pk).state == Job.State.PENDING


def test_a_stale_team_form_links_back_to_the_team_page(browser: Client, people: Any) -> None:
    dana = Client(enforce_csrf_checks=True)
    sign_in(dana, "dana")
    stale = token_of(dana.get("/teams/vision/"))
    sign_out_and_in_again(dana, "dana", stale)

    # No Referer (a browser may send none): the page of what the form changes.
    response = dana.post(
        "/teams/vision/quotas/",
        {"csrfmiddlewaretoken": stale, "gpu_model": "SIM-A100", "nominal_gpus": "1"},
    )

    page = response.content.decode()
    assert response.status_code == 403
    assert "Nothing was changed" in page
    assert 'href="/teams/vision/"' in page


def test_the_same_page_opened_again_works(browser: Client, people: Any) -> None:
    job = submit_job(people["alice"], spec(name="left-open")).job
    sign_out_and_in_again(browser, "alice", token_of(browser.get(f"/jobs/{job.pk}/")))

    fresh = token_of(browser.get(f"/jobs/{job.pk}/"))
    response = browser.post(f"/jobs/{job.pk}/suspend/", {"csrfmiddlewaretoken": fresh})

    assert response.status_code == 302
    assert Job.objects.get(pk=job.pk).state == Job.State.SUSPENDED


def test_a_sign_in_form_left_open_while_signing_in_elsewhere_says_so(people: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    stale = token_of(client.get("/login/"))
    sign_in(client, "alice")  # in another tab

    response = client.post(
        "/login/", {"username": "alice", "password": "pw-alice", "csrfmiddlewaretoken": stale}
    )

    assert response.status_code == 403
    assert "Nothing was changed" in response.content.decode()
    assert 'href="/"' in response.content.decode()
