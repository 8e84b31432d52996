"""The workload generator (`python -m scheduler generate`): jobs that fit the cluster it
writes, at the offered load asked for, and the same files as ever for the settings that
docs/BENCHMARKS.md records."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from scheduler import generate
from scheduler.workload import csv_text

REPO = Path(__file__).resolve().parents[2]


def texts(spec: generate.Spec) -> tuple[str, str]:
    """CLUSTER.json and JOBS.csv as `generate` writes them."""
    rows = ([r[c] for c in generate.COLUMNS] for r in generate.jobs(spec))
    return json.dumps(generate.cluster(spec), indent=2) + "\n", csv_text(generate.COLUMNS, rows)


def offered_load(spec: generate.Spec) -> float:
    rows = generate.jobs(spec)
    work = sum(int(r["nodes"]) * int(r["gpus_per_node"]) * float(r["duration_s"]) for r in rows)
    return work / (float(rows[-1]["submit_s"]) * spec.nodes * spec.gpus_per_node)


@pytest.mark.parametrize(("node_count", "gpus_per_node"), [(4, 4), (2, 8), (1, 8), (1, 2), (8, 16)])
def test_generated_jobs_fit_the_generated_cluster(node_count: int, gpus_per_node: int) -> None:
    # `generate --nodes N --gpus-per-node G` must not write jobs that can never run on the
    # cluster it writes (they never start, and the offered load is no longer `load`).
    spec = generate.Spec(300, 1, 4, node_count, gpus_per_node, 1.3)
    rows = generate.jobs(spec)
    too_big = [
        r for r in rows if int(r["gpus_per_node"]) > gpus_per_node or int(r["nodes"]) > node_count
    ]
    assert not too_big, f"{len(too_big)} of {len(rows)} jobs cannot fit, e.g. {too_big[0]}"
    (node,) = {(n["gpus"]) for n in generate.cluster(spec)["nodes"]}
    assert node == gpus_per_node


def test_a_whole_node_job_takes_a_whole_node_of_the_generated_cluster() -> None:
    spec = generate.Spec(300, 1, 4, 16, 4, 1.3)
    assert generate.shapes(spec) == (
        (1, 1, 0.62),
        (1, 2, 0.14),
        (1, 4, 0.10),
        (1, 4, 0.08),
        (2, 4, 0.04),
        (4, 4, 0.02),
    )
    assert generate.shapes(generate.Spec(300, 1, nodes=2, gpus_per_node=16))[-3:] == (
        (1, 16, 0.08),
        (2, 16, 0.04),
        (2, 16, 0.02),
    )


@pytest.mark.parametrize(("node_count", "gpus_per_node"), [(4, 4), (16, 4), (2, 8)])
@pytest.mark.parametrize("seed", [1, 2])
def test_the_offered_load_is_computed_from_the_shapes_written(
    node_count: int, gpus_per_node: int, seed: int
) -> None:
    # The same seed draws the same durations and shape rows on any cluster, so the load
    # offered to a fitted cluster comes out as on the default one (smaller shapes, more jobs
    # per second), not lower by the GPUs the table's 8-GPU shapes would have asked for.
    default = offered_load(generate.Spec(3000, seed))
    fitted = offered_load(generate.Spec(3000, seed, 4, node_count, gpus_per_node))
    assert fitted == pytest.approx(default, rel=0.15)


@pytest.mark.parametrize(
    ("spec", "cluster_sha256", "jobs_sha256"),
    [
        (
            generate.Spec(500, 7),
            "4eb626ed440148e5cd32ba4e7921b5dbcc5c53d5e57e43f079bea1e6dc34094e",
            "16a826bba90d6c0d6309b1779e563290f7c111c98546e2f957e23b5588273dd4",
        ),
        (
            generate.Spec(500, 3, teams=8, nodes=4, load=0.9),
            "e11662dabeea77ccaca0552a0d71c4c983bfbfedd05453d7f984b261ad64827d",
            "b08da81f7f605fa5cdc7145704308ed9b5c617ccb9261c87a3b1853d62810e40",
        ),
    ],
    ids=["32x8", "4x8"],
)
def test_on_8_gpu_nodes_and_at_least_4_of_them_the_files_are_as_before(
    spec: generate.Spec, cluster_sha256: str, jobs_sha256: str
) -> None:
    # docs/BENCHMARKS.md records results on generated workloads: the same seed and
    # arguments must keep writing the same bytes (digests of the files before shapes were
    # fitted to the cluster).
    cluster, jobs = texts(spec)
    assert hashlib.sha256(cluster.encode()).hexdigest() == cluster_sha256
    assert hashlib.sha256(jobs.encode()).hexdigest() == jobs_sha256


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--nodes", "0"),
        ("--gpus-per-node", "0"),
        ("--gpus-per-node", "1025"),  # simulate refuses nodes over 1024 GPUs
        ("--teams", "0"),
        ("--load", "0"),
        ("--jobs", "-1"),
    ],
)
def test_a_cluster_or_load_that_cannot_hold_jobs_exits_2(
    tmp_path: Path, flag: str, value: str
) -> None:
    out = subprocess.run(
        [
            "python3",
            "-S",
            "-m",
            "scheduler",
            "generate",
            flag,
            value,
            "--cluster-out",
            str(tmp_path / "c.json"),
            "--workload-out",
            str(tmp_path / "j.csv"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr[-300:]
    line = out.stderr.strip()
    assert "\n" not in line and flag[2:].replace("-", "_") in line
    assert not (tmp_path / "c.json").exists()


def test_an_unwritable_output_exits_2_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "c.json"
    out = subprocess.run(
        [
            *("python3", "-S", "-m", "scheduler", "generate", "--jobs", "10"),
            *("--cluster-out", str(missing), "--workload-out", str(tmp_path / "j.csv")),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr[-300:]
    assert out.stderr.count("\n") == 1 and str(missing) in out.stderr, out.stderr
