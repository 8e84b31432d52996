"""`python -m scheduler generate` writes only files `simulate` reads: a `--load` so low that
the arrivals pass the simulator's bound on times (MAX_SECONDS), or so extreme that the mean
gap between arrivals is no usable float, exits 2 with one line naming the load, before any
file is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scheduler import generate
from scheduler.workload import MAX_SECONDS

REPO = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler", *args], cwd=REPO, capture_output=True, text=True
    )


@pytest.mark.parametrize(
    ("jobs", "load"),
    [
        pytest.param("50", "1e-9", id="arrivals-pass-the-bound"),
        pytest.param("50", "1e-12", id="mean-gap-over-the-bound"),
        pytest.param("1", "1e-320", id="mean-gap-infinite"),
        pytest.param("50", "1e306", id="mean-gap-zero"),
    ],
)
def test_a_load_whose_files_simulate_would_refuse_exits_2(
    tmp_path: Path, jobs: str, load: str
) -> None:
    c, w = tmp_path / "c.json", tmp_path / "j.csv"
    gen = run(
        *("generate", "--jobs", jobs, "--load", load),
        *("--cluster-out", str(c), "--workload-out", str(w)),
    )
    assert gen.returncode == 2, gen.stdout
    assert gen.stderr.count("\n") == 1 and "load" in gen.stderr, gen.stderr
    assert not c.exists() and not w.exists()


def test_a_low_load_within_the_bound_writes_files_that_simulate(tmp_path: Path) -> None:
    c, w = tmp_path / "c.json", tmp_path / "j.csv"
    gen = run(
        *("generate", "--jobs", "50", "--load", "1e-7"),
        *("--cluster-out", str(c), "--workload-out", str(w)),
    )
    assert gen.returncode == 0, gen.stderr
    sim = run("simulate", "--cluster", str(c), "--workload", str(w), "--policy", "fifo")
    assert sim.returncode == 0, sim.stderr
    assert "50/50 completed" in sim.stdout


def test_generated_arrivals_stay_within_the_simulators_bound() -> None:
    rows = generate.jobs(generate.Spec(50, 1, load=1e-7))
    assert 0 < float(rows[-1]["submit_s"]) <= MAX_SECONDS
