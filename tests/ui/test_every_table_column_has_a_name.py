"""Every table's header names its column, the buttons' column too: a screen reader reads
the header with each cell ("Remove, button" alone does not say what the column is), and
axe-core counts an empty <th> against the page ("empty-table-header")."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from queue_service.tenancy.services import create_token


@pytest.mark.parametrize(
    ("who", "path"), [("dana", "/teams/"), ("dana", "/teams/vision/"), ("alice", "/me/")]
)
def test_no_table_header_is_empty(people: Any, who: str, path: str) -> None:
    create_token(people[who], "laptop")  # the tokens table is drawn only with a token
    client = Client()
    client.force_login(people[who])

    page = client.get(path).content.decode()

    headers = re.findall(r"<th\b[^>]*>(.*?)</th>", page, re.S)
    assert headers, "no table on the page"
    assert all(re.sub(r"<[^>]+>", "", h).strip() for h in headers), headers


@pytest.mark.parametrize(("who", "path"), [("dana", "/teams/vision/"), ("alice", "/me/")])
def test_each_rows_buttons_say_whom_or_what_they_act_on(people: Any, who: str, path: str) -> None:
    create_token(people[who], "laptop")
    create_token(people[who], "ci")
    client = Client()
    client.force_login(people[who])

    page = client.get(path).content.decode()

    body = page[page.index("<tbody>") : page.index("</tbody>")]
    names = [
        label or re.sub(r"<[^>]+>", "", text).strip()
        for label, text in re.findall(
            r'<button\b(?:[^>]*aria-label="([^"]*)")?[^>]*>(.*?)</button>', body, re.S
        )
    ]
    assert len(names) >= 2
    assert len(set(names)) == len(names), names  # "Remove", "Remove", ... say not whom
