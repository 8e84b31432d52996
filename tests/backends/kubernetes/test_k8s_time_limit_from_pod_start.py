"""A job's time limit runs from its pods' start, as on Slurm from the job's start on its
nodes: the time its pods wait for a node is not charged, the time they pull their image is
(as a Pyxis import is on Slurm). A pod its deadline ends ends the job as TIMEOUT."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer
from k8s_sim import Sim

from queue_service.backends.base import RemoteState as R

# (workload setting, the job): a plain Job, an Indexed Job's gang, a Volcano gang (with no
# retries left: Volcano restarts a gang in place whatever failed its pod, the deadline too).
SHAPES = [
    pytest.param("indexed", {"kind": "agent", "nodes": 1}, id="job"),
    pytest.param("indexed", {"nodes": 2}, id="indexed-gang"),
    pytest.param("volcano", {"nodes": 2, "retries_max": 0}, id="volcano-gang"),
]
LIMIT = 900


@pytest.mark.parametrize(("workload", "job"), SHAPES)
def test_a_time_limit_does_not_count_the_time_the_pods_wait_for_a_node(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str, job: dict[str, Any]
) -> None:
    b = make_backend(api, clock, workload=workload)
    try:
        eid = b.submit(request(time_limit_s=LIMIT, **job)).external_id
        sim.unschedulable(eid)  # its controller started it; no node takes its pods yet
        clock.now += 600
        sim.run(eid)
        clock.now += 400  # 1000 s since the workload started, 400 s since its pods did

        sim.expire_deadlines(eid)
        running = b.poll([eid])[eid]
        clock.now += LIMIT - 400
        sim.expire_deadlines(eid)
        ended = b.poll([eid])[eid]
    finally:
        b.close()

    assert running.state == R.RUNNING, running
    assert ended.state == R.TIMEOUT, ended


@pytest.mark.parametrize(("workload", "job"), SHAPES)
def test_a_time_limit_counts_the_time_the_pods_pull_their_image(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str, job: dict[str, Any]
) -> None:
    b = make_backend(api, clock, workload=workload)
    try:
        eid = b.submit(request(time_limit_s=LIMIT, **job)).external_id
        sim.image_pull_backoff(eid)  # on their nodes, pulling (within image_pull_grace_s)
        clock.now += 200
        sim.run(eid)
        clock.now += LIMIT - 200

        sim.expire_deadlines(eid)
        ended = b.poll([eid])[eid]
    finally:
        b.close()

    assert ended.state == R.TIMEOUT, ended
