"""Slurm dispatch rate through the backend vs raw `sbatch` over one SSH connection, and the
remote calls one sync of 1,000 active jobs costs. Needs the lab (deploy/slurm-lab/lab up).

    .venv/bin/python bench/slurm_dispatch.py [--jobs 200] [--rounds 5] [--active 1000]

Raw and backend submissions alternate in rounds on the same connection, so both see the same
controller load; each rate is jobs / wall time of its own blocks. Every node is first filled
by a blocker job, so the submitted jobs stay pending: the lab's compute nodes share this
machine's CPUs with the login node, and jobs running there would slow the submissions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from queue_service.backends.base import ClusterConfig, DispatchRequest
from queue_service.backends.slurm import SlurmBackend, create

CLUSTER_JSON = Path("/var/lib/slurm-lab/client/cluster.json")


def job() -> DispatchRequest:
    return DispatchRequest(
        job_id=str(uuid.uuid4()), team="bench", user="bench", name="bench", kind="agent",
        command=("true",),
    )  # fmt: skip


def raw_sbatch(backend: SlurmBackend) -> None:
    result = backend.connection.run("sbatch --parsable --output=/dev/null --wrap=true")
    assert result.rc == 0, result.stderr


def timed(n: int, action: Callable[[], object]) -> float:
    start = time.perf_counter()
    for _ in range(n):
        action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--active", type=int, default=1000)
    args = parser.parse_args()
    settings = json.loads(CLUSTER_JSON.read_text())
    backend = create(ClusterConfig(id=1, name="lab", kind="slurm", settings=settings))
    run = backend.connection.run
    run("scancel -u $(id -un)")
    for node in backend.nodes():
        blocker = (
            f"sbatch --parsable --exclusive -w {node.name} --output=/dev/null --wrap='sleep 900'"
        )
        assert run(blocker).rc == 0
    backend.submit(job())  # connect, resolve the workdir
    raw_sbatch(backend)

    per_round = args.jobs // args.rounds
    raw_times, backend_times = [], []
    submit_calls = 0
    for _ in range(args.rounds):
        raw_times.append(timed(per_round, lambda: raw_sbatch(backend)))
        calls = backend.connection.calls
        backend_times.append(timed(per_round, lambda: backend.submit(job())))
        submit_calls += backend.connection.calls - calls
    n = per_round * args.rounds
    raw_rate, backend_rate = n / sum(raw_times), n / sum(backend_times)
    ratios = [r / b for r, b in zip(raw_times, backend_times, strict=True)]
    raw_median = per_round / statistics.median(raw_times)
    backend_median = per_round / statistics.median(backend_times)
    print(f"jobs per side: {n} in {args.rounds} alternating rounds of {per_round}")
    print(f"raw sbatch: {raw_rate:6.1f} jobs/s (median round {raw_median:.1f}/s)")
    print(f"backend:    {backend_rate:6.1f} jobs/s (median round {backend_median:.1f}/s)")
    ratio = backend_rate / raw_rate
    print(f"backend/raw: {ratio:.2f} overall, median {statistics.median(ratios):.2f}")
    print(f"remote calls per backend submit: {submit_calls / n:.2f}")

    # Active jobs: held, so all stay pending while the sync runs.
    sbatch = "sbatch --parsable --hold --output=/dev/null --wrap=true"
    ids = run(f"for i in $(seq {args.active}); do {sbatch}; done", timeout_s=600).stdout.split()
    assert len(ids) == args.active, len(ids)
    gone = [str(int(ids[-1]) + 100000 + k) for k in range(10)]
    for label, polled in (("active", ids), ("active + 10 long finished", ids + gone)):
        calls = backend.connection.calls
        start = time.perf_counter()
        statuses = backend.poll(polled)
        elapsed = time.perf_counter() - start
        states = sorted({s.state for s in statuses.values()})
        print(
            f"sync of {len(ids)} {label}: {backend.connection.calls - calls} remote call(s),"
            f" {elapsed * 1000:.0f} ms, states {states}"
        )
    run("scancel -u $(id -un)")
    backend.connection.close()


if __name__ == "__main__":
    main()
