"""An estimated start is never earlier than the job could start by time limits."""

from __future__ import annotations

from .builders import NOW, decide, job, nodes, running, snap, team, waits


def test_a_reserved_jobs_gpus_come_back_in_the_estimates_only_after_it_ends() -> None:
    # Three 8-GPU nodes; every limit is 3600 s. n1 and n2 each have 4 GPUs busy until
    # NOW + 1000, n3 all 8 until NOW + 9000. j (1 x 8) is reserved for NOW + 1000 on n1 and
    # runs to NOW + 4600; k1 (1 x 8) is estimated at NOW + 1000 on n2, to NOW + 4600. k2
    # (1 x 8) can start no sooner than NOW + 4600: before then every node is held (even
    # pooled: at NOW + 3600 r3, j and k1 hold all 24 GPUs). It is estimated at NOW + 3600:
    # the fluid took j's 8 GPUs from now (8 are free now, split 4 + 4), so it gave them
    # back at NOW + 3600, though the Wait says j starts at NOW + 1000.
    teams = [team("a", 100, borrow=None)]
    busy = [
        running("r1", {"n1": range(4)}, started=NOW - 2600),
        running("r2", {"n2": range(4)}, started=NOW - 2600),
        running("r3", {"n3": range(8)}, started=NOW - 2600, limit=11600),
    ]
    pending = [
        job("j", gpus=8, submit=NOW - 300),
        job("k1", gpus=8, submit=NOW - 200),
        job("k2", gpus=8, submit=NOW - 100),
    ]
    w = waits(decide(snap(nodes(3, 8), teams, pending, busy)))
    assert w["j"].reserved and w["j"].estimated_start == NOW + 1000
    assert w["k1"].estimated_start == NOW + 1000
    k2 = w["k2"].estimated_start
    assert k2 is not None and k2 >= NOW + 4600, k2 - NOW
