"""Bad input the simulator must refuse: exit 2 and a one-line message naming the file, line
and field (../shared/specs/simulation.md, §Command), for what it would otherwise misread.

- A value under no column, or a column the simulator reads named twice: not an unknown
  column (which the spec ignores) but a malformed file. Read anyway, the first would be
  dropped (csv.DictReader files it under the key None) and the second would keep its last
  value: the job would run with a shape or submit time the file did not give.
- A key given twice in one JSON object of CLUSTER.json (json keeps the last value, silently),
  as for a column named twice.
- A quota's `max_running_jobs` below 0 (the service's is a PositiveIntegerField): every job
  of the team would wait for ever, as for a negative `nominal`.
- A node name holding `;`, `:` or `,`: JOBS_OUT.csv and RUNS.csv separate node names and GPU
  indices with them (`a100-01:0,1;a100-02:0,1`), so "n1;x" would read back as nodes "n1" and
  "x", neither in CLUSTER.json.
- A control character in a value quoted by a message (a GPU model, a quota key in the
  field's path): shown escaped, so the message stays one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_simulator_spec import A100, cli

ONE_NODE = json.dumps(
    {
        "nodes": [{"name": "n1", "gpu_model": A100, "gpus": 8}],
        "teams": [{"name": "a", "quota": {"*": {"nominal": 8}}}],
    }
)
ONE_JOB = "job_id,team,submit_s,duration_s\nj1,a,0,10\n"


@pytest.mark.parametrize(
    ("jobs", "where"),
    [
        pytest.param(ONE_JOB + "j2,a,0,10,8\n", "jobs.csv: line 3, field -", id="extra value"),
        pytest.param(
            "job_id,team,submit_s,submit_s,duration_s\nj1,a,0,50,10\n",
            "jobs.csv: line 1, field submit_s",
            id="column twice",
        ),
    ],
)
def test_a_malformed_jobs_file_exits_2_naming_line_and_field(
    tmp_path: Path, jobs: str, where: str
) -> None:
    out, *_ = cli(tmp_path, ONE_NODE, jobs, "gpuq")
    assert out.returncode == 2, out.stdout
    assert out.stderr.count("\n") == 1 and where in out.stderr, out.stderr


@pytest.mark.parametrize("name", ["n1;x", "n1:x", "n1,x"])
def test_a_node_name_holding_an_output_separator_exits_2(tmp_path: Path, name: str) -> None:
    cluster = json.loads(ONE_NODE)
    cluster["nodes"][0]["name"] = name
    out, *_ = cli(tmp_path, json.dumps(cluster), ONE_JOB, "gpuq")
    assert out.returncode == 2
    assert "cluster.json: line 1, field nodes[0].name" in out.stderr, out.stderr


@pytest.mark.parametrize(
    "cluster",
    [
        pytest.param(
            {"nodes": [{"name": "n1", "gpu_model": "A100\nX", "gpus": 8, "mig": True}]},
            id="MIG node of a model with a newline",
        ),
        pytest.param(
            {
                "nodes": [{"name": "n1", "gpu_model": A100, "gpus": 8}],
                "teams": [{"name": "a", "quota": {"A100\nX": {"nominal": -1}}}],
            },
            id="bad quota under a key with a newline",
        ),
    ],
)
def test_a_bad_cluster_file_exits_2_with_a_one_line_message(tmp_path: Path, cluster: dict) -> None:
    out, *_ = cli(tmp_path, json.dumps(cluster), ONE_JOB, "gpuq")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "\\n" in out.stderr, out.stderr


@pytest.mark.parametrize(
    ("text", "where"),
    [
        pytest.param(
            '{"nodes": [\n'
            ' {"name": "n1", "gpu_model": "A100-SXM4-80GB", "gpus": 8,\n'
            '  "gpus": 4}],\n'
            ' "teams": [{"name": "a", "quota": {"*": {"nominal": 8}}}]}\n',
            "cluster.json: line 3, field nodes[0].gpus: key given twice",
            id="a-node-field",
        ),
        pytest.param(
            '{"nodes": [{"name": "n1", "gpu_model": "A100-SXM4-80GB", "gpus": 8}],\n'
            ' "teams": [{"name": "a", "quota": {"*": {"nominal": 8},\n'
            '                                   "*": {"nominal": 0}}}]}\n',
            "cluster.json: line 3, field teams[0].quota.*: key given twice",
            id="a-quota-model",
        ),
        pytest.param(
            '{"nodes": [{"name": "n1", "gpu_model": "A100-SXM4-80GB", "gpus": 8}],\n'
            ' "teams": [{"name": "a", "quota": {"*": {"nominal": 8}}}],\n'
            ' "teams": []}\n',
            "cluster.json: line 3, field teams: key given twice",
            id="a-top-level-key",
        ),
    ],
)
def test_a_key_given_twice_in_a_json_object_exits_2(tmp_path: Path, text: str, where: str) -> None:
    out, *_ = cli(tmp_path, text, ONE_JOB, "gpuq")
    assert out.returncode == 2, out.stdout
    assert out.stderr.count("\n") == 1 and where in out.stderr, out.stderr


@pytest.mark.parametrize("max_jobs", [-1, -1.0])
def test_a_negative_max_running_jobs_exits_2(tmp_path: Path, max_jobs: float) -> None:
    cluster = json.loads(ONE_NODE)
    cluster["teams"][0]["quota"]["*"]["max_running_jobs"] = max_jobs
    out, *_ = cli(tmp_path, json.dumps(cluster), ONE_JOB, "gpuq")
    assert out.returncode == 2, out.stdout
    assert out.stderr.count("\n") == 1, out.stderr
    assert (
        "cluster.json: line 1, field teams[0].quota.*.max_running_jobs: expected an integer >= 0"
        in out.stderr
    ), out.stderr
