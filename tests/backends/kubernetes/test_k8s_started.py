"""Whether a workload that ended by its deletion had run (`JobStatus.started`): the service
charges a cancelled end unless the backend can tell it never started. Once its pods are
gone, a batch/v1 Job keeps no record of whether they ran; a Volcano Job keeps its phases
(`status.conditions`). What the backend can know, it says, from the cluster's objects (so
any process polling agrees); what it cannot, it leaves None (charged)."""

from __future__ import annotations

import pytest
from conftest import NAMESPACE, FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer
from k8s_sim import Sim

from queue_service.backends.base import RemoteState as R

WORKLOADS = ["volcano", "indexed"]


def _admin_deletes(sim: Sim, eid: str) -> None:
    """`kubectl delete` of the workload, Foreground, as anyone but gpuq."""
    t, obj = sim.workload(eid)
    with sim.store.lock:
        sim.store.delete(t, NAMESPACE, obj["metadata"]["name"], "Foreground", None)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_workload_stopped_before_any_pod_started_ended_without_a_run(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    b = make_backend(api, clock, workload=workload)
    eid = b.submit(request(nodes=2)).external_id
    sim.unschedulable(eid)
    assert b.poll([eid])[eid].state == R.QUEUED

    assert b.cancel(eid, grace_s=30) is True

    other = make_backend(api, clock, workload=workload)  # another worker's sync
    ended = other.poll([eid])[eid]
    assert (ended.state, ended.started) == (R.CANCELLED, False), ended


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_workload_that_ran_then_was_stopped_had_started(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    b = make_backend(api, clock, workload=workload)
    eid = b.submit(request(nodes=2)).external_id
    sim.run(eid)
    assert b.cancel(eid, grace_s=30) is True
    ended = make_backend(api, clock, workload=workload).poll([eid])[eid]
    assert (ended.state, ended.started) == (R.CANCELLED, True), ended


@pytest.mark.parametrize(("workload", "known"), [("volcano", False), ("indexed", None)])
def test_a_waiting_workload_deleted_by_someone_else_is_unknown_unless_its_object_tells(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str, known: bool | None
) -> None:
    """No gpuq stop looked at its pods before they went: a Volcano Job's phase history says
    it was never Running; a batch/v1 Job's controller had started it, and its pods are gone."""
    b = make_backend(api, clock, workload=workload)
    eid = b.submit(request(nodes=2)).external_id
    sim.unschedulable(eid)
    _admin_deletes(sim, eid)
    ended = b.poll([eid])[eid]
    assert (ended.state, ended.started) == (R.CANCELLED, known), ended


def test_a_job_kueue_never_admitted_deleted_by_someone_else_never_started(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """A Job created suspended gets no status.startTime until its controller first starts it."""
    b = make_backend(api, clock, workload="indexed", kueue_queue="team-a")
    eid = b.submit(request(nodes=2)).external_id
    sim.held_by_kueue(eid)
    _admin_deletes(sim, eid)
    ended = b.poll([eid])[eid]
    assert (ended.state, ended.started) == (R.CANCELLED, False), ended


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_stopped_workload_whose_pods_never_started_is_not_running_while_they_terminate(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    """Pods bound to a node, still pulling their image, take a moment to go once deleted.
    Reported RUNNING meanwhile, a job gpuq saw queued would be charged a run it never had."""
    api.store.pods_stop_at_once = False
    b = make_backend(api, clock, workload=workload)
    eid = b.submit(request(nodes=2)).external_id
    sim.image_pull_backoff(eid)
    assert b.cancel(eid, grace_s=30) is True

    stopping = b.poll([eid])[eid]
    assert stopping.state == R.QUEUED and "2 pods not stopped yet" in stopping.reason

    sim.kubelet_confirms_stops()
    ended = b.poll([eid])[eid]
    assert (ended.state, ended.started) == (R.CANCELLED, False), ended
