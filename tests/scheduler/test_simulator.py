"""The simulator: runs consistent with the cluster at every instant, the report and file
formats of ../shared/specs/simulation.md, exit-2 errors, and the generator."""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import subprocess
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest

from scheduler import mig
from scheduler.simulate import (
    JOBS_OUT_COLUMNS,
    RUNS_COLUMNS,
    JobOutcome,
    Result,
    jobs_rows,
    runs_rows,
    simulate,
)
from scheduler.simulate import POLICIES as POLICIES_BY_NAME
from scheduler.workload import Cluster, InputError, SimJob, parse_cluster, parse_jobs

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
POLICIES = ("gpuq", "fifo", "backfill")
REPORT_KEYS = {
    "jobs",
    "completed",
    "never_started",
    "makespan_s",
    "gpu_utilization",
    "wait_s",
    "jct_s",
    "bounded_slowdown",
    "jain_fairness",
    "preemptions",
    "lost_gpu_seconds",
    "teams",
    "decide_ms",
}


@functools.cache
def workload() -> tuple[Cluster, list[SimJob]]:
    cluster = parse_cluster((DATA / "cluster.json").read_text(), "cluster.json")
    return cluster, parse_jobs(
        (DATA / "jobs.csv").read_text(), "jobs.csv", cluster.priority_classes
    )


@functools.cache
def run(policy: str) -> Result:
    cluster, jobs = workload()
    return simulate(cluster, jobs, policy)


def runs_table(policy: str) -> list[dict[str, str]]:
    return [dict(zip(RUNS_COLUMNS, row, strict=True)) for row in runs_rows(run(policy))]


def holdings(placement: str) -> list[tuple[str, int, tuple[int, ...] | tuple[str, int]]]:
    """(node, gpu, memory slices or whole GPU) per allocation of a placement string."""
    out = []
    for part in placement.split(";"):
        fields = part.split(":")
        if len(fields) == 3:
            profile, start = fields[2].split("@")
            out.append((fields[0], int(fields[1]), (profile, int(start))))
        else:
            out.extend((fields[0], int(g), ()) for g in fields[1].split(",") if g)
    return out


@pytest.mark.parametrize("policy", POLICIES)
def test_runs_never_share_a_gpu_or_a_mig_memory_slice(policy: str) -> None:
    cluster, _ = workload()
    models = {n.name: n.gpu_model for n in cluster.nodes}
    events = []
    for r in runs_table(policy):
        events.append((float(r["start_s"]), 1, r))
        events.append((float(r["end_s"]), 0, r))
    events.sort(key=lambda e: (e[0], e[1]))  # ends before starts at one instant
    whole: dict[tuple[str, int], str] = {}
    slices: dict[tuple[str, int, int], str] = {}
    for _, is_start, r in events:
        for node, gpu, mig_slot in holdings(r["placement"]):
            if mig_slot:
                profile, start = mig_slot
                table = mig.geometry(models[node])
                spec = table.profile(profile) if table else None
                assert spec is not None and start in spec.starts, (
                    f"{profile}@{start} invalid on {models[node]}"
                )
                keys = [(node, gpu, m) for m in range(start, start + spec.memory_slices)]
                for k in keys:
                    if is_start:
                        assert k not in slices, (
                            f"memory slice {k} used by {slices.get(k)} and {r['job_id']}"
                        )
                        slices[k] = r["job_id"]
                    else:
                        del slices[k]
            elif is_start:
                assert (node, gpu) not in whole, f"GPU {node}:{gpu} used twice"
                whole[(node, gpu)] = r["job_id"]
            else:
                del whole[(node, gpu)]


@pytest.mark.parametrize("policy", POLICIES)
def test_every_run_holds_its_job_shape_and_gangs_start_and_end_together(policy: str) -> None:
    _, jobs = workload()
    shape = {j.request.id: j.request for j in jobs}
    for r in runs_table(policy):
        req = shape[r["job_id"]]
        nodes = {node for node, _, _ in holdings(r["placement"])}
        assert len(nodes) == req.nodes  # one run row = all nodes start and end together
        assert float(r["end_s"]) >= float(r["start_s"])


def test_under_gpuq_no_team_holds_more_than_nominal_plus_borrowing() -> None:
    cluster, _ = workload()
    limit = {
        t.name: t.quotas[0].nominal
        + (math.inf if t.quotas[0].borrowing_limit is None else t.quotas[0].borrowing_limit)
        for t in cluster.teams
    }
    model = {n.name: n.gpu_model for n in cluster.nodes}
    events = []
    for r in runs_table("gpuq"):
        held = 0.0
        for node, _, mig_slot in holdings(r["placement"]):
            held += mig.gpu_fraction(model[node], mig_slot[0]) if mig_slot else 1.0
        events.append((float(r["start_s"]), 1, r["team"], held))
        events.append((float(r["end_s"]), 0, r["team"], -held))
    events.sort(key=lambda e: (e[0], e[1]))
    usage: dict[str, float] = defaultdict(float)
    for _, _, team, delta in events:
        usage[team] += delta
        assert usage[team] <= limit[team] + 1e-9


def test_a_policy_given_by_value_runs_under_its_own_flags() -> None:
    # bench/sim_ablation.py: the production policy with one part turned off.
    cluster, jobs = workload()
    without = simulate(
        cluster, jobs, "gpuq", policy=replace(POLICIES_BY_NAME["gpuq"], preemption=False)
    )
    assert run("gpuq").report["preemptions"] > 0
    assert without.report["preemptions"] == 0 and without.policy == "gpuq"
    assert without.report["completed"] == run("gpuq").report["completed"]


@pytest.mark.parametrize("policy", POLICIES)
def test_report_has_the_spec_keys_and_counts_every_job(policy: str) -> None:
    rep = run(policy).report
    assert set(rep) == REPORT_KEYS
    assert rep["completed"] + rep["never_started"] == rep["jobs"] == 300
    assert set(rep["wait_s"]) == {"mean", "p50", "p95", "p99", "max"}
    assert set(rep["bounded_slowdown"]) == {"mean", "p95"} and set(rep["jct_s"]) == {
        "mean",
        "p50",
        "p95",
    }
    assert 0 < rep["gpu_utilization"] <= 1
    assert sum(t["jobs"] for t in rep["teams"].values()) == 300


def test_jobs_out_rows_follow_the_spec() -> None:
    rows = jobs_rows(run("gpuq"))
    assert len(rows) == 300 and all(len(r) == len(JOBS_OUT_COLUMNS) for r in rows)
    states = {r[5] for r in rows}
    assert states <= {"completed", "never_started"}


def test_fifo_starts_jobs_in_submit_order() -> None:
    _, jobs = workload()
    submit = {j.request.id: j.request.submit_time for j in jobs}
    first_starts = sorted(
        (o.first_start, submit[o.job.request.id])
        for o in run("fifo").jobs
        if o.first_start is not None
    )
    submits_in_start_order = [s for _, s in first_starts]
    assert submits_in_start_order == sorted(submits_in_start_order)


def test_preempted_runs_resume_and_are_counted() -> None:
    result = run("gpuq")
    preempted = [r for r in result.runs if r.ended_by == "preempted"]
    # A preemption is a run ended by it: one that completes within its grace is none.
    assert result.report["preemptions"] == len(preempted) > 0
    by_job = defaultdict(list)
    for r in result.runs:
        by_job[r.job_id].append(r.run)
    assert all(sorted(v) == list(range(1, len(v) + 1)) for v in by_job.values())


def test_observe_sees_every_schedule_call_and_the_starts_it_decides() -> None:
    # bench/sim_idle.py reads idle GPUs and reasons through this hook.
    cluster, jobs = workload()
    seen: list[tuple[float, tuple[str, ...]]] = []
    ticks = iter(range(10**9))
    result = simulate(
        cluster,
        jobs,
        "gpuq",
        timer=lambda: float(next(ticks)),
        observe=lambda snap, d, now: seen.append((now, tuple(s.job_id for s in d.starts))),
    )
    assert len(seen) == result.report["decide_ms"]["calls"] > 0
    assert [now for now, _ in seen] == sorted(now for now, _ in seen)
    decided = sorted((now, job_id) for now, ids in seen for job_id in ids)
    assert decided == sorted((r.start_s, r.job_id) for r in result.runs)
    assert result.report == run("gpuq").report | {"decide_ms": result.report["decide_ms"]}


def python3(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    # Plain python3 with no site-packages: the simulator needs nothing installed.
    return subprocess.run(
        ["python3", "-S", "-m", "scheduler", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_runs_several_policies_and_writes_one_file_per_policy(tmp_path: Path) -> None:
    out = python3(
        "simulate",
        "--cluster",
        str(DATA / "cluster.json"),
        "--workload",
        str(DATA / "jobs.csv"),
        "--policy",
        "gpuq",
        "--policy",
        "fifo",
        "--out",
        str(tmp_path / "r.json"),
        "--jobs-out",
        str(tmp_path / "jobs.csv"),
        "--runs-out",
        str(tmp_path / "runs.csv"),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("gpuq: ") and "\nfifo: " in out.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert set(report["policies"]) == {"gpuq", "fifo"}
    for policy in ("gpuq", "fifo"):
        header = (tmp_path / f"jobs.{policy}.csv").read_text().splitlines()[0]
        assert header == ",".join(JOBS_OUT_COLUMNS)
        runs = list(csv.DictReader(io.StringIO((tmp_path / f"runs.{policy}.csv").read_text())))
        assert list(runs[0]) == list(RUNS_COLUMNS)


BAD_INPUTS = [
    ("jobs.csv", "job_id,team,submit_s\nj1,a,0\n", "jobs.csv: line 1, field duration_s"),
    (
        "jobs.csv",
        "job_id,team,submit_s,duration_s\nj1,a,0,10\nj2,a,x,10\n",
        "jobs.csv: line 3, field submit_s",
    ),
    (
        "jobs.csv",
        "job_id,team,submit_s,duration_s,priority\nj1,a,0,10,urgent\n",
        "jobs.csv: line 2, field priority",
    ),
    (
        "jobs.csv",
        "job_id,team,submit_s,duration_s\nj1,a,0,10\nj1,a,0,10\n",
        "jobs.csv: line 3, field job_id",
    ),
    (
        "jobs.csv",
        "job_id,team,submit_s,duration_s,gpus_per_node\nj1,a,0,10,-1\n",
        "jobs.csv: line 2, field gpus_per_node",
    ),
    (
        "jobs.csv",
        "job_id,team,submit_s,duration_s,mig_profile\nj1,a,0,10,9z.1tb\n",
        "jobs.csv: line 2, field mig_profile",
    ),
    (
        "cluster.json",
        '{"nodes": [\n{"name": "n1", "gpu_model": "A100", "gpus": "eight"}]}',
        "cluster.json: line 2, field nodes[0].gpus",
    ),
    ("cluster.json", '{"nodes": [}', "cluster.json: line 1, field -"),
]


@pytest.mark.parametrize(("bad", "text", "message"), BAD_INPUTS)
def test_bad_input_exits_2_naming_file_line_and_field(
    tmp_path: Path, bad: str, text: str, message: str
) -> None:
    (tmp_path / "cluster.json").write_text(
        '{"nodes": [{"name": "n1", "gpu_model": "A100", "gpus": 8}]}'
    )
    (tmp_path / "jobs.csv").write_text("job_id,team,submit_s,duration_s\nj1,a,0,10\n")
    (tmp_path / bad).write_text(text)
    out = python3(
        "simulate",
        "--cluster",
        str(tmp_path / "cluster.json"),
        "--workload",
        str(tmp_path / "jobs.csv"),
    )
    assert out.returncode == 2
    line = out.stderr.strip()
    assert "\n" not in line and message in line


def test_parse_errors_are_input_errors() -> None:
    with pytest.raises(
        InputError, match=r"line 1, field nodes\[0\]\.mig: T4 has no MIG profile table"
    ):
        parse_cluster(
            '{"nodes": [{"name": "n", "gpu_model": "T4", "gpus": 1, "mig": true}]}', "c.json"
        )


def test_default_time_limit_is_the_duration_rounded_up_to_a_minute() -> None:
    (job,) = parse_jobs(
        "job_id,team,submit_s,duration_s\nj,a,0,61\n", "j.csv", workload()[0].priority_classes
    )
    assert job.request.time_limit_s == 120


def test_generate_is_deterministic_per_seed(tmp_path: Path) -> None:
    outs = []
    for run_no in range(2):
        d = tmp_path / str(run_no)
        d.mkdir()
        res = python3(
            "generate",
            "--jobs",
            "300",
            "--seed",
            "5",
            "--cluster-out",
            str(d / "c.json"),
            "--workload-out",
            str(d / "j.csv"),
        )
        assert res.returncode == 0, res.stderr
        outs.append(((d / "c.json").read_text(), (d / "j.csv").read_text()))
    assert outs[0] == outs[1]
    rows = list(csv.DictReader(io.StringIO(outs[0][1])))
    assert len(rows) == 300
    one_gpu = sum(1 for r in rows if r["nodes"] == "1" and r["gpus_per_node"] == "1")
    assert one_gpu > len(rows) / 2  # mostly 1-GPU jobs
    assert any(int(r["nodes"]) > 1 for r in rows)  # some gangs
    assert len({r["team"] for r in rows}) == 4


# -- the files it writes, and the report they agree with ------------------------------------

ONE_NODE = (
    '{"nodes": [{"name": "n1", "gpu_model": "A100-SXM4-80GB", "gpus": 8}],\n'
    ' "teams": [{"name": "a", "quota": {"*": {"nominal": 8}}}]}\n'
)
ONE_JOB = "job_id,team,submit_s,duration_s\nj1,a,0,10\n"


def simulate_files(
    tmp_path: Path, cluster: str, jobs: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    """`simulate` on cluster.json and jobs.csv written with these texts in tmp_path."""
    (tmp_path / "cluster.json").write_text(cluster)
    (tmp_path / "jobs.csv").write_text(jobs)
    return python3(
        "simulate",
        "--cluster",
        str(tmp_path / "cluster.json"),
        "--workload",
        str(tmp_path / "jobs.csv"),
        *extra,
    )


def test_jobs_out_and_runs_times_are_exact_decimals(tmp_path: Path) -> None:
    # A 100,000-job workload runs for weeks of simulated time: seconds above 1e6 must not
    # be rounded to 6 significant digits ("1.23457e+06"), or runs on one GPU seem to overlap.
    out = simulate_files(
        tmp_path,
        ONE_NODE,
        "job_id,team,submit_s,duration_s\nj1,a,1234567.5,10\nj2,a,0.1,20000000.25\n",
        "--jobs-out",
        str(tmp_path / "out.csv"),
        "--runs-out",
        str(tmp_path / "runs.csv"),
    )
    assert out.returncode == 0, out.stderr
    rows = {r["job_id"]: r for r in csv.DictReader(io.StringIO((tmp_path / "out.csv").read_text()))}
    times = ("submit_s", "start_s", "end_s")
    assert [rows["j1"][k] for k in times] == ["1234567.5", "1234567.5", "1234577.5"]
    assert [rows["j2"][k] for k in times] == ["0.1", "0.1", "20000000.35"]
    runs = list(csv.DictReader(io.StringIO((tmp_path / "runs.csv").read_text())))
    assert [(r["job_id"], r["start_s"], r["end_s"]) for r in runs] == [
        ("j2", "0.1", "20000000.35"),
        ("j1", "1234567.5", "1234577.5"),
    ]


def test_jobs_out_states_agree_with_the_report_and_add_up_to_the_jobs(tmp_path: Path) -> None:
    # b1 borrows a's idle quota and is reclaimed by a1; it never runs again while a's
    # unsatisfiable 3-node job keeps a's nominal from being lent. Whatever the scheduler then
    # does, JOBS_OUT uses the spec's two states, agrees with the report's counts, and a row
    # that says never_started has no start.
    cluster = (
        '{"nodes": [{"name": "n1", "gpu_model": "A100-SXM4-80GB", "gpus": 8}],\n'
        ' "teams": [{"name": "a", "quota": {"*": {"nominal": 6}}},\n'
        ' {"name": "b", "quota": {"*": {"nominal": 2, "borrowing_limit": null}}}]}\n'
    )
    jobs = (
        "job_id,team,submit_s,duration_s,nodes,gpus_per_node\n"
        "b1,b,0,1000,1,8\na1,a,100,500,1,1\nag,a,100,500,3,2\n"
    )
    out = simulate_files(
        tmp_path,
        cluster,
        jobs,
        "--out",
        str(tmp_path / "r.json"),
        "--jobs-out",
        str(tmp_path / "out.csv"),
    )
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "r.json").read_text())["policies"]["gpuq"]
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out.csv").read_text())))
    assert {row["state"] for row in rows} <= {"completed", "never_started"}
    for row in rows:
        assert not (row["state"] == "never_started" and row["start_s"]), row
    never = sum(1 for row in rows if row["state"] == "never_started")
    done = sum(1 for row in rows if row["state"] == "completed")
    assert (done, never) == (report["completed"], report["never_started"])
    assert report["completed"] + report["never_started"] == report["jobs"]


def test_a_job_preempted_and_never_restarted_is_written_never_started_without_a_start() -> None:
    # The spec's states are completed and never_started, and the report's counts add up to
    # the jobs: a job that ran but did not complete is not completed. Its runs (RUNS.csv)
    # and its preemptions still tell that it ran.
    (sim,) = parse_jobs(
        "job_id,team,submit_s,duration_s\nj1,a,12.5,10\n", "j.csv", workload()[0].priority_classes
    )
    ran = JobOutcome(sim, first_start=20.0, last_start=20.0, end=None, preemptions=1)
    (row,) = jobs_rows(Result("gpuq", {}, [ran], []))
    assert dict(zip(JOBS_OUT_COLUMNS, row, strict=True)) == {
        "job_id": "j1",
        "team": "a",
        "submit_s": "12.5",
        "start_s": "",
        "end_s": "",
        "state": "never_started",
        "preemptions": "1",
        "nodes_used": "",
        "placement": "",
    }


# -- bad input exits 2 with one line naming the file, line and field ------------------------


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        ('{"nodes": [], "teams": null}', "cluster.json: line 1, field teams"),
        ('{"nodes": [], "teams": 3}', "cluster.json: line 1, field teams"),
        (
            '{"nodes": [],\n "priority_classes": null}',
            "cluster.json: line 2, field priority_classes",
        ),
        ('{"nodes": [], "priority_classes": 3}', "cluster.json: line 1, field priority_classes"),
        (
            '{"nodes": [],\n "teams": [{"name": "a", "quota": {"*": {"nominal": 1}}},\n'
            ' {"name": "a", "quota": {"*": {"nominal": 8}}}]}',
            "cluster.json: line 3, field teams[1].name",
        ),
        (
            '{"nodes": [{"name": "n1", "gpu_model": "A100", "gpus": 8},\n'
            '{"name": "n1", "gpu_model": "A100", "gpus": 8}]}',
            "cluster.json: line 2, field nodes[1].name",
        ),
        (
            '{"nodes": [], "priority_classes": [{"name": "normal", "value": 1},\n'
            ' {"name": "normal", "value": 2}]}',
            "cluster.json: line 2, field priority_classes[1].name",
        ),
        (
            '{"nodes": [], "priority_classes": [{"name": "normal", "value": true}]}',
            "cluster.json: line 1, field priority_classes[0]",
        ),
        ('{"nodes": [{"gpus": 1' + "0" * 5000 + "}]}", "cluster.json: line 1, field -"),
        ("[" * 100_000 + "]" * 100_000, "cluster.json: line 1, field -"),
    ],
    ids=[
        "teams-null",
        "teams-number",
        "classes-null",
        "classes-number",
        "duplicate-team",
        "duplicate-node",
        "duplicate-class",
        "class-value-bool",
        "integer-too-long",
        "nested-too-deep",
    ],
)
def test_malformed_cluster_exits_2_naming_the_field(
    tmp_path: Path, cluster: str, message: str
) -> None:
    out = simulate_files(tmp_path, cluster, ONE_JOB)
    assert out.returncode == 2, out.stderr[-300:]
    line = out.stderr.strip()
    assert "\n" not in line and message in line


@pytest.mark.parametrize(
    "digit", ["\u00b2", "\u0661", "\uff11"], ids=["superscript", "arabic", "fullwidth"]
)
def test_a_non_ascii_digit_in_an_integer_column_exits_2(tmp_path: Path, digit: str) -> None:
    # "\u00b2".isdigit() is True and int() of it raises; int("\u0661") is 1. The spec's
    # integers are ASCII digits.
    out = simulate_files(
        tmp_path, ONE_NODE, f"job_id,team,submit_s,duration_s,nodes\nj1,a,0,10,{digit}\n"
    )
    assert out.returncode == 2, out.stderr[-300:]
    line = out.stderr.strip()
    assert "\n" not in line and "jobs.csv: line 2, field nodes" in line


@pytest.mark.parametrize("value", ["\u0661\u0662", "1_000", "0x10", "nan"])
def test_a_number_column_takes_ascii_decimal_notation_only(tmp_path: Path, value: str) -> None:
    # float() takes "\u0661\u0662" and "1_000"; neither is a number of the file format.
    out = simulate_files(tmp_path, ONE_NODE, f"job_id,team,submit_s,duration_s\nj1,a,{value},10\n")
    assert out.returncode == 2, out.stderr[-300:]
    line = out.stderr.strip()
    assert "\n" not in line and "jobs.csv: line 2, field submit_s" in line


def test_numbers_in_decimal_and_exponent_notation_are_read(tmp_path: Path) -> None:
    out = simulate_files(
        tmp_path,
        ONE_NODE,
        "job_id,team,submit_s,duration_s,nodes,gpus_per_node\n"
        "j1,a,1e3,+10.,1,0008\nj2,a,.5,2.5E1,01,1\n",
        "--jobs-out",
        str(tmp_path / "out.csv"),
    )
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out.csv").read_text())))
    assert [(r["job_id"], r["submit_s"], r["end_s"]) for r in rows] == [
        ("j1", "1000", "1010"),
        ("j2", "0.5", "25.5"),
    ]


def test_a_csv_field_over_the_csv_modules_limit_exits_2(tmp_path: Path) -> None:
    out = simulate_files(
        tmp_path, ONE_NODE, f"job_id,team,submit_s,duration_s\nj1,a,0,10\nj2,a,0,{'1' * 200_000}\n"
    )
    assert out.returncode == 2, out.stderr[-300:]
    line = out.stderr.strip()
    assert "\n" not in line and "jobs.csv: line 3, field -" in line
