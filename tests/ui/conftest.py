"""The browser lab: Debian's Chromium driven by Playwright against pytest-django's live server
(PostgreSQL), with the embedded job loop (`run_once`) running in a background thread so jobs
move on while the browser watches."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import lab_missing

CHROMIUM = os.environ.get("GPUQ_CHROMIUM", "/usr/bin/chromium")
# Per ../shared/notes/browser.md: no sandbox as root, and nothing that phones home (the closed
# network refuses it, many connections at a time).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
# Playwright's sync API keeps an event loop on the test's thread; the tests read the ORM there
# between browser steps, which Django would otherwise refuse as "async".
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def chromium_available() -> bool:
    return bool(shutil.which(CHROMIUM)) and os.access(CHROMIUM, os.X_OK)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not chromium_available():
        lab_missing(f"Chromium at {CHROMIUM} (install it with deploy/browser-lab up)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        # Playwright gives every launch a fresh, temporary --user-data-dir.
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def new_page(browser: Any, live_server: Any) -> Iterator[Callable[..., Any]]:
    """Pages in fresh browser contexts (own cookies), so two people can use the app at once."""
    contexts: list[Any] = []

    def make(viewport: dict[str, int] | None = None, **options: Any) -> Any:
        context = browser.new_context(
            viewport=viewport or DESKTOP, base_url=live_server.url, **options
        )
        context.set_default_timeout(15_000)
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()


@pytest.fixture
def sign_in(new_page: Callable[..., Any]) -> Callable[..., Any]:
    """A page signed in as one of tests.conftest's people (password "pw-<name>")."""

    def as_user(username: str, **options: Any) -> Any:
        page = new_page(**options)
        page.goto("/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", f"pw-{username}")
        page.click("button[type=submit]")
        page.wait_for_url("**/")
        return page

    return as_user
