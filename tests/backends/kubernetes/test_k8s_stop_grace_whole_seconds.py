"""A stop's grace is a float (GPUQ_PREEMPTION_GRACE_S may be 0.5); the API takes whole
seconds, and `gracePeriodSeconds=0` is a force deletion (the object goes at once, with no
TERM-then-wait, while its GPUs may still be busy). cancel rounds the grace up, as the
manifests round a stop grace for terminationGracePeriodSeconds: a positive grace is never 0."""

from __future__ import annotations

import pytest
from conftest import FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer
from k8s_sim import Sim


@pytest.mark.parametrize(("grace_s", "sent"), [(0.5, 1), (0.01, 1), (2.5, 3), (10.0, 10)])
def test_a_stops_grace_is_sent_in_whole_seconds_rounded_up(
    api: FakeApiServer, sim: Sim, clock: FakeClock, grace_s: float, sent: int
) -> None:
    b = make_backend(api, clock, workload="indexed")
    eid = b.submit(request(nodes=2)).external_id
    sim.run(eid)

    assert b.cancel(eid, grace_s=grace_s) is True

    deletes = api.calls("DELETE")
    assert any("/pods/" in c.path for c in deletes), "cancel deleted no pod"
    assert {int(c.query["gracePeriodSeconds"]) for c in deletes} == {sent}
