"""A slice job that fits its team's nominal quota but waits for an instance keeps its share of
the nominal against its team's later jobs, as a whole-GPU job waiting for nodes does (FIFO
within a team, EASY's rule: a later job passes only if it ends before the instance frees).
One whose GPU is being laid out for it starts once the layout is applied: its quota is its
own from then. Before, a later whole-GPU job of the team took the nominal, and the slice job
then waited over quota for that job's whole time limit, its new layout unused."""

from __future__ import annotations

import pytest

from scheduler.types import MigInstance

from .builders import NOW, mig_node, nodes, request, running, team
from .test_mig_over_several_cycles import MigDriver

SEVEN_1G = [MigInstance("1g.10gb", s, 1) for s in range(7)]


@pytest.mark.parametrize(
    ("mig_gpu_idle", "whole_limit", "whole_starts_first"),
    [
        (False, 3600.0, False),  # m1's instances are team b's until NOW + 600
        (False, 300.0, True),  # the whole-GPU job ends by then: it may pass
        (True, 3600.0, False),  # m1 is idle: it is laid out for the slice job
    ],
    ids=["instances-held-by-running-jobs", "later-job-ends-first", "gpu-laid-out-for-it"],
)
def test_a_slice_job_waiting_for_an_instance_keeps_its_teams_quota(
    mig_gpu_idle: bool, whole_limit: float, whole_starts_first: bool
) -> None:
    # Team a (nominal 2, no borrowing) runs one GPU for good: 1 left. Its slice job (1/7)
    # comes first, then a whole-GPU job (1): both fit only one after the other.
    driver = MigDriver(
        (*nodes(1), mig_node("m1", [() if mig_gpu_idle else SEVEN_1G])),
        (team("a", 2), team("b", 8)),
    )
    if not mig_gpu_idle:
        for s in range(7):
            driver.holds(f"b{s}", "m1", 0, s, "high", "b", limit=1200.0, started=NOW - 600)
    driver.place(running("a-run", {"n1": [0]}, team="a", limit=None))
    driver.submit(request("slice", team="a", mig="1g.10gb", submit=NOW - 50, limit=3600.0))
    driver.submit(request("whole", team="a", submit=NOW - 40, limit=whole_limit))

    driver.cycle()
    assert ("whole" in driver.running) == whole_starts_first
    driver.advance()
    driver.run_until(NOW + 700)

    assert "slice" in driver.running, driver.decisions[-1].waits
    if not whole_starts_first:
        assert "whole" in driver.pending
        reason = {w.job_id: w for w in driver.decisions[0].waits}["whole"].reason
        assert reason.code == "quota_exhausted", reason
