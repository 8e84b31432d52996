"""The simulator against ../shared/specs/simulation.md, statement by statement: metric
definitions computed by hand on tiny files, exit-2 messages that name the line of the bad
value, and what counts as a preemption."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.simulate import POLICIES as POLICY_FLAGS
from scheduler.types import PriorityClass
from scheduler.workload import parse_cluster

REPO = Path(__file__).resolve().parents[2]
A100 = "A100-SXM4-80GB"
GRACE = POLICY_FLAGS["gpuq"].preemption_grace_s  # 30 s as reviewed


def cli(tmp_path: Path, cluster: str | bytes, jobs: str | bytes, *policies: str):
    """Write the two inputs, run `python -m scheduler simulate` with every output, and
    return (process, {policy: report}, {policy: jobs_out rows}, {policy: runs rows})."""
    for name, text in (("cluster.json", cluster), ("jobs.csv", jobs)):
        path = tmp_path / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
    args = [
        sys.executable, "-m", "scheduler", "simulate",
        "--cluster", str(tmp_path / "cluster.json"),
        "--workload", str(tmp_path / "jobs.csv"),
        "--out", str(tmp_path / "r.json"),
        "--jobs-out", str(tmp_path / "jobs_out.csv"),
        "--runs-out", str(tmp_path / "runs.csv"),
    ]  # fmt: skip
    for p in policies:
        args += ["--policy", p]
    out = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        return out, {}, {}, {}
    reports = json.loads((tmp_path / "r.json").read_text())["policies"]
    names = list(reports)
    several = len(names) > 1

    def rows(stem: str, p: str) -> list[dict[str, str]]:
        f = tmp_path / (f"{stem}.{p}.csv" if several else f"{stem}.csv")
        return list(csv.DictReader(io.StringIO(f.read_text())))

    return (
        out,
        reports,
        {p: {r["job_id"]: r for r in rows("jobs_out", p)} for p in names},
        {p: rows("runs", p) for p in names},
    )


def cluster_json(nodes: list[dict], teams: list[dict]) -> str:
    return json.dumps({"nodes": nodes, "teams": teams})


def node(name: str, gpus: int, model: str = A100, **extra: object) -> dict:
    return {"name": name, "gpu_model": model, "gpus": gpus, **extra}


def team(name: str, nominal: float, borrowing: float = 0, weight: float = 1.0) -> dict:
    return {
        "name": name,
        "weight": weight,
        "quota": {"*": {"nominal": nominal, "borrowing_limit": borrowing}},
    }


# ------------------------------------------------------------------------------------------
# Exit-2 messages and what counts as a preemption
# ------------------------------------------------------------------------------------------

LINE_CASES = [
    pytest.param(
        "jobs.csv",
        b"job_id,team,submit_s,duration_s\nj1,a,0,10\nj2,\xff\xfe,0,10\n",
        "jobs.csv: line 3",
        id="non-utf8-byte-on-line-3-of-jobs",
    ),
    pytest.param(
        "cluster.json",
        # the node's pool is named like the team; the bad weight is on line 5
        '{"nodes": [\n'
        ' {"name": "n1", "gpu_model": "A100-SXM4-80GB", "gpus": 8, "pool": "vision"}],\n'
        ' "teams": [\n'
        '  {"name": "a", "quota": {"*": {"nominal": 1}}},\n'
        '  {"name": "vision", "weight": -1}]}\n',
        "cluster.json: line 5, field teams[1].weight",
        id="team-error-reported-at-a-pool-of-the-same-name",
    ),
    pytest.param(
        "cluster.json",
        '{"nodes": [],\n'
        ' "priority_classes": [\n'
        '  {"name": "high", "value": 1000},\n'
        '  {"name": "low", "value": "x"}]}\n',
        "cluster.json: line 4, field priority_classes[1]",
        id="bad-priority-class-on-line-4",
    ),
    pytest.param(
        "cluster.json",
        '{"nodes": [\n'
        ' {"name": "n1", "gpu_model": "A100", "gpus": 8},\n'
        ' {"gpu_model": "A100", "gpus": 8}]}\n',
        "cluster.json: line 3, field nodes[1].name",
        id="node-without-name-on-line-3",
    ),
    pytest.param(
        "cluster.json",
        '{"nodes": [\n'
        ' {"name": "n1", "gpu_model": "A100", "gpus": 8}],\n'
        ' "teams": [\n'
        '  {"name": "a"},\n'
        '  {"weight": 1}]}\n',
        "cluster.json: line 5, field teams[1].name",
        id="team-without-name-on-line-5",
    ),
    pytest.param(
        "cluster.json",
        '{"nodes": [\n'
        ' {"name": "n1", "gpu_model": "A100", "gpus": 8}],\n'
        ' "teams": [{"name": "a",\n'
        '   "quota": {"*": {"nominal": 4},\n'
        '             "A100": {"nominal": 2, "borrowing_limit": -1}}}]}\n',
        "cluster.json: line 5, field teams[0].quota.A100.borrowing_limit",
        id="quota-error-on-the-quota-line-not-the-team-line",
    ),
    pytest.param(
        "cluster.json",
        '{"nodes": [\n {"name": "n1", "gpu_model": "A100", "gpus": 8},\n 7]}\n',
        "cluster.json: line 3, field nodes[1].name",
        id="a-node-that-is-not-an-object-on-line-3",
    ),
    pytest.param(
        "cluster.json",
        '{"nodes": [\n'
        ' {"name": "n1", "gpu_model": "A100", "gpus": 8},\n'
        ' {"name": "n2", "gpu_model": "A100", "gpus": 8},\n'
        ' {"name": "n1", "gpu_model": "A100", "gpus": 8}]}\n',
        "cluster.json: line 4, field nodes[2].name: duplicate node 'n1'",
        id="the-second-of-two-nodes-named-alike",
    ),
]


@pytest.mark.parametrize(("bad", "text", "expected"), LINE_CASES)
def test_exit_2_message_names_the_line_of_the_bad_input(
    tmp_path: Path, bad: str, text: str | bytes, expected: str
) -> None:
    """Spec, Command: "exit 2 with a one-line message naming the file, line and field on
    bad input": the line where the bad value is, not line 1 (an undecodable byte), the
    line of its section's key ("nodes", "teams", "priority_classes") or the first place
    its team's name appears anywhere in the file (here a node's pool)."""
    files = {
        "cluster.json": cluster_json([node("n1", 8)], [team("a", 8)]),
        "jobs.csv": "job_id,team,submit_s,duration_s\nj1,a,0,10\n",
    }
    files[bad] = text  # type: ignore[assignment]
    out, *_ = cli(tmp_path, files["cluster.json"], files["jobs.csv"])
    assert out.returncode == 2, out.stderr
    line = out.stderr.strip()
    assert "\n" not in line
    assert expected in line, line


def test_a_job_counted_as_preempted_has_a_preempted_run(tmp_path: Path) -> None:
    """Spec, Command: "`--runs-out` writes one row per run of a job (a preempted job has
    several)"; RUNS.csv: "`ended_by` is `completed` or `preempted`".

    b borrows a's idle nominal (b: nominal 0, borrowing 8). b1: 8 GPUs, 0..1010 s.
    a1 (8 GPUs) arrives at 1000 and reclaims: b1 is told to leave at 1000 + 30 s grace,
    but it completes at 1010, inside the grace, in its single run (ended_by completed).
    So it was not preempted: JOBS_OUT and the report's `preemptions` agree with RUNS.csv."""
    cluster = cluster_json([node("n1", 8)], [team("a", 8), team("b", 0, 8)])
    jobs = "job_id,team,submit_s,duration_s,gpus_per_node\nb1,b,0,1010,8\na1,a,1000,100,8\n"
    out, reports, jobs_out, runs = cli(tmp_path, cluster, jobs, "gpuq")
    assert out.returncode == 0, out.stderr
    preempted_runs = {}
    for r in runs["gpuq"]:
        preempted_runs[r["job_id"]] = preempted_runs.get(r["job_id"], 0) + (
            r["ended_by"] == "preempted"
        )
    runs_of_b1 = [r for r in runs["gpuq"] if r["job_id"] == "b1"]
    reported = int(jobs_out["gpuq"]["b1"]["preemptions"])
    assert reported == preempted_runs["b1"], (
        f"JOBS_OUT says b1 was preempted {reported} time(s); RUNS.csv: {runs_of_b1}"
    )
    assert reports["gpuq"]["preemptions"] == sum(preempted_runs.values())


# ------------------------------------------------------------------------------------------
# Statements pinned by value
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["fifo", "backfill"])
def test_wait_jct_slowdown_makespan_utilization_by_hand(tmp_path: Path, policy: str) -> None:
    """pins spec §REPORT.json: "`makespan_s` runs from the first submit to the last
    completion"; "`wait_s` is start - submit of the first start; `jct_s` is completion -
    submit; `bounded_slowdown` is max(1, jct / max(duration, 10 s))"; utilization =
    useful GPU-seconds / (total GPUs x makespan)."""
    # One GPU. j1 (20 s) and j2 (4 s) both submitted at 10: j1 runs 10..30, j2 30..34.
    # makespan = 34 - 10 = 24 (from the first submit, not from 0)
    # wait: j1 0, j2 20 -> mean 10, max 20;  jct: 20, 24 -> mean 22
    # slowdown: j1 max(1, 20/max(20,10)) = 1; j2 max(1, 24/max(4,10)) = 2.4 -> mean 1.7
    # utilization = (20 + 4) GPU-s / (1 GPU x 24 s) = 1.0
    cluster = cluster_json([node("n1", 1)], [team("a", 1)])
    jobs = "job_id,team,submit_s,duration_s\nj1,a,10,20\nj2,a,10,4\n"
    out, reports, jobs_out, _ = cli(tmp_path, cluster, jobs, policy)
    assert out.returncode == 0, out.stderr
    rep = reports[policy]
    assert rep["makespan_s"] == pytest.approx(24.0)
    assert rep["wait_s"]["mean"] == pytest.approx(10.0)
    assert rep["wait_s"]["max"] == pytest.approx(20.0)
    assert rep["jct_s"]["mean"] == pytest.approx(22.0)
    assert rep["bounded_slowdown"]["mean"] == pytest.approx(1.7)
    assert rep["gpu_utilization"] == pytest.approx(1.0)
    assert (jobs_out[policy]["j2"]["start_s"], jobs_out[policy]["j2"]["end_s"]) == ("30", "34")


@pytest.mark.parametrize("policy", ["gpuq", "fifo", "backfill"])
def test_mig_slices_count_by_their_gpu_fraction_in_utilization(tmp_path: Path, policy: str) -> None:
    """pins spec §REPORT.json "`gpu_utilization` = GPU-seconds of useful work (MIG slices
    counted by their GPU fraction) / (total GPUs x makespan)" and §CLUSTER.json
    "compute_slices / 7 ... (compute_slices / 4 on A30)"."""
    # s1: 3g.40gb on an A100 = 3/7 GPU for 700 s = 300 GPU-s
    # s2: 2g.12gb on an A30  = 2/4 GPU for 700 s = 350 GPU-s (gpus_per_node ignored)
    # utilization = 650 / (2 GPUs x 700 s) = 0.4643
    cluster = cluster_json(
        [node("m1", 1, A100, mig=True), node("m2", 1, "A30-24GB", mig=True)], [team("a", 2)]
    )
    jobs = (
        "job_id,team,submit_s,duration_s,mig_profile,gpu_model,gpus_per_node\n"
        "s1,a,0,700,3g.40gb,A100-SXM4-80GB,5\ns2,a,0,700,2g.12gb,A30-24GB,\n"
    )
    out, reports, jobs_out, _ = cli(tmp_path, cluster, jobs, policy)
    assert out.returncode == 0, out.stderr
    rep = reports[policy]
    assert rep["makespan_s"] == pytest.approx(700.0)
    assert rep["gpu_utilization"] == pytest.approx(650 / 1400, abs=1e-4)
    assert rep["teams"]["a"]["gpu_seconds"] == pytest.approx(650.0)
    # placement for MIG: node:gpu:profile@start
    assert jobs_out[policy]["s1"]["placement"].startswith("m1:0:3g.40gb@")


@pytest.mark.parametrize(
    ("checkpoint", "b1_end", "lost"),
    [
        # b1 preempted at 2500, leaves after the grace at 2500+G = 2530 having run 2530 s.
        # with checkpoints every 1000 s it keeps 2000 s: lost = (2530-2000) x 8 = 4240;
        # it resumes after a1 (2530..2630) with 8000 s left: ends 10630.
        ("1000", 2630 + 8000, (2500 + GRACE - 2000) * 8),
        # without checkpoints everything is lost: 2530 x 8 = 20240; ends 2630 + 10000.
        ("", 2630 + 10000, (2500 + GRACE) * 8),
    ],
    ids=["checkpoint-1000", "no-checkpoint"],
)
def test_preemption_lost_work_first_start_wait_and_last_start(
    tmp_path: Path, checkpoint: str, b1_end: float, lost: float
) -> None:
    """pins spec §REPORT.json "`lost_gpu_seconds`: work thrown away by preemption (since
    the last checkpoint)", "`wait_s` is start - submit of the first start", utilization
    counts only useful work; §JOBS_OUT "`start_s` is the last start"; §RUNS one row per
    run, `run` counts from 1."""
    assert GRACE == 30.0  # the arithmetic below uses the reviewed default
    cluster = cluster_json([node("n1", 8)], [team("a", 8), team("b", 0, 8)])
    jobs = (
        "job_id,team,submit_s,duration_s,gpus_per_node,checkpoint_s\n"
        f"b1,b,0,10000,8,{checkpoint}\na1,a,2500,100,8,\n"
    )
    out, reports, jobs_out, runs = cli(tmp_path, cluster, jobs, "gpuq")
    assert out.returncode == 0, out.stderr
    rep = reports["gpuq"]
    assert rep["preemptions"] == 1
    assert rep["lost_gpu_seconds"] == pytest.approx(lost)
    # useful = all run GPU-seconds - lost = 8*2530 + 8*100 + 8*(b1_end-2630) - lost
    useful = 8 * 2530 + 8 * 100 + 8 * (b1_end - 2630) - lost
    assert rep["makespan_s"] == pytest.approx(b1_end)
    assert rep["gpu_utilization"] == pytest.approx(useful / (8 * b1_end), abs=1e-4)
    # waits of the first start: b1 0, a1 30 (2530 - 2500)
    assert rep["teams"]["b"]["mean_wait_s"] == 0.0
    assert rep["teams"]["a"]["mean_wait_s"] == pytest.approx(GRACE)
    assert rep["wait_s"]["max"] == pytest.approx(GRACE)
    b1 = jobs_out["gpuq"]["b1"]
    assert (b1["start_s"], float(b1["end_s"]), b1["preemptions"]) == ("2630", b1_end, "1")
    b1_runs = [(r["run"], r["ended_by"]) for r in runs["gpuq"] if r["job_id"] == "b1"]
    assert b1_runs == [("1", "preempted"), ("2", "completed")]


@pytest.mark.parametrize(("weight_a", "expected"), [(2.0, 1.0), (1.0, 0.9)])
def test_jain_fairness_divides_by_weight_over_intervals_where_every_team_waits(
    tmp_path: Path, weight_a: float, expected: float
) -> None:
    """pins spec §REPORT.json "`jain_fairness` is Jain's index over teams of (GPU-seconds
    received / team weight), computed over the intervals in which every counted team had
    pending work"."""
    # 3 GPUs, fifo. At 0: a1, a2, b1 start (nothing pending: interval not counted).
    # At 1: a3 and b2 arrive and wait until 100: both teams pending over [1, 100).
    # received: a 2 GPUs x 99 s = 198, b 1 x 99 = 99. At 100 nothing is pending any more.
    # weights a=2, b=1: (99, 99) -> 1.0;  a=1, b=1: (198, 99) -> 297^2/(2*(198^2+99^2)) = 0.9
    cluster = cluster_json(
        [node("n1", 3)], [team("a", 3, weight=weight_a), team("b", 3, weight=1.0)]
    )
    jobs = (
        "job_id,team,submit_s,duration_s\n"
        "a1,a,0,100\na2,a,0,100\nb1,b,0,100\na3,a,1,100\nb2,b,1,100\n"
    )
    out, reports, _, _ = cli(tmp_path, cluster, jobs, "fifo")
    assert out.returncode == 0, out.stderr
    assert reports["fifo"]["jain_fairness"] == pytest.approx(expected, abs=1e-4)


def test_a_team_absent_from_teams_never_starts_under_gpuq_but_baselines_ignore_quotas(
    tmp_path: Path,
) -> None:
    """pins spec §CLUSTER.json "A team absent from `teams` has no quota and its jobs never
    start under `gpuq` (and are reported as such)" and §Command "Baselines ignore
    quotas"."""
    cluster = cluster_json([node("n1", 3)], [team("a", 3)])
    jobs = "job_id,team,submit_s,duration_s\nz1,zed,0,100\na1,a,5,100\n"
    out, reports, jobs_out, _ = cli(tmp_path, cluster, jobs, "gpuq", "fifo", "backfill")
    assert out.returncode == 0, out.stderr
    assert jobs_out["gpuq"]["z1"]["state"] == "never_started"
    assert reports["gpuq"]["never_started"] == 1 and reports["gpuq"]["completed"] == 1
    for p in ("fifo", "backfill"):
        assert jobs_out[p]["z1"]["state"] == "completed"
        assert reports[p]["never_started"] == 0


def test_a_job_larger_than_the_cluster_never_starts_and_the_run_ends(tmp_path: Path) -> None:
    """pins spec §JOBS_OUT "`state`: `completed` or `never_started`" and §Command "Exit 0
    on success" for a job no node can ever hold (16 GPUs on one 8-GPU node, and a gang of
    2 nodes on a 1-node cluster); the simulation terminates and the rest still runs."""
    cluster = cluster_json([node("n1", 8)], [team("a", 8)])
    jobs = (
        "job_id,team,submit_s,duration_s,nodes,gpus_per_node\n"
        "big,a,0,100,1,16\nsmall,a,1,50,1,1\ngang,a,2,50,2,4\n"
    )
    out, reports, jobs_out, runs = cli(tmp_path, cluster, jobs, "gpuq", "fifo", "backfill")
    assert out.returncode == 0, out.stderr
    for p, rep in reports.items():
        assert (rep["completed"], rep["never_started"]) == (1, 2), p
        assert jobs_out[p]["big"]["state"] == "never_started"
        assert jobs_out[p]["big"]["start_s"] == "" and jobs_out[p]["big"]["placement"] == ""
        assert [r["job_id"] for r in runs[p]] == ["small"]


@pytest.mark.parametrize("policy", ["gpuq", "fifo", "backfill"])
def test_a_cpu_only_job_runs_on_a_mig_node(tmp_path: Path, policy: str) -> None:
    """pins spec §JOBS.csv "`gpus_per_node` ... 0 allowed for CPU-only jobs" on a cluster
    whose only node is MIG-enabled (`mig` says how its GPUs are shared, nothing more): the
    job takes neither a GPU nor a slice, so a slice job runs beside it."""
    cluster = cluster_json([node("m1", 1, A100, mig=True)], [team("a", 1)])
    jobs = (
        "job_id,team,submit_s,duration_s,gpus_per_node,mig_profile\n"
        "cpu,a,0,100,0,\nslice,a,0,100,,7g.80gb\n"
    )
    out, reports, jobs_out, _ = cli(tmp_path, cluster, jobs, policy)
    assert out.returncode == 0, out.stderr
    assert jobs_out[policy]["cpu"]["state"] == "completed", jobs_out[policy]["cpu"]
    assert jobs_out[policy]["cpu"]["placement"] == "m1:", jobs_out[policy]["cpu"]
    assert jobs_out[policy]["slice"]["state"] == "completed", jobs_out[policy]["slice"]
    assert float(jobs_out[policy]["cpu"]["start_s"]) == 0.0
    assert float(jobs_out[policy]["slice"]["start_s"]) == 0.0
    assert reports[policy]["never_started"] == 0


def test_backfill_is_easy_judged_by_time_limits_and_fifo_is_strict(tmp_path: Path) -> None:
    """pins spec §Command: "`fifo` ... jobs start in submit order, and nothing passes a job
    that does not fit. `backfill` is FIFO plus EASY backfill (a later job may start only if
    it does not delay the reserved start of the first blocked job, judged by time
    limits)"."""
    # 8 GPUs. j1: 4 GPUs, runs 100 s but limit 1000 -> j2 (8 GPUs) is reserved at 1000.
    # j3: 4 GPUs, limit 500 -> ends by 502 < 1000: backfill starts it at 2, fifo does not.
    # j4: 4 GPUs, really 10 s but limit 2000 -> by its limit it would delay j2: waits.
    cluster = cluster_json([node("n1", 8)], [team("a", 8)])
    jobs = (
        "job_id,team,submit_s,duration_s,gpus_per_node,time_limit_s\n"
        "j1,a,0,100,4,1000\nj2,a,1,50,8,\nj3,a,2,30,4,500\nj4,a,3,10,4,2000\n"
    )
    out, _, jobs_out, _ = cli(tmp_path, cluster, jobs, "fifo", "backfill")
    assert out.returncode == 0, out.stderr
    start = {p: {j: float(r["start_s"]) for j, r in rows.items()} for p, rows in jobs_out.items()}
    assert start["backfill"]["j3"] == 2.0
    assert start["backfill"]["j4"] >= start["backfill"]["j2"] == 100.0
    # fifo: submit order, nothing passes j2
    assert start["fifo"]["j2"] == 100.0
    assert start["fifo"]["j2"] <= start["fifo"]["j3"] <= start["fifo"]["j4"]


def test_fifo_does_not_let_a_job_of_another_model_pass_a_blocked_job(tmp_path: Path) -> None:
    """pins spec §Command "`fifo` is the strict baseline: ... nothing passes a job that
    does not fit" even when the later job asks for an idle model; backfill may start it
    (it cannot delay the blocked A100 job)."""
    cluster = cluster_json([node("a1", 8, A100), node("h1", 8, "H100-80GB")], [team("a", 16)])
    jobs = (
        "job_id,team,submit_s,duration_s,gpus_per_node,gpu_model\n"
        f"j1,a,0,100,8,{A100}\nj2,a,1,100,4,{A100}\nj3,a,2,100,1,H100-80GB\n"
    )
    out, _, jobs_out, _ = cli(tmp_path, cluster, jobs, "fifo", "backfill")
    assert out.returncode == 0, out.stderr
    assert float(jobs_out["fifo"]["j3"]["start_s"]) == 100.0
    assert float(jobs_out["backfill"]["j3"]["start_s"]) == 2.0


def test_priority_classes_default_to_the_three_of_the_spec() -> None:
    """pins spec §CLUSTER.json "`priority_classes` is optional; the three above are the
    defaults" (high 1000 not preemptible, normal 100, low 10 preemptible)."""
    c = parse_cluster('{"nodes": []}', "c.json")
    assert c.priority_classes == (
        PriorityClass("high", 1000, False),
        PriorityClass("normal", 100, True),
        PriorityClass("low", 10, True),
    )


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_column(tmp_path: Path) -> None:
    """Spreadsheets save CSV with a BOM; the header's first column is still `job_id`."""
    out, _, jobs, _ = cli(
        tmp_path,
        cluster_json([node("n1", 8)], [team("a", 8)]).encode("utf-8-sig"),
        "job_id,team,submit_s,duration_s\nj1,a,0,10\n".encode("utf-8-sig"),
    )
    assert out.returncode == 0, out.stderr
    assert jobs["gpuq"]["j1"]["state"] == "completed"


@pytest.mark.parametrize("where", ["missing-dir/r.json", "."])
def test_an_output_that_cannot_be_written_exits_2_before_the_run(
    tmp_path: Path, where: str
) -> None:
    """Exit 2 with one line, and no other output written: the check comes before a run
    that may take minutes, not after it as a traceback."""
    (tmp_path / "cluster.json").write_text(cluster_json([node("n1", 8)], [team("a", 8)]))
    (tmp_path / "jobs.csv").write_text("job_id,team,submit_s,duration_s\nj1,a,0,10\n")
    args = [
        sys.executable, "-m", "scheduler", "simulate",
        "--cluster", str(tmp_path / "cluster.json"),
        "--workload", str(tmp_path / "jobs.csv"),
        "--jobs-out", str(tmp_path / "jobs_out.csv"),
        "--out", str(tmp_path / where),
    ]  # fmt: skip
    out = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "cannot write" in out.stderr, out.stderr
    assert out.stdout == "" and not (tmp_path / "jobs_out.csv").exists()
