"""The free GPUs a preemptor counts on beside its victims' (a gang that reclaims one node and
needs a free GPU on another) are held for it, and no later job takes them, not even one
that ends before an EASY reservation on the same node starts: backfill judges only GPUs
held for that reservation. Before, such a job took them, the gang reclaimed it in the
next cycle, and the first victim restarted on the node the gang had freed, cycle after
cycle (found by test_properties_over_cycles.py's search)."""

from __future__ import annotations

from .builders import NOW, decide, job, nodes, running, snap, started, team, waits
from .driver import Driver

TEAMS = [team("a", 3, None), team("b", 7, None), team("c", 8, None)]
# b's 2 x 1 gang, within b's nominal, reclaims n2 from a's borrower and needs one of n1's
# four free GPUs. b's 2 x 4 job then waits for nodes and holds the EASY reservation, far
# off; a's 4-GPU filler would end before it starts.
GANG = job("gang", team="b", nodes=2, gpus=1, priority="low", submit=NOW - 500, limit=490)
WIDE = job("wide", team="b", nodes=2, gpus=4, submit=NOW - 400, limit=430)
FILLER = job("filler", team="a", gpus=4, priority="low", submit=NOW - 100, limit=280)
BORROWER = running("borrower", {"n2": range(4)}, started=NOW - 100, limit=1000)


def test_a_job_ending_before_a_reservation_does_not_take_a_gpu_held_for_a_preemptor() -> None:
    d = decide(snap(nodes(2, gpus=4), TEAMS, [GANG, WIDE, FILLER], [BORROWER]))

    assert [(p.by_job_id, p.job_id) for p in d.preemptions] == [("gang", "borrower")]
    assert waits(d)["wide"].reserved, waits(d)["wide"]
    assert "filler" not in started(d), started(d)["filler"]


def test_the_gang_preempts_once_and_starts() -> None:
    driver = Driver(nodes(2, gpus=4), tuple(TEAMS))
    driver.place(BORROWER)
    for pending in (GANG, WIDE, FILLER):
        driver.submit(pending.request)

    driver.run_until(NOW + driver.policy.preemption_grace_s + 3 * driver.step)

    assert driver.preemptions == [("gang", "borrower")], driver.preemptions
    assert "gang" in driver.running, {k: p.preempting_on for k, p in driver.pending.items()}
