"""What a stop sends, and which grace the pods get. gpuq stops a job by deleting its
workload (batch Job or Volcano Job) with propagationPolicy Foreground. `gracePeriodSeconds`
on that DELETE applies to the workload object only: the garbage collector then deletes each
pod with no grace of its own, so the kubelet gives each pod its spec's
`terminationGracePeriodSeconds` (the checkpoint grace when the job checkpoints, else the
30 s default) before SIGKILL."""

from __future__ import annotations

import pytest
from conftest import FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer
from k8s_sim import Sim


@pytest.mark.parametrize("workload", ["volcano", "indexed"])
def test_a_stop_deletes_the_workload_in_the_foreground_and_its_pods_carry_the_checkpoint_grace(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    b = make_backend(api, clock, workload=workload, checkpoint_grace_s=300)
    eid = b.submit(request(nodes=2, checkpoint_dir="/ckpt")).external_id
    pods = sim.run(eid)
    assert {p["spec"]["terminationGracePeriodSeconds"] for p in pods} == {300}

    assert b.cancel(eid, grace_s=300) is True

    (delete,) = api.calls("DELETE")
    assert delete.path.endswith(eid.split("/")[-1])
    assert delete.query["propagationPolicy"] == "Foreground"  # never Orphan: pods go too
    assert delete.query["gracePeriodSeconds"] == "300"
