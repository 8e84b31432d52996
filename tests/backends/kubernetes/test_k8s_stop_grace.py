"""What a stop sends, and which grace the pods get. gpuq stops a job by deleting its
workload (batch Job or Volcano Job) with propagationPolicy Foreground. `gracePeriodSeconds`
on that DELETE applies to the workload object only: the garbage collector then deletes each
pod with no grace of its own, which gives it its spec's `terminationGracePeriodSeconds` (the
checkpoint grace when the job checkpoints, else 30 s). The service names the grace it passes
to cancel in its "stop sent (N s to end after TERM)" event, as Slurm and the local backend
give it: so each pod is deleted with that grace too (an API server shortens a grace already
running, never lengthens it)."""

from __future__ import annotations

import pytest
from conftest import FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer
from k8s_sim import Sim


def _stopped(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str, checkpoint: bool, grace: int
) -> set[int]:
    """The grace each pod of a running 2-node job got from cancel(grace_s=grace)."""
    api.store.pods_stop_at_once = False  # the pods' kubelets take their time, as on a node
    b = make_backend(api, clock, workload=workload, checkpoint_grace_s=300)
    eid = b.submit(request(nodes=2, checkpoint_dir="/ckpt" if checkpoint else None)).external_id
    pods = sim.run(eid)
    assert {p["spec"].get("terminationGracePeriodSeconds", 30) for p in pods} == {
        300 if checkpoint else 30
    }

    assert b.cancel(eid, grace_s=grace) is True

    deletes = [c for c in api.calls("DELETE") if "/jobs/" in c.path]
    assert [d.query["propagationPolicy"] for d in deletes] == ["Foreground"]  # never Orphan
    still = sim.pods(eid)
    assert len(still) == 2 and all(p["metadata"].get("deletionTimestamp") for p in still)
    return {p["metadata"]["deletionGracePeriodSeconds"] for p in still}


@pytest.mark.parametrize("workload", ["volcano", "indexed"])
@pytest.mark.parametrize(("checkpoint", "grace"), [(False, 10), (False, 30), (True, 30)])
def test_a_stops_pods_get_the_grace_the_service_gave_it(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str, checkpoint: bool, grace: int
) -> None:
    assert _stopped(api, sim, clock, workload, checkpoint, grace) == {grace}


@pytest.mark.parametrize("workload", ["volcano", "indexed"])
def test_a_grace_longer_than_the_pods_own_is_cut_to_it_when_the_collector_came_first(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    """The garbage collector deletes the pods once the workload's deletion is recorded, and
    here before the backend's own pod deletions: theirs can no longer lengthen the grace
    (rest.BeforeDelete). On a real cluster the collector is usually a moment later, and the
    pods get the longer grace."""
    assert _stopped(api, sim, clock, workload, checkpoint=False, grace=60) == {30}


@pytest.mark.parametrize("workload", ["volcano", "indexed"])
@pytest.mark.parametrize(
    ("checkpoint", "stop_grace", "pod_grace"),
    [
        (False, 60.0, 60),
        (False, 30.0, 30),
        (False, 12.5, 30),
        (True, 60.0, 300),
        (True, 400.5, 401),
    ],
)
def test_a_pod_is_given_at_least_the_grace_gpuqs_stops_give(
    api: FakeApiServer,
    sim: Sim,
    clock: FakeClock,
    workload: str,
    checkpoint: bool,
    stop_grace: float,
    pod_grace: int,
) -> None:
    """The service passes its stop grace at submit (DispatchRequest.stop_grace_s): a pod's
    terminationGracePeriodSeconds is at least that, so a stop of 60 s is 60 s even when the
    garbage collector deletes the pods before the backend does (above: cut to 30)."""
    b = make_backend(api, clock, workload=workload, checkpoint_grace_s=300)
    eid = b.submit(
        request(nodes=2, checkpoint_dir="/ckpt" if checkpoint else None, stop_grace_s=stop_grace)
    ).external_id
    pods = sim.run(eid)
    assert {p["spec"].get("terminationGracePeriodSeconds", 30) for p in pods} == {pod_grace}
