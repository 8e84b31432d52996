"""Within a team, jobs start in submit order: a later job may not take the nominal quota an
earlier job of its team is waiting to use (it fits that nominal but waits for nodes), unless
it ends before that job could start, as EASY backfill lets a job pass a reservation.

Without this, a gang that waits for whole nodes sees its own team's later, smaller jobs
refill the nominal each time some of it frees, and starts only when the queue runs dry."""

from __future__ import annotations

from tests.scheduler.builders import NOW, decide, job, nodes, running, snap, started, team, waits


def cluster(limit: float | None = 3600.0):  # type: ignore[no-untyped-def]
    """Four 8-GPU nodes, none with a whole node free. Team c's r1 (6 GPUs on n1) ends at
    +2000; team a (nominal 24) runs 16 GPUs ending at +3000, +4000 and +5000. Team c's
    non-preemptible 1x8 job comes first and holds the cluster's reservation (n1). Team a's
    1x8 job `gang` fits a's nominal (16 + 8 = 24) but no node now: nodes could first hold
    it at +2000, when a still runs all 16."""

    def ends(at: float) -> float | None:
        return at + 100 if limit else None

    return (
        nodes(4),
        [team("a", 24), team("c", 8)],
        [
            running("r1", {"n1": range(6)}, team="c", started=NOW - 100, limit=ends(2000)),
            running("r2", {"n2": range(6)}, started=NOW - 100, limit=ends(3000)),
            running("r3", {"n3": range(4)}, started=NOW - 100, limit=ends(4000)),
            running("r4", {"n4": range(6)}, started=NOW - 100, limit=ends(5000)),
        ],
        [job("hi", team="c", gpus=8, priority="high", submit=NOW - 500)],
    )


def test_a_later_job_of_the_team_does_not_take_the_nominal_its_waiting_job_needs() -> None:
    nodes_, teams, busy, ahead = cluster()
    pending = [
        *ahead,
        job("gang", gpus=8, submit=NOW - 400),
        job("later", gpus=2, submit=NOW - 300, limit=3600.0),
    ]
    d = decide(snap(nodes_, teams, pending, busy))
    assert "later" not in started(d)
    w = waits(d)["later"]
    assert w.reason.code == "quota_exhausted"
    assert dict(w.reason.details)["held_for"] == "gang"
    assert "holds 8 more for its earlier job gang" in w.reason.message
    assert waits(d)["gang"].reason.code in {"no_capacity", "behind_higher_priority"}


def test_a_later_job_that_ends_before_the_waiting_job_can_start_may_pass() -> None:
    nodes_, teams, busy, ahead = cluster()
    pending = [
        *ahead,
        job("gang", gpus=8, submit=NOW - 400),
        job("short", gpus=2, submit=NOW - 300, limit=1200.0),  # ends by +2000
    ]
    assert "short" in started(decide(snap(nodes_, teams, pending, busy)))


def test_nominal_beyond_what_the_waiting_job_needs_stays_usable() -> None:
    nodes_, teams, busy, ahead = cluster()
    teams = [team("a", 26), team("c", 8)]  # 16 used + 8 waiting leaves 2
    pending = [
        *ahead,
        job("gang", gpus=8, submit=NOW - 400),
        job("later", gpus=2, submit=NOW - 300),
    ]
    assert "later" in started(decide(snap(nodes_, teams, pending, busy)))


def test_other_teams_jobs_are_not_held_back_by_it() -> None:
    nodes_, teams, busy, ahead = cluster()
    teams = [team("a", 24), team("b", 4), team("c", 8)]
    pending = [
        *ahead,
        job("gang", gpus=8, submit=NOW - 400),
        job("theirs", team="b", gpus=2, submit=NOW - 300),
    ]
    assert "theirs" in started(decide(snap(nodes_, teams, pending, busy)))


def test_no_hold_when_the_waiting_job_has_no_known_start() -> None:
    # Running jobs without time limits: when nodes free is not known, and holding the
    # nominal would keep the team waiting for a time nobody knows.
    nodes_, teams, busy, ahead = cluster(limit=None)
    pending = [
        *ahead,
        job("gang", gpus=8, submit=NOW - 400),
        job("later", gpus=2, submit=NOW - 300),
    ]
    assert "later" in started(decide(snap(nodes_, teams, pending, busy)))


def test_the_waiting_job_holds_nothing_once_it_can_start() -> None:
    _, teams, busy, ahead = cluster()
    busy = busy[1:]  # n1 and n5 are free: c's job and the team's job both have a node
    teams = [team("a", 26), team("c", 8)]  # room for the gang and the later job
    pending = [
        *ahead,
        job("gang", gpus=8, submit=NOW - 400),
        job("later", gpus=2, submit=NOW - 300),
    ]
    d = decide(snap(nodes(5), teams, pending, busy))
    assert {"hi", "gang", "later"} <= set(started(d))
