"""A whole-GPU job that preempted in an earlier cycle (PendingJob.preempting_on) and is now
refused quota until a known time (its team's own jobs hold the nominal it needs, and end
soon) keeps what its preemption freed until then: the GPUs, as an EASY reservation from
then, and its team's nominal, as hold_quota holds it for a job waiting for nodes. A job
that would still run then does not start there, or on that quota, only to be preempted
again by the same job once the quota frees; a job that ends before may.

Found by the multi-cycle properties' search (test_properties_over_cycles.py and
test_mig_properties_over_cycles.py), each case a victim preempted twice by one job within
one wait:
- team c's job reclaimed b's borrower, c's short high job took one of the two GPUs, the
  borrower restarted on the other, and c's job reclaimed it again ten seconds later;
- team a's high job displaced a's normal 2-GPU job to fit a's nominal, counting on a's
  other job ending within the grace; the victim left early, restarted on borrowed quota,
  and was displaced again;
- a slice job reclaimed a borrower's instance, its team's high job then took the nominal,
  and the borrower restarted on the instance (the reclaimer, refused quota, was no longer
  named back as a preemptor) to be reclaimed again once the high job ended.

Named back: its quota reason carries `on_nodes` (scheduler.reasons.keeping) and it is in
Decisions.preempting, as a job waiting for its victims is."""

from __future__ import annotations

from dataclasses import replace

from scheduler.types import MigInstance, PendingJob

from .builders import (
    NOW,
    decide,
    job,
    mig_node,
    nodes,
    request,
    running,
    snap,
    started,
    team,
    waits,
)
from .driver import Driver
from .test_mig_over_several_cycles import MigDriver

TEAMS = [team("a", 1, None), team("b", 0, None), team("c", 2, None)]


def reclaimer() -> PendingJob:
    """c's 2-GPU job, preempted once (so it runs only within c's nominal), that reclaimed
    n1 in the last cycle; its victim has left."""
    pending = job("wide", team="c", gpus=2, submit=NOW - 300, limit=600)
    return replace(pending, preempting_on=("n1",), preemptions=1)


def test_a_job_outlasting_the_quota_wait_does_not_take_the_gpus_freed_for_it() -> None:
    urgent = running("urgent", {"n1": [0]}, team="c", priority="high", started=NOW, limit=10)
    borrower = job("borrower", team="b", submit=NOW - 200, limit=60)
    s = snap(nodes(1, gpus=2), TEAMS, [reclaimer(), borrower], [urgent])

    d = decide(s)

    assert not started(d), started(d)
    wide, wait = waits(d)["wide"], waits(d)["borrower"]
    assert wide.reason.code == "quota_exhausted", wide.reason
    assert (wide.estimated_start, wide.reserved) == (NOW + 10, True), wide
    # Named back next cycle (the service reads its reason's on_nodes, the simulator this).
    assert dict(wide.reason.details)["on_nodes"] == ("n1",), wide.reason
    assert ("wide", ("n1",)) in d.preempting, d.preempting
    assert dict(wait.reason.details)["reserved_for"] == "wide", wait.reason
    assert "reserved for job wide" in wait.reason.message, wait.reason.message


def test_a_job_ending_before_the_quota_frees_may_use_them() -> None:
    urgent = running("urgent", {"n1": [0]}, team="c", priority="high", started=NOW, limit=100)
    short = job("short", team="b", submit=NOW - 200, limit=60)
    s = snap(nodes(1, gpus=2), TEAMS, [reclaimer(), short], [urgent])

    assert "short" in started(decide(s))


def test_the_borrower_is_reclaimed_once() -> None:
    # wide runs; c's high job preempts it (its own team's lower class, to fit c's nominal).
    # b's borrower takes the other GPU and wide reclaims it; while it checkpoints, c's
    # second high job arrives and takes a GPU. The borrower must not restart on the other.
    driver = Driver(nodes(1, gpus=2), tuple(TEAMS))
    driver.place(running("wide", {"n1": [0, 1]}, team="c", started=NOW - 600, limit=3600))
    driver.submit(job("urgent", team="c", priority="high", limit=10).request, 10)
    driver.submit(job("borrower", team="b", limit=600).request, 600)
    grace = driver.policy.preemption_grace_s
    driver.run_until(NOW + grace + 3 * driver.step)
    assert driver.preemptions == [("urgent", "wide"), ("wide", "borrower")], driver.preemptions

    # It runs 120 s: the reclaimer keeps what it freed cycle after cycle, not for one only.
    driver.submit(job("urgent2", team="c", priority="high", submit=driver.now, limit=120).request)
    driver.run_until(driver.now + grace + 120 + 3 * driver.step)

    assert driver.preemptions == [("urgent", "wide"), ("wide", "borrower")]
    assert "wide" in driver.running or driver.duration["wide"] <= 0, driver.pending


def test_its_own_teams_lower_class_victim_does_not_restart_on_the_quota_it_waits_for() -> None:
    # a's high job displaced a's normal 2-GPU job last cycle (a's nominal is 1 GPU; a's
    # other normal job ends in 10 s). b will want all of its nominal in 110 s, so b lends
    # only to jobs that end by then: not to the high job, but to its victim. The victim
    # has left; it may not start again on that borrowed quota, which would keep a above
    # its nominal past those 10 s.
    high = replace(job("high", priority="high", submit=NOW - 20, limit=200), preempting_on=("n1",))
    victim = replace(job("victim", gpus=2, submit=NOW - 20, limit=50), preemptions=1)
    wide = job("wide", team="b", gpus=4, submit=NOW - 100, limit=10)
    s = snap(
        nodes(1, gpus=4),
        [team("a", 1, None), team("b", 4, None)],
        [high, victim, wide],
        [
            running("ending", {"n1": [2]}, started=NOW - 50, limit=60),
            running("other", {"n1": [1]}, team="b", priority="high", started=NOW, limit=110),
        ],
    )

    d = decide(s)

    assert not started(d), started(d)
    assert waits(d)["high"].estimated_start == NOW + 10, waits(d)["high"]
    held = waits(d)["victim"].reason
    assert dict(held.details).get("held_for") == "high", held


def test_a_slice_preemptor_refused_quota_keeps_the_instance_its_victim_freed() -> None:
    # b's 1g job reclaimed a's borrower's 1g.10gb instance on m1 (b: nominal 1.6 GPUs). Its
    # victim has left; meanwhile b's high whole-GPU job took b's nominal for 60 s, so the
    # 1g job is refused quota. a's borrower must not restart on the freed instance (and be
    # reclaimed again): the instance stays the 1g job's, cycle after cycle.
    lay = (MigInstance("4g.40gb", 0, 4), MigInstance("1g.10gb", 6, 1))
    teams = (team("a", 0, None), team("b", 1.6, 0), team("c", 3, None))
    driver = MigDriver((mig_node("m1", [lay]), *nodes(1, gpus=1)), teams)
    driver.holds("big", "m1", 0, 0, team="b", priority="normal", limit=3600)
    driver.place(running("urgent", {"n1": [0]}, team="b", priority="high", started=NOW, limit=60))
    one = job("one", team="b", mig="1g.10gb", priority="low", submit=NOW - 100, limit=600)
    driver.pending["one"] = replace(one, preempting_on=("m1",))
    driver.duration["one"] = 600
    driver.submit(request("borrower", team="a", mig="1g.10gb", submit=NOW - 200, limit=600))

    d = driver.cycle()
    wait = waits(d)["one"]
    assert wait.reason.code == "quota_exhausted", wait.reason
    assert dict(wait.reason.details)["on_nodes"] == ("m1",), wait.reason
    driver.advance()
    driver.run_until(NOW + 60 + 3 * driver.step)

    assert driver.gpu_of("one") == ("m1", 0), {
        w.job_id: w.reason for w in driver.decisions[-1].waits
    }
    assert "borrower" not in driver.running
    assert driver.preemptions == []
