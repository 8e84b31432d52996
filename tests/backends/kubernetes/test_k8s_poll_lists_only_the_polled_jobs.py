"""What a poll transfers. A finished workload stays on the cluster for `ttl_after_finished_s`
(7 days by default), with its pods, and each can hold up to 1.4 MiB (command and env), so a
poll lists only the jobs it is asked about: `gpuq.io/job-id in (...)`, in pieces whose
selector stays short enough for the API server and the proxies before it. Counted in the
objects and bytes the fake API server answered."""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import quote_plus

import pytest
from conftest import FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer, Request
from k8s_sim import Sim

from queue_service.backends.base import RemoteState as R
from queue_service.backends.kubernetes import KubernetesBackend
from queue_service.backends.kubernetes import backend as k8s

ENV = {"DATASET_MANIFEST": "x" * 200_000}  # each workload and pod carries it
KINDS = {
    "indexed": {"kind": "agent", "gpus_per_node": 1},  # a batch/v1 Job
    "volcano": {"kind": "training", "nodes": 1},  # a Volcano Job
}


def job_id(i: int) -> str:
    return f"3f2b8c1e-5d4a-4b7e-9c0f-1a2b3c4d{i:04d}"


def submitted(b: KubernetesBackend, workload: str, i: int, **overrides: Any) -> str:
    fields = {**KINDS[workload], "job_id": job_id(i), **overrides}
    return b.submit(request(**fields)).external_id


def lists_of(api: FakeApiServer, since: int) -> list[Request]:
    """The lists of jobs and pods in the team's namespace sent since request `since`."""
    return [
        r
        for r in api.requests[since:]
        if r.method == "GET" and r.path.endswith(("/gpuq-team-a/jobs", "/gpuq-team-a/pods"))
    ]


@pytest.mark.parametrize("workload", ["indexed", "volcano"])
def test_a_poll_transfers_the_polled_jobs_not_the_finished_ones_kept_for_their_ttl(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    b = make_backend(api, clock, workload=workload, image_default="busybox")
    finished = [submitted(b, workload, i, env=ENV) for i in range(6)]
    for eid in finished:
        sim.run(eid)
        sim.succeed(eid)
    assert {s.state for s in b.poll(finished).values()} == {R.SUCCEEDED}
    running = submitted(b, workload, 99, env=ENV)
    sim.run(running)

    since = len(api.requests)
    assert b.poll([running])[running].state == R.RUNNING

    lists = lists_of(api, since)
    items, sent = sum(r.items for r in lists), sum(r.sent for r in lists)
    # The running job's workload and its pod: not the six finished ones and theirs too.
    assert (items, len(lists)) == (2, 2), (items, sent)
    assert sent < 2.2 * len(ENV["DATASET_MANIFEST"])


def test_many_polled_jobs_are_listed_in_pieces_whose_selector_stays_within_the_bound(
    api: FakeApiServer, sim: Sim, clock: FakeClock, monkeypatch: Any
) -> None:
    # Four job ids a piece: `gpuq.io%2Fjob-id+in+%28%29` is 26 bytes, each id 36 and a comma 3.
    monkeypatch.setattr(k8s, "SELECTOR_MAX_BYTES", 200)
    b = make_backend(api, clock, workload="indexed", image_default="busybox")
    eids = [submitted(b, "indexed", i) for i in range(12)]
    for eid in eids[:6]:
        sim.run(eid)
    sim.succeed(eids[0])
    kept = submitted(b, "indexed", 50)  # finished before, not polled
    sim.run(kept)
    sim.succeed(kept)

    since = len(api.requests)
    seen = b.poll(eids)

    assert [seen[e].state for e in eids] == [R.SUCCEEDED] + [R.RUNNING] * 5 + [R.QUEUED] * 6
    lists = lists_of(api, since)
    selectors = [r.query["labelSelector"] for r in lists]
    assert all(len(quote_plus(s)) <= 200 for s in selectors), selectors
    assert len(lists) == 2 * math.ceil(12 / 4)  # jobs and pods, each in three pieces
    # Each object once, the unpolled job's in none.
    assert sum(r.items for r in lists) == 12 + 6


def test_a_job_whose_id_its_workloads_name_does_not_give_back_is_still_followed(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """gpuq's ids are UUIDs, which a name carries as they are; an id the name had to change
    (hashed) is read from its workload, one GET, and its pods are listed by its label."""
    b = make_backend(api, clock, workload="indexed", image_default="busybox")
    odd = b.submit(request(job_id="Job_42", kind="agent", gpus_per_node=1)).external_id
    plain = submitted(b, "indexed", 1)
    sim.run(odd)
    sim.run(plain)
    sim.fail(odd, exit_code=3)
    assert odd.rpartition("/")[2].startswith("gpuq-job-42-1-")  # hashed
    gone = "gpuq-team-a/job/gpuq-job-7-1-0a1b2c3d4e"  # such a name, never made

    since = len(api.requests)
    seen = b.poll([odd, plain, gone])

    assert (seen[odd].state, seen[odd].exit_code) == (R.FAILED, 3)
    assert seen[plain].state == R.RUNNING
    assert seen[gone].state == R.LOST
    gets = [
        r.path.rpartition("/")[2]
        for r in api.requests[since:]
        if r.method == "GET" and "/jobs/" in r.path
    ]
    assert sorted(gets) == sorted(e.rpartition("/")[2] for e in (odd, gone))
