"""Team weights and Jain's index (../shared/specs/simulation.md, §CLUSTER.json and
§REPORT.json): `jain_fairness` divides each team's GPU-seconds by its weight, so a weight
takes the service's bound (at least 0.01: below it a team is entitled to nothing the index
could measure) and anything smaller exits 2 naming `teams[i].weight`; the index is
scale-invariant and computed so that no finite value overflows it; a report with no index
(no interval in which every team waited) says so in its summary line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.simulate import jain

from .test_simulator_spec import cli, cluster_json, node, team

JOBS = "job_id,team,submit_s,duration_s\na1,a,0,100\na2,a,0,100\nb1,b,0,100\nb2,b,0,100\n"


def two_teams(weight_a: object) -> str:
    return json.dumps(
        {
            "nodes": [node("n1", 1)],
            "teams": [
                {"name": "a", "weight": weight_a, "quota": {"*": {"nominal": 1}}},
                {"name": "b", "weight": 1.0, "quota": {"*": {"nominal": 1}}},
            ],
        }
    )


@pytest.mark.parametrize("weight", [1e-200, 0, 0.0, 0.009, 5e-324])
def test_a_team_weight_below_the_services_bound_exits_2(tmp_path: Path, weight: float) -> None:
    out, *_ = cli(tmp_path, two_teams(weight), JOBS, "fifo")
    assert out.returncode == 2, out.stdout
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert "field teams[0].weight: expected a number >= 0.01" in out.stderr, out.stderr


@pytest.mark.parametrize("weight", [0.01, 1e6, 1e300])
def test_any_weight_from_the_bound_up_gives_an_index_within_0_and_1(
    tmp_path: Path, weight: float
) -> None:
    out, reports, _, _ = cli(tmp_path, two_teams(weight), JOBS, "fifo")
    assert out.returncode == 0, out.stderr
    index = reports["fifo"]["jain_fairness"]
    assert index is not None and 0.0 <= index <= 1.0


@pytest.mark.parametrize("scale", [1e-300, 1.0, 1e200, 1e300])
def test_jain_is_scale_invariant_and_does_not_overflow(scale: float) -> None:
    assert jain([scale, scale]) == pytest.approx(1.0)
    # (2, 1): 3^2 / (2 * (4 + 1)) = 0.9
    assert jain([2 * scale / 10, scale / 10]) == pytest.approx(0.9)
    assert jain([scale, 0.0]) == pytest.approx(0.5)


@pytest.mark.parametrize("values", [[], [0.0], [0.0, 0.0]])
def test_jain_has_no_value_when_no_team_received_anything(values: list[float]) -> None:
    assert jain(values) is None


def test_a_report_without_an_index_says_so_in_the_summary(tmp_path: Path) -> None:
    # One job per team, both start at once: no interval in which every team waited.
    cluster = cluster_json([node("n1", 2)], [team("a", 1), team("b", 1)])
    jobs = "job_id,team,submit_s,duration_s\na1,a,0,10\nb1,b,0,10\n"
    out, reports, _, _ = cli(tmp_path, cluster, jobs, "fifo")
    assert out.returncode == 0, out.stderr
    assert reports["fifo"]["jain_fairness"] is None
    assert "Jain n/a," in out.stdout and "None" not in out.stdout, out.stdout
