"""Two slice jobs that preempted on the same node wait with that node's name
(PendingJob.preempting_on), which does not say which GPU was emptied for which. Once their
victims have left, the GPU already re-laid out for one of them (an idle GPU with a free
instance of its profile) stays that job's: the other, whatever its id, takes the node's
other idle GPU. Before, the first by id took the re-laid-out GPU, had it re-laid out again,
and the job it was laid out for preempted a second time (found by
test_mig_properties_over_cycles.py's search)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.types import MigInstance, PendingJob

from .builders import decide, job, mig_node, snap, started, team, waits

SEVEN = (MigInstance("7g.80gb", 0, 8),)  # GPU 0, re-laid out for the 7g job, idle
ONES = tuple(MigInstance("1g.10gb", s, 1) for s in range(7))  # GPU 1, idle: its victim left


def preemptor(job_id: str, profile: str) -> PendingJob:
    return replace(job(job_id, mig=profile, priority="high"), preempting_on=("m1",))


@pytest.mark.parametrize(
    "seven_id, two_id",
    [("b-seven", "a-two"), ("a-seven", "b-two")],
    ids=["the-other-first-by-id", "the-other-second-by-id"],
)
def test_the_gpu_re_laid_out_for_a_preemptor_goes_to_it(seven_id: str, two_id: str) -> None:
    s = snap(
        [mig_node("m1", [SEVEN, ONES], gpus=2)],
        [team("a", 2)],
        [preemptor(seven_id, "7g.80gb"), preemptor(two_id, "2g.20gb")],
    )

    d = decide(s)

    begun = started(d)
    assert seven_id in begun, waits(d)[seven_id].reason.message
    (alloc,) = begun[seven_id].placement.allocs
    assert (alloc.node, alloc.mig and alloc.mig.gpu) == ("m1", 0)
    relaid = {(rl.node, rl.gpu) for rl in d.relayouts}
    assert relaid == {("m1", 1)}, d.relayouts
    assert waits(d)[two_id].reason.code == "mig_relayout", waits(d)[two_id].reason
    assert not d.preemptions
