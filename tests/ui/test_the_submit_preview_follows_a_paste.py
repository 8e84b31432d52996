"""The submit page's side panel asks the server whether the job would start, as one types. It
asked on a key released or a field left, so a job file pasted from the mouse's menu (or
dropped, or filled in by the browser), which sends neither, left the panel answering for the
page's example ("It would start now") until the textarea lost focus: by then the click was
on "Submit job". It asks on any input."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

# Three nodes of four GPUs: the lab's cluster has two, so it waits.
WAITS = """\
name: pasted
command: echo hi
nodes: 3
gpus_per_node: 4
"""


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_pasted_job_file_is_previewed_without_a_key_or_leaving_the_box(
    people: Any, local_cluster: Any, sign_in: Any
) -> None:
    page = sign_in("alice")
    page.goto("/submit/?mode=yaml")
    verdict = page.locator("#preview [data-verdict]")
    expect(verdict).to_have_attribute("data-verdict", "starts")  # the page's example

    page.fill("#f-yaml", WAITS)  # an input event alone, as a paste from the menu sends

    expect(verdict).to_have_attribute("data-verdict", "waits")
    expect(page.locator("#preview")).to_contain_text("3 nodes")
