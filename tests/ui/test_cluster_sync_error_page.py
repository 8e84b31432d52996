"""The clusters page tells everyone that a cluster's sync fails, in a few safe words and since
when; only site staff read the failure's own words (hosts, Unix accounts, paths)."""

from __future__ import annotations

import html
from typing import Any

import pytest
from django.test import Client

from tests.service.test_cluster_sync_error_shown import (
    SECRET_WORDS,
    SINCE,
    SilentPeer,
    closed_port,
    unreachable_slurm,
)

SUMMARY = "Sync failing: cannot reach the cluster (connection refused)" + SINCE + "."


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("who", ["alice", "bob", "charlie"])
@pytest.mark.parametrize("path", ["/clusters/", "/live/clusters/"])
def test_a_user_sees_that_a_clusters_sync_fails_without_its_own_words(
    people: Any, who: str, path: str
) -> None:
    unreachable_slurm(closed_port())

    page = html.unescape(signed_in(people[who]).get(path).content.decode())

    assert SUMMARY in page
    assert not [w for w in SECRET_WORDS if w in page]
    assert "svc-gpuq" not in page


@pytest.mark.parametrize("path", ["/clusters/", "/live/clusters/"])
def test_site_staff_see_the_failed_syncs_own_words_under_the_summary(
    people: Any, path: str
) -> None:
    cluster = unreachable_slurm(closed_port())

    page = html.unescape(signed_in(people["staff"]).get(path).content.decode())

    assert SUMMARY in page
    assert cluster.last_sync_error in page
    assert "svc-gpuq@127.0.0.1" in page


@pytest.mark.django_db(transaction=True)
def test_alice_reads_the_summary_in_her_browser(people: Any, sign_in: Any) -> None:
    from playwright.sync_api import expect

    peer = SilentPeer()
    try:
        unreachable_slurm(peer.port)
        page = sign_in("alice")
        page.goto("/clusters/")
        cluster = page.locator('section[data-cluster="hpc"]')
        expect(cluster.locator(".sync-error")).to_have_text(
            "Sync failing: cannot reach the cluster (SSH)" + SINCE + "."
        )
        expect(cluster.locator(".sync-error-detail")).to_have_count(0)
        assert "svc-gpuq" not in page.content()
    finally:
        peer.close()
