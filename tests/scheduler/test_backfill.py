"""EASY backfill: a reservation for the first blocked job; later jobs may not delay it."""

from __future__ import annotations

from .builders import BACKFILL, FIFO, NOW, decide, job, nodes, running, snap, started, team, waits

# Two nodes; n1 is free until its job ends at NOW+1000, n2 has 4 GPUs busy until NOW+3000.
BUSY = [
    running("r1", {"n1": range(8)}, started=NOW - 600, limit=1600),
    running("r2", {"n2": range(4)}, started=NOW - 600, limit=3600),
]


def test_first_blocked_job_gets_a_reservation_and_its_start_time() -> None:
    d = decide(snap(nodes(2), [], [job("big", gpus=8)], BUSY), BACKFILL)
    w = waits(d)["big"]
    assert w.reserved and w.estimated_start == NOW + 1000


def test_short_job_backfills_into_reserved_gpus_when_it_ends_in_time() -> None:
    # big will use n1 at NOW+1000; n2's 4 free GPUs are not needed by it: any job may use them.
    pending = [job("big", gpus=8, submit=1), job("short", gpus=8, submit=2, limit=500)]
    d = decide(snap(nodes(2), [], pending, BUSY), BACKFILL)
    assert "short" not in started(d)  # needs 8 on one node: none free now


def test_long_job_does_not_take_gpus_held_for_the_reservation() -> None:
    busy = [running("r1", {"n1": range(4)}, started=NOW - 600, limit=1600)]
    pending = [
        job("big", gpus=8, submit=1),
        job("long", gpus=4, submit=2, limit=5000),
        job("short", gpus=4, submit=3, limit=900),
    ]
    d = decide(snap(nodes(1), [], pending, busy), BACKFILL)
    assert waits(d)["big"].reserved and waits(d)["big"].estimated_start == NOW + 1000
    assert waits(d)["long"].reason.code == "behind_higher_priority"
    assert "reserved for job big" in waits(d)["long"].reason.message
    assert "short" in started(d)


def test_job_may_use_gpus_the_reservation_does_not_need() -> None:
    pending = [job("big", gpus=8, submit=1), job("long", gpus=4, submit=2, limit=50000)]
    d = decide(snap(nodes(2), [], pending, BUSY), BACKFILL)
    assert "long" in started(d)  # n2's free GPUs: big goes to n1
    assert waits(d)["big"].estimated_start == NOW + 1000


def test_fifo_stops_at_the_first_job_that_does_not_fit() -> None:
    pending = [job("big", gpus=8, submit=1), job("small", gpus=1, submit=2, limit=60)]
    d = decide(snap(nodes(2), [], pending, BUSY), FIFO)
    assert not d.starts
    assert waits(d)["small"].reason.message.startswith("strict FIFO: job big")


def test_every_waiting_job_gets_an_estimate_when_time_limits_are_known() -> None:
    pending = [job(f"j{i}", gpus=4, submit=i, limit=1000) for i in range(6)]
    busy = [running("r1", {"n1": range(8)}, started=NOW, limit=1000)]
    d = decide(snap(nodes(1), [], pending, busy), BACKFILL)
    estimates = [w.estimated_start for w in sorted(d.waits, key=lambda w: w.position)]
    assert estimates == [NOW + 1000, NOW + 1000, NOW + 2000, NOW + 2000, NOW + 3000, NOW + 3000]


def test_no_estimate_when_running_jobs_have_no_time_limit() -> None:
    busy = [running("r1", {"n1": range(8)}, limit=None)]
    d = decide(snap(nodes(1), [], [job("x")], busy), BACKFILL)
    assert waits(d)["x"].estimated_start is None


def test_positions_are_1_based_in_scheduling_order() -> None:
    busy = [running("r1", {"n1": range(8)})]
    d = decide(snap(nodes(1), [], [job(f"j{i}", submit=i) for i in range(4)], busy), BACKFILL)
    assert [(w.job_id, w.position) for w in d.waits] == [("j0", 1), ("j1", 2), ("j2", 3), ("j3", 4)]
    assert waits(d)["j3"].reason.message.startswith("3 jobs ahead need 3 GPUs")


def test_no_estimate_of_now_for_a_job_whose_shape_no_node_can_hold_now() -> None:
    # 2 nodes with 4 free GPUs each; their other GPUs run jobs without a time limit. An
    # 8-GPU job cannot start now and no known release lets it: its estimate must not be
    # "now" (it is told "the best now is 0 nodes" in the same Wait).
    run = [
        running("r1", {"n1": range(4)}, limit=None),
        running("r2", {"n2": range(4)}, limit=None),
    ]
    d = decide(snap(nodes(2), [team("a", 16)], [job("p", gpus=8)], run))
    w = waits(d)["p"]
    assert w.reason.code == "no_capacity"
    assert w.estimated_start is None


def test_an_estimate_is_not_before_a_node_can_hold_the_job() -> None:
    # Strict FIFO, no reservation: n1 frees 4 GPUs at NOW + 1000, n2 at NOW + 2000. An
    # 8-GPU single-node job can start at NOW + 1000 at the earliest, not NOW.
    run = [
        running("r1", {"n1": range(4)}, started=NOW - 600, limit=1600.0),
        running("r2", {"n2": range(4)}, started=NOW - 600, limit=2600.0),
    ]
    d = decide(snap(nodes(2), [], [job("p", gpus=8)], run), FIFO)
    w = waits(d)["p"]
    assert w.estimated_start == NOW + 1000
