"""JOBS.csv as spreadsheets and pandas save it (../shared/specs/simulation.md, §JOBS.csv):
any line end Python's csv module knows, unknown columns ignored however they are named, and
a count written as a whole float.

- Line ends: CRLF, LF and a bare CR ("CSV (Macintosh)") are all ends of a row.
- "Unknown columns are ignored": a column the simulator reads may appear once (which value
  would the job take?), but two unknown columns of one name, or the empty-named columns a
  spreadsheet writes for cells once used right of the data, hold nothing it reads.
- Header names are read as the values are, with the spaces around them stripped: a space
  after a comma, as CSV is typed by hand, does not make `gpus_per_node` an unknown column
  (which would be ignored: the job would run on the default GPU), and a name given twice
  once padded is a column named twice.
- `nodes` and `gpus_per_node` are counts: pandas writes an integer column with empty cells
  as floats (`2.0`), which is the count 2; `2.5` is no count and exits 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_simulator_spec import cli, cluster_json, node, team

ONE_NODE = cluster_json([node("n1", 8)], [team("a", 8)])
TWO_NODES = cluster_json([node("n1", 8), node("n2", 8)], [team("a", 16)])


@pytest.mark.parametrize(
    "jobs",
    [
        pytest.param("job_id,team,submit_s,duration_s\nj1,a,0,10\nj2,a,1,10\n", id="LF"),
        pytest.param("job_id,team,submit_s,duration_s\r\nj1,a,0,10\r\nj2,a,1,10\r\n", id="CRLF"),
        pytest.param("job_id,team,submit_s,duration_s\rj1,a,0,10\rj2,a,1,10\r", id="bare-CR"),
        pytest.param("job_id,team,submit_s,duration_s\rj1,a,0,10\rj2,a,1,10", id="no-last-end"),
    ],
)
def test_every_line_end_the_csv_module_knows_ends_a_row(tmp_path: Path, jobs: str) -> None:
    out, reports, jobs_out, _ = cli(tmp_path, ONE_NODE, jobs, "fifo")
    assert out.returncode == 0, out.stderr
    assert reports["fifo"]["completed"] == 2 and set(jobs_out["fifo"]) == {"j1", "j2"}


def test_an_error_in_a_file_with_bare_cr_line_ends_names_its_line(tmp_path: Path) -> None:
    jobs = "job_id,team,submit_s,duration_s\rj1,a,0,10\rj2,a,x,10\r"
    out, *_ = cli(tmp_path, ONE_NODE, jobs, "fifo")
    assert out.returncode == 2
    assert "jobs.csv: line 3, field submit_s" in out.stderr, out.stderr


@pytest.mark.parametrize(
    "jobs",
    [
        pytest.param(
            "job_id,team,submit_s,duration_s,note,note\nj1,a,0,10,x,y\n",
            id="an-unknown-column-named-twice",
        ),
        pytest.param(
            "job_id,team,submit_s,duration_s,,\nj1,a,0,10,,\n",
            id="trailing-unnamed-columns",
        ),
    ],
)
def test_unknown_columns_are_ignored_even_when_two_share_a_name(tmp_path: Path, jobs: str) -> None:
    out, reports, _, _ = cli(tmp_path, ONE_NODE, jobs, "fifo")
    assert out.returncode == 0, out.stderr
    assert reports["fifo"]["completed"] == 1


@pytest.mark.parametrize("column", ["nodes", "gpus_per_node", "priority", "checkpoint_s"])
def test_a_column_the_simulator_reads_named_twice_exits_2(tmp_path: Path, column: str) -> None:
    jobs = f"job_id,team,submit_s,duration_s,{column},{column}\nj1,a,0,10,,\n"
    out, *_ = cli(tmp_path, ONE_NODE, jobs, "fifo")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1, out.stderr
    assert f"jobs.csv: line 1, field {column}: column named twice" in out.stderr, out.stderr


def test_a_header_name_padded_with_spaces_names_its_column(tmp_path: Path) -> None:
    jobs = "job_id,team,submit_s,duration_s, gpus_per_node\nj1, a, 0, 10, 2\n"
    out, _, jobs_out, _ = cli(tmp_path, ONE_NODE, jobs, "fifo")
    assert out.returncode == 0, out.stderr
    assert jobs_out["fifo"]["j1"]["placement"] == "n1:0,1", jobs_out["fifo"]["j1"]


def test_a_column_named_twice_once_padded_with_spaces_exits_2(tmp_path: Path) -> None:
    jobs = "job_id,team,submit_s,duration_s,gpus_per_node, gpus_per_node \nj1,a,0,10,1,2\n"
    out, *_ = cli(tmp_path, ONE_NODE, jobs, "fifo")
    assert out.returncode == 2, out.stdout
    assert out.stderr.count("\n") == 1, out.stderr
    assert "jobs.csv: line 1, field gpus_per_node: column named twice" in out.stderr


@pytest.mark.parametrize(
    ("nodes", "gpus", "nodes_used"),
    [
        pytest.param("2.0", "8.0", 2, id="pandas-floats"),
        pytest.param("2", "8", 2, id="integers"),
        pytest.param("2e0", "8.", 2, id="exponent-and-bare-point"),
        pytest.param("", "", 1, id="empty-takes-the-defaults"),
        pytest.param("1.0", "0.0", 1, id="cpu-only-as-float"),
    ],
)
def test_a_count_written_as_a_whole_number_in_any_notation_is_read(
    tmp_path: Path, nodes: str, gpus: str, nodes_used: int
) -> None:
    jobs = f"job_id,team,submit_s,duration_s,nodes,gpus_per_node\nj1,a,0,10,{nodes},{gpus}\n"
    out, reports, jobs_out, _ = cli(tmp_path, TWO_NODES, jobs, "fifo")
    assert out.returncode == 0, out.stderr
    assert reports["fifo"]["completed"] == 1
    assert len(jobs_out["fifo"]["j1"]["nodes_used"].split(";")) == nodes_used


@pytest.mark.parametrize(
    ("column", "value", "minimum"),
    [
        pytest.param("nodes", "2.5", 1, id="fractional-nodes"),
        pytest.param("gpus_per_node", "0.5", 0, id="fractional-gpus"),
        pytest.param("nodes", "0.0", 1, id="zero-nodes-as-float"),
        pytest.param("gpus_per_node", "1e400", 0, id="beyond-a-float"),
        pytest.param("nodes", "two", 1, id="a-word"),
    ],
)
def test_a_count_that_is_not_a_whole_number_exits_2(
    tmp_path: Path, column: str, value: str, minimum: int
) -> None:
    jobs = f"job_id,team,submit_s,duration_s,{column}\nj1,a,0,10,{value}\n"
    out, *_ = cli(tmp_path, TWO_NODES, jobs, "fifo")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1, out.stderr
    expected = f"jobs.csv: line 2, field {column}: expected an integer >= {minimum}, got {value!r}"
    assert expected in out.stderr, out.stderr
