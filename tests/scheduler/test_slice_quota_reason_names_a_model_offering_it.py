"""A slice job refused quota is told about the quota of a GPU model that offers its profile,
with that quota's numbers, not about a model that could never run it (issue 3, reasons)."""

from __future__ import annotations

from scheduler.types import (
    JobRequest,
    MigInstance,
    MigSlot,
    NodeAlloc,
    Placement,
    Quota,
    RunningJob,
    Snapshot,
    Team,
)

from .builders import NOW, decide, job, mig_node, waits

H100 = "H100-80GB"
A30 = "A30-24GB"


def test_a_quota_reason_for_a_slice_names_the_model_that_offers_its_profile() -> None:
    """A 3g.40gb job without a model pin can run only on the H100 (an A30 has no 3g
    profile): with its team's H100 quota (3/7) used by a running 3g slice, it waits
    `quota_exhausted` about the H100, though the A30's name sorts first."""
    h100 = mig_node(
        "h1",
        [[MigInstance("3g.40gb", 4, 4, "r1"), MigInstance("3g.40gb", 0, 4)]],
        model=H100,
    )
    a30 = mig_node("a1", [[MigInstance("4g.24gb", 0, 4)]], model=A30)
    team = Team("a", 1.0, (Quota(H100, 3 / 7, 0.0),))
    r = JobRequest("r1", "a", "normal", NOW - 700, 1, 0, H100, "3g.40gb", 3600.0)
    slot = MigSlot(0, "3g.40gb", 4, 4)
    running = RunningJob(r, NOW - 600, Placement((NodeAlloc("h1", (), slot),)), H100)
    d = decide(Snapshot((h100, a30), (team,), (job("x", mig="3g.40gb"),), (running,)))
    reason = waits(d)["x"].reason
    assert reason.code == "quota_exhausted", reason
    assert dict(reason.details).get("gpu_model") == H100, reason
    assert "A30" not in reason.message, reason
