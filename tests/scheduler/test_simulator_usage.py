"""The simulator hands the scheduler each team's fair-share usage as the service does
(queue_service/jobs/snapshot.py, _usage_by_team): every GPU-second decayed from when it was
used, a running job's up to now, in one bucket at now. Before, a run was charged whole and
undecayed at its end, and nothing while it ran."""

from __future__ import annotations

import math

import pytest

from scheduler.simulate import simulate
from scheduler.types import Decisions, Policy, Snapshot
from scheduler.workload import Cluster, SimJob

from .builders import nodes, request, team

HALF_LIFE = 3600.0
RATE = math.log(2.0) / HALF_LIFE


def service_usage(runs: list[tuple[float, float, float]], now: float) -> float:
    """The service's closed form, per run (gpus, started, ended): gpus times the integral of
    2^-(now - t)/half_life over the run, a running one up to now."""
    total = 0.0
    for gpus, start, end in runs:
        end = min(end, now)
        recent = math.exp(-RATE * (now - end))
        early = math.exp(-RATE * (now - start))
        total += gpus * (recent - early) / RATE
    return total


def sim_job(id: str, team: str, submit: float, duration: float, gpus: int = 1) -> SimJob:
    return SimJob(request(id, team=team, gpus=gpus, submit=submit, limit=duration), duration)


def observed(policy: Policy) -> dict[float, Snapshot]:
    cluster = Cluster(nodes(1, gpus=4), (team("a", 2, 2), team("b", 2, 2)))
    jobs = [
        sim_job("a1", "a", 0.0, 10_000.0, gpus=2),
        sim_job("b1", "b", 5_000.0, 100.0),
        sim_job("b2", "b", 6_000.0, 100.0),
    ]
    seen: dict[float, Snapshot] = {}

    def observe(s: Snapshot, d: Decisions, now: float) -> None:
        seen[now] = s

    simulate(cluster, jobs, policy.name, policy=policy, observe=observe)
    return seen


def usage(s: Snapshot) -> dict[str, tuple[float, float]]:
    out = {}
    for t in s.teams:
        assert len(t.usage) <= 1
        if t.usage:
            out[t.name] = (t.usage[0].at, t.usage[0].gpu_seconds)
    return out


def test_a_running_job_is_charged_up_to_now_decayed_second_by_second() -> None:
    seen = observed(Policy(fair_share_half_life_s=HALF_LIFE))
    at, charged = usage(seen[5_000.0])["a"]
    assert at == 5_000.0
    assert charged == pytest.approx(service_usage([(2, 0.0, 10_000.0)], 5_000.0), rel=1e-12)
    # Fewer than the 10,000 GPU-seconds undecayed, more than if all were used at its start.
    assert 10_000 * 2.0 ** (-5_000 / HALF_LIFE) < charged < 10_000


def test_an_ended_run_is_charged_decayed_from_each_second_it_ran() -> None:
    seen = observed(Policy(fair_share_half_life_s=HALF_LIFE))
    now = 6_000.0
    got = usage(seen[now])
    assert got["a"] == (now, pytest.approx(service_usage([(2, 0.0, 10_000.0)], now), rel=1e-12))
    # b1 ran 5,000-5,100 s: not 100 GPU-seconds at its end, but each second decayed since.
    expected_b = service_usage([(1, 5_000.0, 5_100.0)], now)
    assert got["b"] == (now, pytest.approx(expected_b, rel=1e-12))
    assert expected_b < 100 * 2.0 ** (-900 / HALF_LIFE)


def test_the_first_call_sees_no_usage() -> None:
    seen = observed(Policy(fair_share_half_life_s=HALF_LIFE))
    assert usage(seen[0.0]) == {}


def test_policies_without_fair_share_are_handed_no_usage() -> None:
    # They never read it; building it every call would only slow the baselines.
    seen = observed(Policy(name="backfill", fair_share=False))
    assert all(usage(s) == {} for s in seen.values())
    assert set(seen) >= {0.0, 5_000.0, 6_000.0}
