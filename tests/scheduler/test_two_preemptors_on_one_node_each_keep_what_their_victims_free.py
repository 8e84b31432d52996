"""Two jobs that preempted on the same node in earlier cycles both wait with that node's
name (PendingJob.preempting_on), which does not say which GPUs or instances are whose. The
GPUs and instances their victims free must still go to them, one each: neither takes what
was freed for the other while its own victims are still leaving, so neither waits for
nothing nor preempts again.

Whole GPUs: a preemptor re-planning on its leaving victims holds of the node's free GPUs
only those its victims do not make up. MIG: a preemptor whose victim held one instance on a
GPU others keep using waits for that instance, not for a GPU another preemptor is emptying
(or has emptied) on the same node.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from scheduler.types import MigInstance, PendingJob, Policy

from .builders import (
    NOW,
    decide,
    gpus_of,
    job,
    mig_node,
    nodes,
    request,
    running,
    snap,
    team,
    waits,
)
from .builders import started as started_of
from .test_mig_over_several_cycles import MigDriver


def preemptor(job_id: str, gpus: int, submit: float) -> PendingJob:
    """A high job that preempted on n1 in an earlier cycle."""
    pending = job(job_id, gpus=gpus, priority="high", submit=submit)
    return replace(pending, preempting_on=("n1",))


# n1 after two preemptions there: `a`'s victim (2 GPUs, 0-1) has left, `b`'s (4 GPUs, 2-5)
# is still in its grace period; a high job holds 6-7. n2 runs a low job `w` that either
# preemptor could take.
N1 = (
    running("b-victim", {"n1": range(2, 6)}, priority="low", leaving_since=NOW - 10),
    running("fixed", {"n1": [6, 7]}, priority="high", limit=36000),
)
W = running("w", {"n2": range(8)}, priority="low", started=NOW - 60, limit=36000)


@dataclass(frozen=True)
class Case:
    pending: tuple[PendingJob, ...]
    policy: Policy = field(default_factory=Policy)


CASES = {
    # b comes first: its victim frees the 4 GPUs it needs; the 2 free ones are a's.
    "b-ahead": Case((preemptor("b", 4, NOW - 200), preemptor("a", 2, NOW - 100))),
    # The same, with every preemption worth it: a must not preempt w for GPUs it has.
    "b-ahead-any-loss": Case(
        (preemptor("b", 4, NOW - 200), preemptor("a", 2, NOW - 100)),
        Policy(preemption_loss_ratio=None),
    ),
    # a comes first: it takes its free GPUs, b waits for its victim (as before).
    "a-ahead": Case((preemptor("a", 2, NOW - 200), preemptor("b", 4, NOW - 100))),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_each_whole_gpu_preemptor_gets_the_gpus_its_victims_free(case: Case) -> None:
    d = decide(snap(nodes(2), [team("a", 100)], case.pending, [*N1, W]), case.policy)

    assert d.preemptions == ()  # nothing new: a has its GPUs, b's victim is leaving
    assert {k: gpus_of(s) for k, s in started_of(d).items()} == {"a": {"n1": (0, 1)}}
    assert waits(d)["b"].reason.code == "preempting", waits(d)["b"].reason
    assert dict(d.preempting) == {"b": ("n1",)}


# -- MIG -------------------------------------------------------------------------------

HALVES = (MigInstance("4g.40gb", 0, 4), MigInstance("3g.40gb", 4, 4))


@pytest.mark.parametrize(
    ("whole", "single"),
    [("a-full", "b-slice"), ("b-full", "a-slice")],
    ids=["instance-preemptor-named-last", "instance-preemptor-named-first"],
)
def test_each_slice_preemptor_gets_the_gpu_or_instance_its_victims_free(
    whole: str, single: str
) -> None:
    # m1 has two A100s laid out 4g + 3g. `whole` (7g.80gb) empties GPU 0 (two low jobs);
    # a cycle later `single` (4g.40gb) preempts the low 4g job of GPU 1, whose 3g is a high
    # job's for good. Each must end up where its victims were: `whole` on GPU 0 re-laid
    # out for it, `single` on GPU 1's 4g; and nobody else is preempted. (Named first,
    # `single` took GPU 0, being emptied for `whole`, which then could never start.)
    driver = MigDriver((mig_node("m1", [HALVES, HALVES], gpus=2),), (team("a", 10),))
    driver.holds("low-0a", "m1", 0, 0)
    driver.holds("low-0b", "m1", 0, 4)
    driver.holds("low-1", "m1", 1, 0)
    driver.holds("high-1", "m1", 1, 4, priority="high")
    driver.submit(request(whole, mig="7g.80gb", priority="high", submit=NOW - 50))
    driver.cycle()
    driver.advance()
    driver.submit(request(single, mig="4g.40gb", priority="high", submit=NOW - 40))

    driver.run_until(NOW + 8 * driver.step)

    assert sorted(driver.preemptions) == sorted(
        [(whole, "low-0a"), (whole, "low-0b"), (single, "low-1")]
    )
    assert driver.gpu_of(whole) == ("m1", 0), driver.decisions[-1].waits
    assert driver.gpu_of(single) == ("m1", 1), driver.decisions[-1].waits
