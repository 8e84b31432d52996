"""MIG slices over several cycles with a fake clock (tests/scheduler/driver.py, with each
GPU's layout: a slice is held from its start and free again when its job leaves, and a
relayout is applied before the next cycle when its GPU is idle)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from scheduler.types import (
    Decisions,
    Gpu,
    JobRequest,
    MigInstance,
    MigSlot,
    NodeAlloc,
    Placement,
    Quota,
    RunningJob,
    Snapshot,
    Start,
    Team,
)

from .builders import A100, NOW, mig_node, request, team
from .driver import Driver


@dataclass
class MigDriver(Driver):
    """The Driver for MIG nodes: each GPU's layout, a slice held from a start and free again
    when its job leaves, a relayout applied before the next cycle when its GPU is idle."""

    layouts: dict[str, list[list[MigInstance]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for n in self.nodes:
            self.layouts[n.name] = [list(g.mig_instances) for g in n.mig_gpus]

    def snapshot(self) -> Snapshot:
        nodes = tuple(
            replace(
                n, mig_gpus=tuple(Gpu(i, tuple(lay)) for i, lay in enumerate(self.layouts[n.name]))
            )
            for n in self.nodes
        )
        return replace(super().snapshot(), nodes=nodes)

    def holds(
        self,
        job_id: str,
        node: str,
        gpu: int,
        start: int,
        priority: str = "low",
        team: str = "a",
        profile: str | None = None,
        limit: float | None = None,
        started: float = NOW - 600,
        model: str = A100,
    ) -> None:
        """A running job holding the instance at `start` of the node's GPU."""
        lay = self.layouts[node][gpu]
        (inst,) = [i for i in lay if i.start == start]
        lay[lay.index(inst)] = replace(inst, job_id=job_id)
        r = JobRequest(
            job_id, team, priority, started - 10, 1, 1, None, profile or inst.profile, limit
        )
        slot = MigSlot(gpu, inst.profile, inst.start, inst.size)
        self.place(RunningJob(r, started, Placement((NodeAlloc(node, (), slot),)), model))

    def free(self, job_id: str) -> RunningJob:
        job = super().free(job_id)
        for a in job.placement.allocs:
            if a.mig is not None:
                lay = self.layouts[a.node][a.mig.gpu]
                lay[:] = [replace(i, job_id=None) if i.job_id == job_id else i for i in lay]
        return job

    def started(self, start: Start) -> None:
        for a in start.placement.allocs:
            if a.mig is not None:
                lay = self.layouts[a.node][a.mig.gpu]
                lay[:] = [
                    replace(i, job_id=start.job_id)
                    if (i.start, i.size) == (a.mig.start, a.mig.size)
                    else i
                    for i in lay
                ]

    def applied(self, d: Decisions) -> None:
        for rl in d.relayouts:
            lay = self.layouts[rl.node][rl.gpu]
            if not rl.advisory and all(i.job_id is None for i in lay):
                self.layouts[rl.node][rl.gpu] = list(rl.instances)

    def gpu_of(self, job_id: str) -> tuple[str, int] | None:
        job = self.running.get(job_id)
        if job is None:
            return None
        (a,) = job.placement.allocs
        assert a.mig is not None
        return a.node, a.mig.gpu


# -- the GPU a preemption empties goes to the job that preempted ------------------------


def test_the_gpu_emptied_for_a_full_gpu_slice_goes_to_the_job_that_preempted_for_it() -> None:
    # One A100 re-laid out as 4g + 3g, both held by low jobs. A high 7g.80gb job preempts
    # both (the whole GPU). While they checkpoint, a high 1g.10gb job arrives. Once the
    # victims have left, the GPU they emptied is the 7g job's: the 1g job must not take it
    # (leaving the 7g job behind a high job it may not preempt, with two jobs killed for
    # nothing).
    lay = (MigInstance("4g.40gb", 0, 4), MigInstance("3g.40gb", 4, 4))
    driver = MigDriver((mig_node("m1", [lay]),), (team("a", 10),))
    driver.holds("low4g", "m1", 0, 0)
    driver.holds("low3g", "m1", 0, 4)
    driver.submit(request("full", mig="7g.80gb", priority="high", submit=NOW - 50))
    driver.cycle()
    driver.advance()
    assert sorted(v for by, v in driver.preemptions if by == "full") == ["low3g", "low4g"]

    driver.submit(request("small", mig="1g.10gb", priority="high", submit=NOW))
    grace = driver.policy.preemption_grace_s
    driver.run_until(NOW + grace + 3 * driver.step)

    assert driver.gpu_of("full") == ("m1", 0), {
        w.job_id: w.reason.message for w in driver.decisions[-1].waits
    }


def test_a_slice_preemptor_whose_victim_another_job_took_over_kills_no_second_job() -> None:
    # m1: a free 3g.40gb and a 1g.10gb held by a low job; m2: a 1g.20gb held by a normal
    # job. A high 1g.20gb job of team a preempts the low job (m1 can then be re-laid out).
    # While it checkpoints, a high 3g.40gb job of team b arrives (ahead in fair share) and
    # is handed the GPU being emptied. The first job must not then preempt the normal job
    # too: one victim was asked for one slice, and m1 holds room for both jobs.
    m1 = (MigInstance("3g.40gb", 4, 4), MigInstance("1g.10gb", 3, 1))
    m2 = (MigInstance("1g.20gb", 6, 2),)
    driver = MigDriver((mig_node("m1", [m1]), mig_node("m2", [m2])), (team("a", 10), team("b", 10)))
    driver.holds("low", "m1", 0, 3, priority="low")
    driver.holds("normal", "m2", 0, 6, priority="normal")
    driver.submit(request("one", team="a", mig="1g.20gb", priority="high", submit=NOW - 50))
    driver.cycle()
    driver.advance()
    assert driver.preemptions == [("one", "low")]

    driver.submit(request("three", team="b", mig="3g.40gb", priority="high", submit=NOW))
    driver.run_until(NOW + driver.policy.preemption_grace_s + 3 * driver.step)

    assert {"one", "three"} <= set(driver.running)
    assert driver.preemptions == [("one", "low")]


def test_a_slice_job_for_any_model_is_not_planned_onto_a_model_its_quota_refuses() -> None:
    # Team a may use H100s (nominal 1) but no A100 (nominal 0). Both nodes have a blank
    # MIG GPU offering 1g.10gb. A 1g.10gb job for any model can run on the H100 now; it
    # must not wait for ever on an A100 re-laid out for it that its quota never admits.
    h100 = "H100-SXM5-80GB"
    quotas = Team("a", 1.0, (Quota(A100, 0.0, 0.0), Quota(h100, 1.0, 0.0)))
    driver = MigDriver((mig_node("m1", [()]), mig_node("m2", [()], model=h100)), (quotas,))
    driver.submit(request("j", mig="1g.10gb", submit=NOW - 50))

    driver.run_until(NOW + 5 * driver.step)

    assert driver.gpu_of("j") == ("m2", 0), {
        w.job_id: w.reason.message for w in driver.decisions[-1].waits
    }


def test_an_any_model_a30_slice_refused_quota_is_not_estimated_to_start_now() -> None:
    # Team a (nominal 1 GPU) runs an A30 2g.12gb (1/2) and an A100 2g.20gb (2/7): 11/14 of
    # its quota, 3/14 left. A 1g.6gb job for any model (only the A30 offers it) counts
    # 1/4 of a GPU and is refused quota until one of them ends (in 900 s). Its estimated
    # start must not be "now", cycle after cycle.
    a30 = "A30-24GB"
    lay30 = (MigInstance("2g.12gb", 0, 2), MigInstance("2g.12gb", 2, 2))
    lay100 = (MigInstance("2g.20gb", 0, 2),)
    driver = MigDriver(
        (mig_node("m1", [lay100]), mig_node("m2", [lay30], model=a30)), (team("a", 1.0),)
    )
    driver.holds("on_a30", "m2", 0, 0, model=a30, limit=1000.0, started=NOW - 100)
    driver.holds("on_a100", "m1", 0, 0, limit=1000.0, started=NOW - 100)
    driver.submit(request("j", mig="1g.6gb", submit=NOW - 50))

    for _ in range(3):
        d = driver.cycle()
        (wait,) = [w for w in d.waits if w.job_id == "j"]
        assert wait.reason.code == "quota_exhausted", wait.reason
        assert wait.estimated_start is None or wait.estimated_start >= NOW + 900, (
            driver.now - NOW,
            wait.estimated_start - NOW if wait.estimated_start else None,
        )
        driver.advance()


def test_a_slice_job_with_a_free_instance_of_its_profile_is_not_starved_by_smaller_ones() -> None:
    # An idle A30 laid out as one free 4g.24gb. A 4g.24gb job (normal) is first in the
    # queue: it can start now. Then one 1g.6gb job of the same class and team arrives every
    # 100 s and runs 300 s (at most three at once, on a four-slice GPU). The 4g job must
    # start within the hour, not wait for ever behind them.
    a30 = "A30-24GB"
    driver = MigDriver(
        (mig_node("m1", [(MigInstance("4g.24gb", 0, 4),)], model=a30),), (team("a", 10),)
    )
    driver.submit(request("big", mig="4g.24gb", submit=NOW - 50))
    for c in range(360):
        if c % 10 == 0:
            driver.submit(request(f"small{c:03d}", mig="1g.6gb", submit=driver.now, limit=300.0))
        driver.cycle()
        driver.advance()
        if "big" in driver.running:
            break

    assert "big" in driver.running, driver.decisions[-1].waits[0]


# -- the instance a slice preemption frees goes to the job that preempted ---------------

# One A100: a 3g.40gb held by a high job, four 1g.10gb held by low jobs of team a.
ONE_3G_FOUR_1G = (MigInstance("3g.40gb", 4, 4), *(MigInstance("1g.10gb", s, 1) for s in range(4)))


def _four_low_slices(teams: tuple[Team, ...]) -> MigDriver:
    driver = MigDriver((mig_node("m1", [ONE_3G_FOUR_1G]),), teams)
    driver.holds("keep", "m1", 0, 4, priority="high")
    for s in range(4):
        driver.holds(f"low{s}", "m1", 0, s, started=NOW - 600 + s)
    return driver


def test_the_instance_a_slice_preemption_frees_is_not_taken_by_a_job_that_could_not_preempt() -> (
    None
):
    # A high 1g.10gb job of team a preempts one of its team's low jobs (one instance, not
    # the whole GPU). While it checkpoints, a high 1g.10gb job of team b arrives, ahead in
    # fair share: it may not preempt team a's jobs (team a borrows nothing). It must not
    # take the instance being freed either: the first job would then preempt a second low
    # job for the same slice.
    driver = _four_low_slices((team("a", 10), team("b", 10)))
    driver.submit(request("first", team="a", mig="1g.10gb", priority="high", submit=NOW - 50))
    driver.cycle()
    driver.advance()
    assert driver.preemptions == [("first", "low3")]

    driver.submit(request("other", team="b", mig="1g.10gb", priority="high", submit=NOW))
    driver.run_until(NOW + driver.policy.preemption_grace_s + 3 * driver.step)

    assert driver.preemptions == [("first", "low3")]
    assert driver.gpu_of("first") == ("m1", 0)
    assert "other" not in driver.running


def test_the_instance_a_slice_preemption_freed_is_not_taken_before_its_preemptor_starts() -> None:
    # As above, but the team b job arrives once the low job has left: the instance is free,
    # and the team b job comes first in the order. It is the first job's, which must start
    # on it rather than preempt a second low job.
    driver = _four_low_slices((team("a", 10), team("b", 10)))
    driver.submit(request("first", team="a", mig="1g.10gb", priority="high", submit=NOW - 50))
    while driver.now < NOW + driver.policy.preemption_grace_s:
        driver.cycle()
        driver.advance()
    assert "low3" not in driver.running and "first" in driver.pending

    driver.submit(request("other", team="b", mig="1g.10gb", priority="high", submit=driver.now))
    driver.run_until(driver.now + 3 * driver.step)

    assert driver.preemptions == [("first", "low3")]
    assert driver.gpu_of("first") == ("m1", 0)
    assert "other" not in driver.running
