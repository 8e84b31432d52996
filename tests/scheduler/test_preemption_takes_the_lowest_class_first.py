"""Victim choice across nodes: borrowed first, then the lowest priority class, then the most
recently started (issue 3; Kueue ranks candidates by priority before admission time, Slurm
preempts the lowest priority first)."""

from __future__ import annotations

import pytest

from scheduler.types import Policy

from .builders import NOW, decide, job, nodes, running, snap, team

# No weighing of lost work: the order alone picks the victims.
ORDER_ONLY = Policy(preemption_loss_ratio=None)


@pytest.mark.parametrize(
    ("on_n1", "on_n2", "victim"),
    [
        # The lower class goes, though the other started later (and lost less work).
        (("low", "low", NOW - 1000), ("normal", "normal", NOW - 10), "low"),
        (("normal", "normal", NOW - 10), ("low", "low", NOW - 1000), "low"),
        # Within one class, the most recently started goes.
        (("old", "low", NOW - 1000), ("new", "low", NOW - 10), "new"),
    ],
    ids=["lower-class-started-first", "lower-class-on-the-other-node", "same-class-latest"],
)
def test_a_whole_node_is_taken_from_the_lowest_class_before_the_most_recently_started(
    on_n1: tuple[str, str, float], on_n2: tuple[str, str, float], victim: str
) -> None:
    """A high job needing a whole node, with each of two nodes held by one job of its own
    team (neither borrowed, one victim either way), preempts the job of the lower class;
    between jobs of one class, the one that started last."""
    busy = [
        running(name, {node: range(8)}, priority=cls, started=at, limit=360_000.0)
        for node, (name, cls, at) in (("n1", on_n1), ("n2", on_n2))
    ]
    s = snap(nodes(2), [team("a", 16)], [job("h", gpus=8, priority="high", limit=36_000.0)], busy)
    d = decide(s, ORDER_ONLY)
    assert [p.job_id for p in d.preemptions] == [victim], d.preemptions
