"""The cycle's decide step: scheduler.schedule() with the garbage collector paused."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

import scheduler
from queue_service.jobs.snapshot import decide, policy
from tests.scheduler.builders import job, nodes, snap, team

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
# Enough waiting jobs that one call allocates past the collector's first threshold.
SNAPSHOT = snap(nodes(4), [team("a", 16, 16)], [job(f"j{i}", gpus=1 + i % 8) for i in range(2_000)])


@pytest.fixture
def collections() -> Iterator[list[str]]:
    seen: list[str] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(phase)

    gc.callbacks.append(record)
    try:
        yield seen
    finally:
        gc.callbacks.remove(record)
        gc.enable()


def test_decide_gives_the_schedulers_decisions_without_collecting(
    collections: list[str],
) -> None:
    expected = scheduler.schedule(SNAPSHOT, policy(), NOW.timestamp())
    assert collections, "the same call with the collector on triggers collections"
    collections.clear()

    assert decide(SNAPSHOT, NOW) == expected
    assert collections == []
    assert gc.isenabled()


def test_decide_leaves_a_collector_paused_by_its_caller_paused(
    collections: list[str],
) -> None:
    gc.disable()
    decide(SNAPSHOT, NOW)
    assert not gc.isenabled()


def test_the_scheduler_leaves_no_garbage_cycles_for_the_paused_collector() -> None:
    # What decide() relies on: with the collector paused, cycles would pile up until after.
    gc.collect()
    gc.disable()
    try:
        decide(SNAPSHOT, NOW)
        unreachable = gc.collect()
    finally:
        gc.enable()
    assert unreachable == 0
