"""An address set through the API, the account page or `gpuq me --email` is where a job's
`notify` writes only once its owner follows the link mailed to it (as GitHub and GitLab
confirm an address): otherwise anyone could have gpuq mail someone else's inbox. The link's
GET shows a page with a button that POSTs (mail scanners follow links); the link is signed,
works for 3 days, for the account it was sent for, and once: the request is stored until
its link is followed, another request replaces it, clearing the address drops it, and the
account (GET /api/v1/me/, the account page) shows it while it waits. Alice and Bob are in
vision, Charlie is language's admin."""

from __future__ import annotations

import html
import re
import time
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest
from django.core import signing
from django.test import Client
from django.utils import timezone

from queue_service.tenancy.models import PendingEmail
from queue_service.tenancy.services import EMAIL_CONFIRM_MAX_AGE, EMAIL_CONFIRM_SALT
from tests.conftest import spec
from tests.service.conftest import free_port

pytestmark = pytest.mark.django_db

LINK = re.compile(r"https?://\S+?(/me/email/confirm/[^/\s]+/)")


def with_email(person: Any, address: str) -> Any:
    person.email = address
    person.save()
    return person


def browser_of(person: Any) -> Client:
    client = Client()
    client.force_login(person)
    return client


def link_in(message: Any) -> str:
    """The path of the one confirmation link in a mail."""
    found = LINK.findall(message.body)
    assert len(found) == 1, message.body
    return str(found[0])


def words(page: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", "", page).split())


def refused_both(browser: Client, link: str, says: str) -> None:
    """The link's page and its form's POST are each a 400 page that says `says`."""
    for response in (browser.get(link), browser.post(link)):
        assert response.status_code == 400
        assert says in words(response.content.decode())


def ask(client_for: Any, who: str, address: str) -> Any:
    return client_for(who).patch("/api/v1/me/", {"email": address}, format="json")


def test_a_new_address_is_mailed_a_link_and_notify_writes_to_the_old_one_until_it_is_followed(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any]
) -> None:
    alice = with_email(people["alice"], "alice@old.example.org")

    response = ask(client_for, "alice", " alice@new.example.org ")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["email"] == "alice@old.example.org"
    assert body["pending_email"] == "alice@new.example.org"
    assert body["detail"] == (
        "a confirmation link was sent to alice@new.example.org; notify writes to "
        "alice@old.example.org until you follow it (it works for 3 days)"
    )
    alice.refresh_from_db()
    assert alice.email == "alice@old.example.org"
    [mail] = mailoutbox
    assert mail.to == ["alice@new.example.org"]
    assert "alice" in mail.body and "alice@old.example.org" in mail.body
    assert mail.body.count("http://127.0.0.1:8000/me/email/confirm/") == 1
    assert client_for("alice").get("/api/v1/me/").json()["email"] == "alice@old.example.org"


def test_following_the_link_shows_a_button_and_its_post_sets_the_address(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any]
) -> None:
    alice = with_email(people["alice"], "alice@old.example.org")
    ask(client_for, "alice", "alice@new.example.org")
    link = link_in(mailoutbox[0])
    browser = browser_of(alice)

    shown = browser.get(link)

    assert shown.status_code == 200
    page = shown.content.decode()
    assert f'<form method="post" action="{link}"' in page
    assert "Confirm alice@new.example.org" in words(page)
    alice.refresh_from_db()
    assert alice.email == "alice@old.example.org"  # a GET (a mail scanner's) changes nothing

    confirmed = browser.post(link, follow=True)

    assert confirmed.redirect_chain == [("/me/", 302)]
    assert "Jobs that ask for email now write to alice@new.example.org." in words(
        confirmed.content.decode()
    )
    alice.refresh_from_db()
    assert alice.email == "alice@new.example.org"
    job = client_for("alice").post("/api/v1/jobs/", spec(notify=["end"]), format="json")
    assert job.status_code == 201, job.content
    assert len(mailoutbox) == 1  # confirming mails nothing more


def test_without_an_address_notify_stays_refused_until_the_link_is_followed(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any]
) -> None:
    response = ask(client_for, "alice", "alice@example.org")
    submitted = client_for("alice").post("/api/v1/jobs/", spec(notify=["end"]), format="json")

    assert response.json()["email"] == ""
    assert response.json()["detail"] == (
        "a confirmation link was sent to alice@example.org; notify writes to no address "
        "until you follow it (it works for 3 days)"
    )
    assert submitted.status_code == 400
    assert "no email address" in submitted.json()["notify"][0]
    assert [m.to for m in mailoutbox] == [["alice@example.org"]]


def test_clearing_the_address_takes_effect_at_once_and_mails_nothing(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any]
) -> None:
    alice = with_email(people["alice"], "alice@example.org")

    response = ask(client_for, "alice", "")

    assert response.status_code == 200
    assert (response.json()["email"], response.json()["pending_email"]) == ("", None)
    alice.refresh_from_db()
    assert alice.email == ""
    assert mailoutbox == []


def test_setting_the_address_it_has_already_changes_nothing_and_mails_nothing(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any]
) -> None:
    with_email(people["alice"], "alice@example.org")

    response = ask(client_for, "alice", "  alice@example.org ")

    assert response.status_code == 200
    assert (response.json()["email"], response.json()["pending_email"]) == (
        "alice@example.org",
        None,
    )
    assert response.json()["detail"] is None
    assert mailoutbox == []


@pytest.mark.parametrize("method", ["get", "post"])
def test_a_tampered_link_is_a_400_page_that_says_so_and_changes_nothing(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any], method: str
) -> None:
    alice = with_email(people["alice"], "alice@old.example.org")
    ask(client_for, "alice", "alice@new.example.org")
    link = link_in(mailoutbox[0])
    # Another address in the payload, the signature left as it was.
    payload, rest = link.removeprefix("/me/email/confirm/").split(":", 1)
    forged = signing.b64_encode(
        signing.b64_decode(payload.encode()).replace(b"new.example", b"evil.example")
    ).decode()
    tampered = [f"/me/email/confirm/{forged}:{rest}", link[:-6] + "/", "/me/email/confirm/x/"]

    responses = [getattr(browser_of(alice), method)(path) for path in tampered]

    for response in responses:
        assert response.status_code == 400
        assert "This link is not one gpuq sent" in words(response.content.decode())
        assert "<form" not in response.content.decode().split("<main")[-1].split("</main>")[0]
    alice.refresh_from_db()
    assert alice.email == "alice@old.example.org"


def test_an_expired_link_is_a_400_page_that_says_so(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any]
) -> None:
    alice = with_email(people["alice"], "alice@old.example.org")
    ask(client_for, "alice", "alice@new.example.org")
    token = link_in(mailoutbox[0]).split("/")[-2]
    what = signing.loads(token, salt=EMAIL_CONFIRM_SALT)
    signed_at = int(time.time() - EMAIL_CONFIRM_MAX_AGE.total_seconds()) - 60

    class Then(signing.TimestampSigner):
        def timestamp(self) -> str:
            return signing.b62_encode(signed_at)

    old = Then(salt=EMAIL_CONFIRM_SALT).sign_object(what)

    refused_both(
        browser_of(alice),
        f"/me/email/confirm/{old}/",
        "This link has expired: links work for 3 days.",
    )
    alice.refresh_from_db()
    assert alice.email == "alice@old.example.org"


@pytest.mark.parametrize("who", ["bob", "charlie", "staff"])
def test_no_one_else_following_alices_link_changes_either_address_or_request(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any], who: str
) -> None:
    alice = with_email(people["alice"], "alice@old.example.org")
    other = with_email(people[who], f"{who}@example.org")
    ask(client_for, "alice", "alice@new.example.org")
    ask(client_for, who, f"{who}@new.example.org")
    link = link_in(mailoutbox[0])

    refused_both(browser_of(other), link, "This link was sent for another account")
    alice.refresh_from_db()
    other.refresh_from_db()
    assert (alice.email, other.email) == ("alice@old.example.org", f"{who}@example.org")
    pending = {p: client_for(p).get("/api/v1/me/").json()["pending_email"] for p in ("alice", who)}
    assert pending == {"alice": "alice@new.example.org", who: f"{who}@new.example.org"}
    # Still Alice's to follow.
    assert browser_of(alice).post(link).status_code == 302
    alice.refresh_from_db()
    assert alice.email == "alice@new.example.org"


def test_a_link_stops_working_once_the_address_changed_after_it_was_sent(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any]
) -> None:
    alice = with_email(people["alice"], "alice@old.example.org")
    ask(client_for, "alice", "alice@one.example.org")
    ask(client_for, "alice", "alice@two.example.org")
    one, two = (link_in(m) for m in mailoutbox)
    browser = browser_of(alice)

    assert browser.post(two).status_code == 302
    stale = browser.post(one)
    again = browser.get(two)

    assert stale.status_code == 400
    assert "This link no longer works" in words(stale.content.decode())
    alice.refresh_from_db()
    assert alice.email == "alice@two.example.org"
    # The link just followed says so, with no button.
    assert again.status_code == 200
    assert "alice@two.example.org is your address already." in words(again.content.decode())
    assert 'method="post" action="/me/email/confirm/' not in again.content.decode()


def test_a_link_stops_working_once_staff_changed_the_address_after_it_was_sent(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any]
) -> None:
    alice = with_email(people["alice"], "alice@old.example.org")
    ask(client_for, "alice", "alice@new.example.org")
    with_email(alice, "alice@staff.example.org")  # as the admin site sets it

    followed = browser_of(alice).post(link_in(mailoutbox[0]))

    assert followed.status_code == 400
    assert "Your address has changed since this link was sent" in words(followed.content.decode())
    alice.refresh_from_db()
    assert alice.email == "alice@staff.example.org"


def test_following_a_link_needs_a_session(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any]
) -> None:
    ask(client_for, "alice", "alice@example.org")
    link = link_in(mailoutbox[0])

    shown = Client().get(link)
    posted = Client().post(link)

    # Back to the link's page once signed in, whether it was shown or its form sent.
    assert (shown.status_code, shown["Location"]) == (302, f"/login/?next={quote(link, safe='/')}")
    assert (posted.status_code, posted["Location"]) == (302, shown["Location"])
    people["alice"].refresh_from_db()
    assert people["alice"].email == ""


def test_a_site_with_workers_but_no_mail_server_refuses_a_new_address_and_still_clears_one(
    client_for: Any, people: dict[str, Any], settings: Any, mailoutbox: list[Any]
) -> None:
    alice = with_email(people["alice"], "alice@example.org")
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{free_port()}/0"
    settings.EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"

    refused = ask(client_for, "alice", "alice@new.example.org")
    cleared = ask(client_for, "alice", "")

    assert refused.status_code == 400
    assert refused.json()["email"] == [
        "this site sends no email (GPUQ_SMTP_URL is not set), so no address can be confirmed"
    ]
    assert cleared.status_code == 200 and cleared.json()["email"] == ""
    alice.refresh_from_db()
    assert alice.email == ""
    assert mailoutbox == []


def test_a_link_that_cannot_be_mailed_now_is_a_503_that_says_so_and_changes_nothing(
    client_for: Any, people: dict[str, Any], settings: Any
) -> None:
    alice = with_email(people["alice"], "alice@old.example.org")
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()  # nobody answers

    api = ask(client_for, "alice", "alice@new.example.org")
    page = browser_of(alice).post("/me/email/", {"email": "alice@new.example.org"})

    says = (
        "the confirmation link could not be sent to alice@new.example.org now (the mail "
        "server refused it or did not answer): try again later"
    )
    assert (api.status_code, api.json()["detail"]) == (503, says)
    assert page.status_code == 503 and says in words(page.content.decode())
    assert "Waiting for confirmation" not in words(page.content.decode())
    alice.refresh_from_db()
    assert alice.email == "alice@old.example.org"
    assert client_for("alice").get("/api/v1/me/").json()["pending_email"] is None


def test_a_link_that_cannot_be_mailed_leaves_the_request_waiting_before_it_as_it_was(
    client_for: Any, people: dict[str, Any], settings: Any, mailoutbox: list[Any]
) -> None:
    alice = with_email(people["alice"], "alice@old.example.org")
    ask(client_for, "alice", "alice@first.example.org")
    first = link_in(mailoutbox[0])
    mailed_by = settings.EMAIL_BACKEND
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()  # nobody answers

    refused = ask(client_for, "alice", "alice@second.example.org")

    assert refused.status_code == 503
    me = client_for("alice").get("/api/v1/me/").json()
    assert (me["email"], me["pending_email"]) == (
        "alice@old.example.org",
        "alice@first.example.org",
    )
    settings.EMAIL_BACKEND = mailed_by
    assert browser_of(alice).post(first).status_code == 302  # the link mailed still works
    alice.refresh_from_db()
    assert alice.email == "alice@first.example.org"
    assert len(mailoutbox) == 1


def test_a_followed_link_cannot_set_its_address_again_once_the_address_changed_back(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any]
) -> None:
    alice = with_email(people["alice"], "alice@a.example.org")
    browser = browser_of(alice)
    ask(client_for, "alice", "alice@b.example.org")
    to_b = link_in(mailoutbox[-1])
    assert browser.post(to_b).status_code == 302
    ask(client_for, "alice", "alice@a.example.org")
    assert browser.post(link_in(mailoutbox[-1])).status_code == 302

    refused_both(browser, to_b, "This link no longer works: it has been used already")
    alice.refresh_from_db()
    assert alice.email == "alice@a.example.org"
    assert len(mailoutbox) == 2


def test_asking_for_another_address_supersedes_the_waiting_link_which_says_so(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any]
) -> None:
    alice = with_email(people["alice"], "alice@old.example.org")
    ask(client_for, "alice", "alice@one.example.org")
    ask(client_for, "alice", "alice@two.example.org")
    one, two = (link_in(m) for m in mailoutbox)
    browser = browser_of(alice)

    refused_both(
        browser,
        one,
        "A newer link was sent since this one, to alice@two.example.org: only the latest "
        "one works.",
    )
    alice.refresh_from_db()
    assert alice.email == "alice@old.example.org"
    assert client_for("alice").get("/api/v1/me/").json()["pending_email"] == (
        "alice@two.example.org"
    )
    assert browser.post(two).status_code == 302
    alice.refresh_from_db()
    assert alice.email == "alice@two.example.org"


def test_asking_again_for_the_same_new_address_mails_a_new_link_and_only_it_works(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any]
) -> None:
    alice = with_email(people["alice"], "alice@old.example.org")
    ask(client_for, "alice", "alice@new.example.org")
    ask(client_for, "alice", "alice@new.example.org")  # "send it again"
    first, again = (link_in(m) for m in mailoutbox)

    assert first != again
    assert browser_of(alice).post(first).status_code == 400
    assert browser_of(alice).post(again).status_code == 302
    alice.refresh_from_db()
    assert alice.email == "alice@new.example.org"


@pytest.mark.parametrize(
    ("had", "then_asks"),
    [
        ("", ""),  # no address: clearing it still drops the request
        ("alice@old.example.org", ""),  # clearing
        ("alice@old.example.org", "alice@old.example.org"),  # the one it has: withdrawn
    ],
    ids=["clear-none", "clear", "keep-the-one-it-has"],
)
def test_clearing_or_keeping_the_address_drops_the_waiting_request_and_its_link(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any], had: str, then_asks: str
) -> None:
    alice = with_email(people["alice"], had)
    ask(client_for, "alice", "alice@new.example.org")
    link = link_in(mailoutbox[0])

    answer = ask(client_for, "alice", then_asks)
    followed = browser_of(alice).post(link)

    assert answer.status_code == 200
    assert (answer.json()["pending_email"], answer.json()["detail"]) == (None, None)
    assert client_for("alice").get("/api/v1/me/").json()["pending_email"] is None
    assert followed.status_code == 400
    assert "This link no longer works" in words(followed.content.decode())
    alice.refresh_from_db()
    assert alice.email == then_asks
    assert len(mailoutbox) == 1


def test_get_me_shows_the_waiting_address_and_when_its_link_expires_until_it_is_followed(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any]
) -> None:
    alice = with_email(people["alice"], "alice@old.example.org")
    before = client_for("alice").get("/api/v1/me/").json()
    asked_at = timezone.now()
    ask(client_for, "alice", "alice@new.example.org")

    waiting = client_for("alice").get("/api/v1/me/").json()

    assert (before["pending_email"], before["pending_email_expires"]) == (None, None)
    assert (waiting["email"], waiting["pending_email"]) == (
        "alice@old.example.org",
        "alice@new.example.org",
    )
    expires = datetime.fromisoformat(waiting["pending_email_expires"])
    assert asked_at + EMAIL_CONFIRM_MAX_AGE <= expires <= timezone.now() + EMAIL_CONFIRM_MAX_AGE
    assert waiting["detail"] == (
        "a confirmation link was sent to alice@new.example.org; notify writes to "
        f"alice@old.example.org until you follow it (it works until {expires:%Y-%m-%d %H:%M} UTC)"
    )
    assert client_for("bob").get("/api/v1/me/").json()["pending_email"] is None

    assert browser_of(alice).post(link_in(mailoutbox[0])).status_code == 302
    after = client_for("alice").get("/api/v1/me/").json()
    assert (after["email"], after["pending_email"], after["pending_email_expires"]) == (
        "alice@new.example.org",
        None,
        None,
    )
    assert after["detail"] is None


def test_a_request_older_than_its_links_life_is_no_longer_shown_and_its_link_has_expired(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any]
) -> None:
    # A link mailed late (the mail worker's retries) still lives only as long as its request.
    alice = with_email(people["alice"], "alice@old.example.org")
    ask(client_for, "alice", "alice@new.example.org")
    PendingEmail.objects.filter(user=alice).update(
        requested_at=timezone.now() - EMAIL_CONFIRM_MAX_AGE - timedelta(minutes=1)
    )

    me = client_for("alice").get("/api/v1/me/").json()
    followed = browser_of(alice).post(link_in(mailoutbox[0]))

    assert me["pending_email"] is None
    assert followed.status_code == 400
    assert "This link has expired: links work for 3 days." in words(followed.content.decode())
    alice.refresh_from_db()
    assert alice.email == "alice@old.example.org"


def test_the_account_page_shows_the_waiting_address_escaped_until_its_link_is_followed(
    client_for: Any, people: dict[str, Any], mailoutbox: list[Any]
) -> None:
    alice = with_email(people["alice"], "alice@old.example.org")
    browser = browser_of(alice)
    typed = "o'brien&co@example.org"  # a valid address HTML must escape
    assert "Waiting for confirmation" not in words(browser.get("/me/").content.decode())

    browser.post("/me/email/", {"email": typed})
    page = browser.get("/me/").content.decode()

    card = re.search(r'<section class="card" id="email".*?</section>', page, re.S)[0]
    expires = PendingEmail.objects.get(user=alice).expires_at
    assert (
        f"Waiting for confirmation: {typed} (link sent; it works until "
        f"{expires:%Y-%m-%d %H:%M} UTC)." in html.unescape(words(card))
    )
    assert "o&#x27;brien&amp;co@example.org" in card
    assert typed not in page
    assert "write to alice@old.example.org;" in words(card)  # still the one it has

    assert browser.post(link_in(mailoutbox[0])).status_code == 302
    assert "Waiting for confirmation" not in words(browser.get("/me/").content.decode())
