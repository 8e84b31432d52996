"""`python -m scheduler simulate|generate`: the only module of the package that touches files.

Runs with plain python3 from the repository root, nothing installed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from . import generate
from .simulate import (
    JOBS_OUT_COLUMNS,
    POLICIES,
    RUNS_COLUMNS,
    jobs_rows,
    runs_rows,
    simulate,
    summary,
)
from .workload import InputError, csv_text, parse_cluster, parse_jobs


def _read(path: str) -> str:
    """The file's text; a UTF-8 byte order mark (as spreadsheets write) is not part of it."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"{path}: line 1, field -: cannot read ({e})") from e
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError(f"{path}: line {line}, field -: not UTF-8 ({e.reason})") from e


def _per_policy(path: str, policy: str, several: bool) -> Path:
    p = Path(path)
    return p.with_name(f"{p.stem}.{policy}{p.suffix}") if several else p


def cmd_simulate(args: argparse.Namespace) -> int:
    policies = list(dict.fromkeys(args.policy or ["gpuq"]))
    try:
        cluster = parse_cluster(_read(args.cluster), args.cluster)
        jobs = parse_jobs(_read(args.workload), args.workload, cluster.priority_classes)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    several = len(policies) > 1
    outputs = [args.out] if args.out else []
    for name in policies:
        outputs += [
            str(_per_policy(path, name, several)) for path in (args.jobs_out, args.runs_out) if path
        ]
    # Before a run of minutes, not after it: an output that cannot be a file.
    for out in outputs:
        problem = _unwritable(Path(out))
        if problem:
            print(f"error: {out}: cannot write ({problem})", file=sys.stderr)
            return 2
    report = {}
    try:
        for name in policies:
            result = simulate(cluster, jobs, name, timer=time.perf_counter)
            report[name] = result.report
            print(summary(result))
            if args.jobs_out:
                _write(
                    _per_policy(args.jobs_out, name, several),
                    csv_text(JOBS_OUT_COLUMNS, jobs_rows(result)),
                )
            if args.runs_out:
                _write(
                    _per_policy(args.runs_out, name, several),
                    csv_text(RUNS_COLUMNS, runs_rows(result)),
                )
        if args.out:
            # allow_nan=False: an inf or NaN would be written as Infinity/NaN, not JSON.
            _write(Path(args.out), json.dumps({"policies": report}, indent=2, allow_nan=False))
    except OSError as e:
        print(f"error: {e.filename}: cannot write ({e.strerror or e})", file=sys.stderr)
        return 2
    return 0


def _unwritable(path: Path) -> str:
    """Why `path` cannot be written as a file ("" when nothing is known against it)."""
    if path.is_dir():
        return "it is a directory"
    if not path.parent.is_dir():
        return f"no directory {str(path.parent)!r}"
    return ""


def _write(path: Path, text: str) -> None:
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


def cmd_generate(args: argparse.Namespace) -> int:
    try:
        spec = generate.Spec(
            args.jobs, args.seed, args.teams, args.nodes, args.gpus_per_node, args.load
        )
        rows = generate.jobs(spec)  # before writing: a load too low for the jobs is refused
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        _write(Path(args.cluster_out), json.dumps(generate.cluster(spec), indent=2))
        _write(
            Path(args.workload_out),
            csv_text(generate.COLUMNS, [[r[c] for c in generate.COLUMNS] for r in rows]),
        )
    except OSError as e:
        print(f"error: {e.filename}: cannot write ({e.strerror or e})", file=sys.stderr)
        return 2
    print(
        f"wrote {len(rows)} jobs for {spec.teams} teams on {spec.nodes} x {spec.gpus_per_node} GPUs"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler")
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser(
        "simulate", help="replay a workload on a cluster under one or more policies"
    )
    sim.add_argument("--cluster", required=True)
    sim.add_argument("--workload", required=True)
    sim.add_argument("--policy", action="append", choices=sorted(POLICIES))
    sim.add_argument("--out")
    sim.add_argument("--jobs-out")
    sim.add_argument("--runs-out")
    sim.set_defaults(func=cmd_simulate)
    gen = sub.add_parser("generate", help="write a seeded synthetic CLUSTER.json and JOBS.csv")
    gen.add_argument("--jobs", type=int, default=20000)
    gen.add_argument("--seed", type=int, default=1)
    gen.add_argument("--teams", type=int, default=4)
    gen.add_argument("--nodes", type=int, default=32)
    gen.add_argument("--gpus-per-node", type=int, default=8)
    gen.add_argument(
        "--load", type=float, default=1.3, help="offered load / capacity (above 1: saturated)"
    )
    gen.add_argument("--cluster-out", required=True)
    gen.add_argument("--workload-out", required=True)
    gen.set_defaults(func=cmd_generate)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
