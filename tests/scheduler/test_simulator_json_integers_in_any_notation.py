"""CLUSTER.json's integers (../shared/specs/simulation.md, §CLUSTER.json): JSON (RFC 8259)
has one number type, so an integer may be written `8`, `8.0` or `1e3` (json.dumps writes a
computed float count as `8.0`); a number with a fraction is no integer and exits 2 with the
field's message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scheduler.types import Quota
from scheduler.workload import InputError, parse_cluster

from .test_simulator_spec import A100, cli


def cluster(gpus: Any = 8, value: Any = 100, max_jobs: Any = None) -> str:
    quota: dict[str, Any] = {"nominal": 8}
    if max_jobs is not None:
        quota["max_running_jobs"] = max_jobs
    return json.dumps(
        {
            "nodes": [{"name": "n1", "gpu_model": A100, "gpus": gpus}],
            "teams": [{"name": "a", "quota": {"*": quota}}],
            "priority_classes": [{"name": "normal", "value": value, "preemptible": True}],
        }
    )


@pytest.mark.parametrize(
    ("text", "gpus", "value", "max_jobs"),
    [
        pytest.param(cluster(gpus=8.0), 8, 100, None, id="gpus-8.0"),
        pytest.param(cluster(value=1e3), 8, 1000, None, id="class-value-1e3"),
        pytest.param(cluster(value=-5.0), 8, -5, None, id="negative-class-value"),
        pytest.param(cluster(max_jobs=2.0), 8, 100, 2, id="max-running-jobs-2.0"),
    ],
)
def test_an_integral_json_number_is_read_as_the_integer(
    text: str, gpus: int, value: int, max_jobs: int | None
) -> None:
    parsed = parse_cluster(text, "cluster.json")
    assert parsed.nodes[0].gpus == gpus and type(parsed.nodes[0].gpus) is int
    assert parsed.priority_classes[0].value == value
    assert type(parsed.priority_classes[0].value) is int
    assert parsed.teams[0].quotas == (Quota("*", 8.0, 0.0, None, max_jobs),)


def test_a_cluster_with_integers_written_as_floats_simulates(tmp_path: Path) -> None:
    out, reports, _, _ = cli(
        tmp_path, cluster(gpus=8.0, value=1e3), "job_id,team,submit_s,duration_s\nj1,a,0,10\n"
    )
    assert out.returncode == 0, out.stderr
    assert reports["gpuq"]["completed"] == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            cluster(gpus=8.5),
            "field nodes[0].gpus: expected an integer from 0 to 1024, got 8.5",
            id="gpus-8.5",
        ),
        pytest.param(
            cluster(gpus=1025.0),
            "field nodes[0].gpus: expected an integer from 0 to 1024, got 1025.0",
            id="gpus-over-the-bound-as-float",
        ),
        pytest.param(
            cluster(value=99.5),
            "field priority_classes[0]: expected {name: str, value: int, preemptible: bool}",
            id="class-value-99.5",
        ),
        pytest.param(
            cluster(max_jobs=1.5),
            "field teams[0].quota.*.max_running_jobs: expected an integer",
            id="max-running-jobs-1.5",
        ),
        pytest.param(
            cluster(gpus=True),
            "field nodes[0].gpus: expected an integer from 0 to 1024, got True",
            id="a-boolean-is-no-integer",
        ),
    ],
)
def test_a_json_number_with_a_fraction_is_refused_where_an_integer_is_expected(
    text: str, message: str
) -> None:
    with pytest.raises(InputError) as e:
        parse_cluster(text, "cluster.json")
    assert message in str(e.value)
