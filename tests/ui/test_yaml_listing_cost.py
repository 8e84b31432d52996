"""The work of a refused pasted YAML file. The submit page lists the file line
by line with its errors; every line of the paste becomes markup (about 95 bytes and 70 us
each), so a 400 KB paste of blank lines took 29 s and answered 38 MB. What a refusal costs
must not grow with lines that carry no error: the page echoes the text once (the textarea)
and lists the lines near the errors."""

from __future__ import annotations

from typing import Any

from django.test import Client


def _refused(client: Client, blank_lines: int) -> int:
    text = "\n" * blank_lines + "name: [\n"  # a syntax error on the last line
    response = client.post("/submit/", {"mode": "yaml", "yaml": text})
    assert response.status_code == 400
    assert b"expected the node content" in response.content
    return len(response.content)


def test_a_refused_pasted_yaml_file_costs_no_more_per_line_than_echoing_it(people: Any) -> None:
    alice = Client()
    alice.force_login(people["alice"])
    small, large = 1_000, 41_000

    grown = _refused(alice, large) - _refused(alice, small)

    # The textarea echoes each blank line (1 byte); anything more per line is the listing.
    assert grown <= 2 * (large - small), f"{grown:,} bytes more for {large - small:,} blank lines"


def test_a_long_refused_file_lists_the_lines_around_each_error_and_marks_the_gaps() -> None:
    from frontend.forms import yaml_listing

    text = "\n".join(f"k{i}: v" for i in range(1, 1001))
    listing, loose = yaml_listing(text, None, {}, (500, "oops"))

    shown = [(line.number, line.gap) for line in listing]
    assert shown == [
        (496, True),
        *[(n, False) for n in range(497, 504)],
        (1000, True),
    ]
    assert [line.errors for line in listing if line.number == 500 and not line.gap] == [("oops",)]
    assert loose == []


def test_a_refused_one_line_megabyte_is_echoed_once_and_listed_cut(people: Any) -> None:
    # The listing shows where the errors are; the textarea above holds the whole text.
    alice = Client()
    alice.force_login(people["alice"])
    long = "nodes: many  # " + "x" * 1_000_000
    text = f"name: x\ncommand: echo\n{long}\n"

    response = alice.post("/submit/", {"mode": "yaml", "yaml": text})

    assert response.status_code == 400
    page = response.content.decode()
    assert page.count(long) == 1  # the textarea's
    assert f"<code>{long[:200]}…</code>" in page
    assert "line 3: nodes: A valid integer is required." in page
    assert len(response.content) < len(text) + 20_000
