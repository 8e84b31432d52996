"""A whole-GPU job blocked for nodes gets a reservation (EASY backfill), and the quota it
would borrow then is held too: lent from now on only to jobs that end by its start
(Ledger.hold_for). Of a model's GPUs that are nobody's nominal quota (lent for that model)
it holds at most the idle whole GPUs it could use: such capacity on MIG GPUs, which it
could never run on, stays lendable to a slice job of another team. (What it would borrow
of other teams' idle nominal is held as before: quota is not tied to GPUs.)
"""

from __future__ import annotations

import pytest

from scheduler.types import ANY_MODEL

from .builders import A100, NOW, decide, job, mig_node, nodes, running, snap, started, team, waits

# n1 runs team d's job until NOW+3600 (d lends none of its nominal), n2 team a's for good:
# team a's nominal of 8. `whole` (team a, 4 GPUs) borrows: the only quota lent is m1's 4
# MIG GPUs, nobody's nominal. It is reserved n1 from NOW+3600. `slice` (team c, nominal 0,
# a low 1g job for two hours) borrows on m1.
RUNNING = [
    running("d-busy", {"n1": range(8)}, team="d", started=NOW - 600, limit=4200),
    running("a-long", {"n2": range(8)}, team="a", limit=None),
]
PENDING = [
    job("whole", gpus=4, team="a", submit=NOW - 100, limit=3600),
    job("slice", mig="1g.10gb", team="c", priority="low", submit=NOW - 50, limit=7200),
]


@pytest.mark.parametrize("model", [A100, ANY_MODEL], ids=["model-quotas", "any-model-quotas"])
def test_a_reservation_holds_no_quota_for_gpus_its_job_cannot_use(model: str) -> None:
    teams = [
        team("a", 8, borrow=None, model=model),
        team("c", 0, borrow=None, model=model),
        team("d", 8, model=model, lending=0),
    ]
    d = decide(snap([*nodes(2), mig_node("m1", gpus=4)], teams, PENDING, RUNNING))

    assert waits(d)["whole"].reserved, waits(d)["whole"].reason
    assert waits(d)["whole"].estimated_start == NOW + 3600
    # It starts once m1 is laid out for it (counted on its quota from now on).
    assert "slice" not in started(d)
    assert waits(d)["slice"].reason.code == "mig_relayout", waits(d)["slice"].reason
    assert [(r.node, r.gpu) for r in d.relayouts] == [("m1", 0)]
