"""The submit form and pasted YAML <-> the API's spec and its errors (pure, no browser)."""

from __future__ import annotations

import shlex
import subprocess
from typing import Any

import pytest
from django.http import QueryDict
from hypothesis import given, settings
from hypothesis import strategies as st

from frontend.forms import (
    NON_FIELD,
    duration_text,
    flatten_errors,
    form_changes,
    form_errors,
    form_to_spec,
    form_values,
    parse_env,
    spec_to_form,
    yaml_listing,
)


def form(**values: str) -> dict[str, str]:
    return {"kind": "training", "name": "n", "command": "echo hi", "nodes": "1", **values}


def spec_of(drop: tuple[str, ...] = (), **values: Any) -> dict[str, Any]:
    base = {"kind": "training", "name": "n", "command": "echo hi", "nodes": "1", **values}
    return {k: v for k, v in base.items() if k not in drop}


@pytest.mark.parametrize(
    ("posted", "expected"),
    [
        (form(), spec_of()),
        (form(image="  ", time_limit=""), spec_of()),
        (form(mig_profile="1g.10gb", gpus_per_node="2"), spec_of(gpus_per_node="2")),
        (
            form(kind="agent", mig_profile="1g.10gb", gpus_per_node="2", gpu_model="X"),
            spec_of(("nodes",), kind="agent", mig_profile="1g.10gb"),
        ),
        (
            form(kind="agent", gpus_per_node="2"),
            spec_of(("nodes",), kind="agent", gpus_per_node="2"),
        ),
        (
            form(retries_max="0", checkpoint_dir="/ck"),
            spec_of(retries={"max": "0"}, checkpoint={"dir": "/ck"}),
        ),
        (form(checkpoint_interval="5m"), spec_of(checkpoint={"dir": "", "interval": "5m"})),
        (form(command="  set -e\r\n  make  \r\n"), spec_of(command="  set -e\n  make  ")),
        (form(array=" 0-15%4 "), spec_of(array="0-15%4")),
    ],
    ids=[
        "plain",
        "blanks-left-out",
        "training-ignores-mig",
        "agent-mig-drops-whole-gpu-inputs",
        "agent-whole-gpus",
        "retries-and-checkpoint",
        "interval-without-dir",
        "script-kept-as-typed",
        "array",
    ],
)
def test_the_form_becomes_the_spec_the_api_takes(posted: dict[str, str], expected: Any) -> None:
    parsed = form_to_spec(posted)
    assert (parsed.data, parsed.errors) == (expected, {})


@pytest.mark.parametrize(
    ("text", "env", "errors"),
    [
        ("A=1\n\n# note\nB = x=y ", {"A": "1", "B ": " x=y "}, []),
        (
            "A=1\nnoequals\n=v",
            {"A": "1"},
            ["line 2: expected NAME=value", "line 3: expected NAME=value"],
        ),
        ("", {}, []),
    ],
)
def test_environment_lines_are_name_equals_value(
    text: str, env: dict[str, str], errors: list[str]
) -> None:
    parsed_env, parsed_errors = parse_env(text)
    # Names are stripped; values are kept as typed (the API judges them).
    assert parsed_env == {k.strip(): v for k, v in env.items()}
    assert parsed_errors == errors


def test_the_ticked_email_boxes_become_notify_and_none_ticked_leaves_it_out() -> None:
    posted = QueryDict(mutable=True)
    posted.update(form())
    assert "notify" not in form_to_spec(posted).data
    posted.setlist("notify", ["start", "fail"])  # one name, a value per ticked box

    assert form_to_spec(posted).data["notify"] == ["start", "fail"]
    # A refused form shows them ticked again, from the same text a copy is kept in.
    assert form_values(posted)["notify"] == "start, fail"
    assert form_to_spec(form_values(posted)).data["notify"] == ["start", "fail"]


def test_a_bad_environment_line_is_an_error_on_the_env_field() -> None:
    assert form_to_spec(form(env="OK=1\nbroken")).errors == {"env": ["line 2: expected NAME=value"]}


def test_api_errors_are_flattened_to_dotted_paths() -> None:
    detail = {
        "command": ["must not be empty"],
        "env": {"GPUQ_X": "is set by gpuq"},
        "retries": {"max": ["A valid integer is required."]},
        "non_field_errors": ["bad"],
    }
    assert flatten_errors(detail) == {
        "command": ["must not be empty"],
        "env.GPUQ_X": ["is set by gpuq"],
        "retries.max": ["A valid integer is required."],
        NON_FIELD: ["bad"],
    }


def test_api_errors_land_on_the_form_input_they_are_about() -> None:
    detail = {
        "env": {"GPUQ_X": "is set by gpuq"},
        "retries": {"max": ["too big"]},
        "checkpoint": ["the checkpoint interval is longer than the time limit"],
        "nodes": ["agent jobs run on one node"],
        "retries_on": ["unknown"],
        "notify": ["your account has no email address to write to"],
    }
    assert form_errors(detail) == {
        "env": ["GPUQ_X: is set by gpuq"],
        "retries_max": ["too big"],
        "checkpoint_interval": ["the checkpoint interval is longer than the time limit"],
        "nodes": ["agent jobs run on one node"],
        NON_FIELD: ["retries_on: unknown"],
        "notify": ["your account has no email address to write to"],  # at its boxes
    }


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, ""),
        (0, ""),
        (45, "45s"),
        (5400, "90m"),
        (7200, "2h"),
        (172800, "2d"),
        (3601, "3601s"),
    ],
)
def test_durations_are_shown_in_their_shortest_exact_form(seconds: Any, text: str) -> None:
    assert duration_text(seconds) == text


def test_a_stored_spec_fills_the_form_for_a_copy() -> None:
    stored = {
        "name": "run", "kind": "training", "image": None, "command": ["python", "t.py"],
        "env": {"A": "1", "B": "x y"}, "nodes": 2, "gpus_per_node": 4, "gpu_model": "H100",
        "mig_profile": None, "cpus_per_gpu": 8, "memory": 65536, "time_limit": 21600,
        "priority": "low", "retries": {"max": 2, "on": ["preemption"]},
        "checkpoint": {"dir": "/ck", "interval": 1800}, "nccl_debug": False, "team": "vision",
        "after": ["6f1c0bd4-0d64-4c38-9f5a-4f0f3a4a0b11", "0c1e0d9b-1c4e-4a55-8f1e-3b7a7f6c1d22"],
        "hold": True, "array": "7", "notify": ["start", "end", "requeue"],
    }  # fmt: skip
    values = spec_to_form(stored)
    assert values == {
        "kind": "training", "name": "run", "image": "", "command": "python t.py", "nodes": "2",
        "gpus_per_node": "4", "gpu_model": "H100", "mig_profile": "", "cpus_per_gpu": "8",
        "memory": "65536M", "time_limit": "6h", "priority": "low", "team": "vision",
        "cluster": "", "retries_max": "2", "checkpoint_dir": "/ck", "checkpoint_interval": "30m",
        "env": "A=1\nB=x y",
        "after": "6f1c0bd4-0d64-4c38-9f5a-4f0f3a4a0b11, 0c1e0d9b-1c4e-4a55-8f1e-3b7a7f6c1d22",
        "hold": "on", "array": "7", "notify": "start, end, requeue",
    }  # fmt: skip
    assert form_to_spec(values).data["env"] == {"A": "1", "B": "x y"}
    assert form_to_spec(values).data["after"] == stored["after"]
    assert form_to_spec(values).data["hold"] is True
    assert form_to_spec(values).data["array"] == "7"  # a task's copy: that one task again
    assert "hold" not in form_to_spec({**values, "hold": ""}).data
    assert form_to_spec(values).data["notify"] == stored["notify"]
    assert "notify" not in form_to_spec({**values, "notify": ""}).data
    assert spec_to_form({"command": "true"})["notify"] == ""  # none asked for: none ticked


# A job as copy_data gives it: its stored spec, with its team.
STORED = {
    "name": "run", "kind": "training", "image": None, "command": ["python", "t.py"],
    "env": {}, "nodes": 1, "gpus_per_node": 1, "gpu_model": None, "mig_profile": None,
    "cpus_per_gpu": None, "memory": None, "time_limit": 86400, "priority": "normal",
    "checkpoint": None, "nccl_debug": False,
    "retries": {"max": 3, "on": ["node_failure", "preemption"]}, "team": "vision",
}  # fmt: skip
# What the form's pickers offer now.
OFFERED = {
    "team": ["vision", "language"], "gpu_model": ["SIM-A100"], "mig_profile": ["1g.10gb"],
    "priority": ["high", "normal", "low"], "cluster": ["local"],
}  # fmt: skip
MIG = {"kind": "agent", "gpus_per_node": 0, "mig_profile": "1g.10gb"}
COPIES = {
    "the defaults": ({}, []),
    "all the form's inputs": (
        {
            "command": "set -e\nmake",
            "env": {"A": "1", "B": "x y "},
            "nodes": 2,
            "gpus_per_node": 4,
            "gpu_model": "SIM-A100",
            "cpus_per_gpu": 8,
            "memory": 65536,
            "time_limit": 5400,
            "priority": "low",
            "retries": {"max": 0, "on": ["node_failure", "preemption"]},
            "checkpoint": {"dir": "/ck", "interval": 1800},
            "cluster": "local",
            "hold": True,
            "after": ["6f1c0bd4-0d64-4c38-9f5a-4f0f3a4a0b11"],
            "array": "7",
            "notify": ["start", "end"],
        },
        [],
    ),
    "a MIG slice": (MIG, []),
    "nccl_debug": ({"gpus_per_node": 2, "nccl_debug": True}, ["nccl_debug"]),
    "retries on preemption only": ({"retries": {"max": 1, "on": ["preemption"]}}, ["retries.on"]),
    "an env value over two lines": ({"env": {"K": "v", "OPTS": "--a\nB=c"}}, ["env.OPTS"]),
    "an env value with a carriage return": ({"env": {"OPTS": "a\rb"}}, ["env.OPTS"]),
    "a script with CRLF line ends": ({"command": "set -e\r\nmake"}, ["command"]),
    "a MIG job's gpu model": ({**MIG, "gpu_model": "A100-SXM4-80GB"}, ["gpu_model"]),
    "a gpu model no node has now": ({"gpu_model": "H100"}, ["gpu_model: H100 is not offered now"]),
    "a MIG slice no up node has now": (
        {**MIG, "mig_profile": "2g.20gb"},
        ["mig_profile: 2g.20gb is not offered now"],
    ),
    "a disabled pinned cluster": ({"cluster": "old"}, ["cluster: old is not offered now"]),
    "a priority class since removed": (
        {"priority": "urgent"},
        ["priority: urgent is not offered now"],
    ),
    "another team": ({"team": "audio"}, ["team: audio is not offered now"]),
}


@pytest.mark.parametrize(("changed", "expected"), COPIES.values(), ids=COPIES.keys())
def test_the_form_holds_a_copy_exactly_or_names_what_it_would_change(
    db: Any, changed: dict[str, Any], expected: list[str]
) -> None:
    # A list command becomes one shell line that runs the same argv (below): not a change.
    assert form_changes({**STORED, **changed}, OFFERED) == expected


HOSTILE = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=40,
) | st.sampled_from(
    ["'", '"', "$(id)", "`id`", "a\nb", "; rm -rf /", "#SBATCH --x", "é✓", "-n", ""]
)


@settings(max_examples=60, deadline=None)
@given(args=st.lists(HOSTILE, min_size=1, max_size=5))
def test_a_copied_argv_command_runs_as_the_same_argv_through_the_shell(args: list[str]) -> None:
    """A list command becomes the form's one shell line; /bin/sh must see the same argv."""
    line = spec_to_form({"command": ["printf", "%s\\0", *args]})["command"]
    out = subprocess.run(["/bin/sh", "-c", line], capture_output=True, check=True).stdout
    assert out.decode("utf-8", "surrogateescape").split("\0")[:-1] == args
    assert shlex.split(line)[2:] == args


def test_yaml_errors_are_attached_to_the_line_of_their_field() -> None:
    text = "name: x\ncommand: echo\nretries:\n  max: many\n"
    listing, loose = yaml_listing(
        text,
        {"retries": {"max": ["A valid integer is required."]}, "gpu_model": ["bad"]},
        {"name": 1, "command": 2, "retries": 3},
        None,
    )
    assert [(line.number, line.errors) for line in listing] == [
        (1, ()),
        (2, ()),
        (3, ("retries.max: A valid integer is required.",)),
        (4, ()),
    ]
    assert loose == ["gpu_model: bad"]


def test_a_yaml_syntax_error_outside_the_text_is_listed_apart() -> None:
    listing, loose = yaml_listing("a: b", None, {}, (9, "line 9: oops"))
    assert [line.errors for line in listing] == [()]
    assert loose == ["line 9: oops"]


@pytest.mark.parametrize(
    ("length", "shown"),
    [(200, "whole"), (201, "cut"), (1_000_000, "cut")],
    ids=["at-the-width", "one-past", "a-megabyte"],
)
def test_a_long_line_is_listed_cut_to_200_characters_keeping_its_number_and_errors(
    length: int, shown: str
) -> None:
    long = ("command: echo " + "é" * length)[:length]
    text = f"name: x\n{long}\nnodes: many\n"
    listing, loose = yaml_listing(
        text,
        {"command": ["too long"], "nodes": ["A valid integer is required."]},
        {"name": 1, "command": 2, "nodes": 3},
        None,
    )
    assert [(line.number, line.text, line.errors) for line in listing] == [
        (1, "name: x", ()),
        (2, long if shown == "whole" else long[:200] + "…", ("command: too long",)),
        (3, "nodes: many", ("nodes: A valid integer is required.",)),
    ]
    assert loose == []
