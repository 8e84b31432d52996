"""A poll reads each namespace apart: one gpuq may not read leaves only its jobs unknown."""

from __future__ import annotations

import pytest
from conftest import NAMESPACE, FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer, Fault
from k8s_sim import Sim

from queue_service.backends.base import BackendError, PartialPoll
from queue_service.backends.base import RemoteState as R

OTHER_JOB = "3f2b8c1e-5d4a-4b7e-9c0f-1a2b3c4d5eff"


def test_a_poll_reports_the_jobs_of_readable_namespaces_when_one_namespace_is_forbidden(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """Namespaces are granted apart (a RoleBinding each): one that answers 403 to gpuq's lists
    leaves its jobs out of the poll, which raises PartialPoll (base.py's contract, as Slurm's
    per account) carrying every other namespace's statuses."""
    sim.namespace("gpuq-team-b")
    b = make_backend(api, clock, image_default="img:1")
    a_eid = b.submit(request(kind="agent", gpus_per_node=1)).external_id
    b_eid = b.submit(
        request(kind="agent", gpus_per_node=1, team="team-b", job_id=OTHER_JOB)
    ).external_id
    assert a_eid.startswith(NAMESPACE + "/") and b_eid.startswith("gpuq-team-b/")
    sim.run(a_eid)
    sim.run(b_eid)
    api.inject(
        Fault("status", code=403, method="GET", path_contains="/namespaces/gpuq-team-b/", times=50)
    )

    try:
        with pytest.raises(PartialPoll) as partial:
            b.poll([a_eid, b_eid])
    finally:
        b.close()

    assert partial.value.statuses.keys() == {a_eid}
    assert partial.value.statuses[a_eid].state == R.RUNNING
    assert partial.value.permanent and "gpuq-team-b" in partial.value.message


def test_a_poll_whose_every_namespace_fails_raises_the_error_as_it_is(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """Nothing read is no partial poll: the error is raised as it is."""
    b = make_backend(api, clock, image_default="img:1")
    eid = b.submit(request(kind="agent", gpus_per_node=1)).external_id
    api.inject(Fault("status", code=403, method="GET", path_contains="/namespaces/", times=50))

    try:
        with pytest.raises(BackendError) as raised:
            b.poll([eid])
    finally:
        b.close()

    assert not isinstance(raised.value, PartialPoll)
