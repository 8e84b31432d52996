"""The batch script builder: what sbatch reads from it, and that user text stays literal.

Hostile text is checked the strongest way available offline: the rendered script is run by
the real bash (its #SBATCH lines are comments to bash) and must print the text unchanged."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queue_service.backends.base import AllocatedNode, BackendError
from queue_service.backends.slurm import commands, script
from queue_service.backends.slurm.backend import SlurmSettings
from queue_service.backends.slurm.script import ScriptOptions

from .conftest import request

WORKDIR = "/home/slurmuser/.gpuq/jobs"
JOB_ID = "0b7c6f0e-2f7e-4d8e-9a51-5b1f3f4f2a10"
OPTS = ScriptOptions(
    partition="gpu",
    account="lab",
    gres_map={"A100-SXM4-80GB": "a100", "1g.10gb": "mig-1g.10gb"},
)

# Text a shell would love to interpret, and text sbatch would love to read as a directive.
HOSTILE = [
    "it's",
    'say "hi"',
    "$(touch /tmp/gpuq-pwned)",
    "`touch /tmp/gpuq-pwned`",
    "a; touch /tmp/gpuq-pwned",
    "line one\n#SBATCH --partition=evil\nline three",
    "#SBATCH --account=evil",
    "tab\there\r\x1b[31m",
    "ünïcödé ✓ 日本",
    "back\\slash $HOME ${PATH} !!",
    "",
]
hostile_text = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(st.characters(exclude_characters="\x00", codec="utf-8"), max_size=40),
)


def sbatch_directives(text: str) -> list[str]:
    """What sbatch reads: #SBATCH lines up to the first line that is a command."""
    found = []
    for line in text.split("\n")[1:]:
        if line.startswith("#SBATCH"):
            found.append(line.removeprefix("#SBATCH").strip())
        elif line.strip() and not line.startswith("#"):
            break
    return found


def render(**overrides: Any) -> str:
    return script.render(request(job_id=JOB_ID, **overrides), OPTS, WORKDIR)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, {"--nodes=1", "--ntasks-per-node=1", "--no-requeue"}),
        (
            {"gpus_per_node": 4, "gpu_model": "A100-SXM4-80GB", "nodes": 2},
            {"--gres=gpu:a100:4", "--nodes=2"},
        ),
        ({"gpus_per_node": 2}, {"--gres=gpu:2"}),
        ({"gpus_per_node": 1, "gpu_model": "H100-SXM5-80GB"}, {"--gres=gpu:H100-SXM5-80GB:1"}),
        ({"mig_profile": "1g.10gb"}, {"--gres=gpu:mig-1g.10gb:1"}),
        ({"gpus_per_node": 2, "cpus_per_gpu": 6}, {"--cpus-per-task=12"}),
        ({"memory_mb": 32000}, {"--mem=32000M"}),
        ({"time_limit_s": 90061}, {"--time=1-01:01:01"}),
        ({"time_limit_s": 5}, {"--time=0-00:00:05"}),
        (
            {"placement": (AllocatedNode("gpu2"), AllocatedNode("gpu3"))},
            {"--nodelist=gpu2,gpu3"},
        ),
        ({"checkpoint_dir": "/ckpt", "checkpoint_interval_s": 600}, {"--signal=B:USR1@120"}),
        ({"attempt": 3}, {f"--comment=gpuq:{JOB_ID}:3", f"--chdir={WORKDIR}/{JOB_ID}.3"}),
    ],
)
def test_directives_carry_the_job_shape(overrides: dict[str, Any], expected: set[str]) -> None:
    directives = sbatch_directives(render(**overrides))
    assert expected <= set(directives)
    attempt = overrides.get("attempt", 1)
    assert {
        f"--job-name=gpuq-{JOB_ID}",
        f"--output={WORKDIR}/logs/{JOB_ID}.{attempt}.out",
        f"--error={WORKDIR}/logs/{JOB_ID}.{attempt}.err",
        "--partition=gpu",
        "--account=lab",
    } <= set(directives)


def test_no_gres_and_no_signal_unless_asked() -> None:
    directives = " ".join(sbatch_directives(render()))
    assert "--gres" not in directives
    assert "--signal" not in directives
    assert "--nodelist" not in directives


def test_requeue_setting_switches_the_flag() -> None:
    opts = ScriptOptions(requeue=True)
    directives = sbatch_directives(script.render(request(), opts, WORKDIR))
    assert "--requeue" in directives
    assert "--no-requeue" not in directives


@pytest.mark.parametrize(
    ("overrides", "launch"),
    [
        ({"command": ("python", "serve.py", "--port", "80")}, "exec python serve.py --port 80"),
        ({"command": "echo $HOSTNAME | tee out"}, "exec bash -c 'echo $HOSTNAME | tee out'"),
        (
            {"image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ("nvidia-smi",)},
            "exec srun '--container-image=nvcr.io#nvidia/pytorch:24.01-py3' --nodes=1"
            " --ntasks=1 nvidia-smi",
        ),
        (
            {"image": "ubuntu:22.04", "command": ("true",)},
            "exec srun --container-image=ubuntu:22.04 --nodes=1 --ntasks=1 true",
        ),
    ],
)
def test_launch_line_execs_the_command(overrides: dict[str, Any], launch: str) -> None:
    assert render(**overrides).rstrip("\n").split("\n")[-1] == launch


def test_container_mounts_go_on_srun() -> None:
    opts = ScriptOptions(container_mounts=("/data:/data", "/scratch:/scratch:ro"))
    job = request(image="nvcr.io#nvidia/pytorch:24.01-py3", command=("python", "t.py"))
    assert script.render(job, opts, WORKDIR).rstrip("\n").split("\n")[-1] == (
        "exec srun '--container-image=nvcr.io#nvidia/pytorch:24.01-py3'"
        " --container-mounts=/data:/data,/scratch:/scratch:ro --nodes=1 --ntasks=1 python t.py"
    )


@pytest.mark.parametrize(
    ("command", "torchrun_args"),
    [
        (("train.py", "--epochs", "3"), "train.py --epochs 3"),
        (("python", "-m", "trainer"), "--no-python python -m trainer"),
        # A program named with a leading dash is no option of torchrun's (its `--` ends them).
        (("-x", "--epochs", "3"), "--no-python -- -x --epochs 3"),
        (("-train.py", "--", "a"), "-- -train.py -- a"),
    ],
)
def test_multi_node_training_launches_torchrun_per_node(
    command: tuple[str, ...], torchrun_args: str
) -> None:
    text = render(kind="training", nodes=2, gpus_per_node=4, command=command)
    assert text.rstrip("\n").split("\n")[-1] == (
        'exec srun bash -c \'exec torchrun --nnodes="$1" --nproc_per_node="$2"'
        ' --node_rank="$SLURM_NODEID" --master_addr="$MASTER_ADDR"'
        ' --master_port="$MASTER_PORT" "${@:3}"\''
        f" gpuq-torchrun 2 4 {torchrun_args}"
    )
    assert 'export MASTER_ADDR="${MASTER_ADDR:-$(scontrol show hostnames' in text
    assert "export NNODES=2" in text


def test_single_node_training_runs_the_command_as_given() -> None:
    assert render(kind="training", gpus_per_node=4, command=("python", "t.py")).endswith(
        "\nexec python t.py\n"
    )


def run_script(text: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        ["bash", "-s"],
        input=text.encode(),
        capture_output=True,
        env=env or {"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.decode()


def test_an_array_task_sees_its_index_and_the_arrays_size() -> None:
    from queue_service.backends.base import ArrayTask

    show = ("bash", "-c", 'echo "$GPUQ_ARRAY_ID $GPUQ_ARRAY_TASK_ID/$GPUQ_ARRAY_TASK_COUNT"')
    task = render(gpus_per_node=1, command=show, array=ArrayTask("a1", 3, 10))
    assert run_script(task) == "a1 3/10\n"
    assert run_script(render(gpus_per_node=1, command=show)) == " /\n"


def test_nccl_defaults_yield_to_the_site_and_to_the_user() -> None:
    show = ("bash", "-c", 'echo "$NCCL_DEBUG $TORCH_NCCL_ASYNC_ERROR_HANDLING"')
    base = {"PATH": "/usr/bin:/bin"}
    assert run_script(render(gpus_per_node=1, command=show)) == "WARN 1\n"
    assert run_script(render(gpus_per_node=1, command=show), base | {"NCCL_DEBUG": "TRACE"}) == (
        "TRACE 1\n"
    )
    assert run_script(render(gpus_per_node=1, nccl_debug=True, command=show)) == "INFO 1\n"
    user = render(gpus_per_node=1, nccl_debug=True, env={"NCCL_DEBUG": "VERSION"}, command=show)
    assert run_script(user) == "VERSION 1\n"


PRINT_ALL = 'printf "%s\\0" "$GPUQ_JOB_NAME" "$HOSTILE" "$GPUQ_CHECKPOINT_DIR" "$@"'


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=hostile_text,
    value=hostile_text,
    path=hostile_text,
    args=st.lists(hostile_text, max_size=3),
)
def test_hostile_text_is_carried_literally(
    name: str, value: str, path: str, args: list[str]
) -> None:
    text = render(
        name=name,
        env={"HOSTILE": value},
        checkpoint_dir=path or "/ckpt",
        command=("bash", "-c", PRINT_ALL, "gpuq", *args),
    )
    assert sbatch_directives(text) == sbatch_directives(
        render(checkpoint_dir="/ckpt", command=("true",))
    )
    assert run_script(text).split("\0")[:-1] == [name, value, path or "/ckpt", *args]


@settings(max_examples=200, deadline=None)
@given(hostile_text)
def test_a_shell_command_string_reaches_bash_c_unchanged(text: str) -> None:
    command = text if text.strip() else "true"
    launch = render(command=command).rstrip("\n").split("\n")[-1]
    assert launch == "exec bash -c " + script.sh_quote(command)
    echoed = subprocess.run(
        ["bash", "-c", "printf %s " + script.sh_quote(command)], capture_output=True, check=True
    ).stdout.decode()
    assert echoed == command


@given(hostile_text)
def test_no_user_text_starts_a_line(text: str) -> None:
    rendered = render(name=text, env={"X": text}, command=("echo", text))
    lines = rendered.split("\n")
    assert len(lines) == len(render(name="x", env={"X": "x"}, command=("echo", "x")).split("\n"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"env": {"BAD-NAME": "x"}}, "environment variable name"),
        ({"env": {"X": "nul\x00byte"}}, "NUL"),
        ({"command": ()}, "empty"),
        ({"command": "   "}, "empty"),
        ({"job_id": "../../etc"}, "not a gpuq id"),
        ({"placement": (AllocatedNode("gpu1 --uid=0"),)}, "node name"),
        ({"gpus_per_node": 1, "gpu_model": "A100 80GB"}, "GPU model"),
    ],
)
def test_unusable_specs_are_permanent_errors(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(BackendError, match=message) as raised:
        script.render(request(**overrides), OPTS, WORKDIR)
    assert raised.value.permanent


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("command_timeout_s", 0),
        ("connect_timeout_s", -1),
        ("command_timeout_s", "nan"),
        ("connect_timeout_s", "inf"),
        ("port", 0),
        ("port", 70000),
    ],
)
def test_timeouts_and_ports_no_connection_can_use_are_refused(setting: str, value: Any) -> None:
    settings = {"host": "login", "user": "slurm", "known_hosts": "pinned", setting: value}
    with pytest.raises(BackendError, match=f"invalid Slurm cluster settings: {setting}") as raised:
        SlurmSettings.from_mapping(settings)
    assert raised.value.permanent


def test_settings_that_would_break_a_directive_are_refused() -> None:
    with pytest.raises(BackendError, match="partition") as raised:
        ScriptOptions(partition="gpu --account=other")
    assert raised.value.permanent


@pytest.mark.parametrize(
    ("image", "pyxis"),
    [
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io#nvidia/pytorch:24.01-py3"),
        ("registry.local:5000/team/img:1", "registry.local:5000#team/img:1"),
        ("localhost/img", "localhost#img"),
        ("nvcr.io#nvidia/pytorch:24.01-py3", "nvcr.io#nvidia/pytorch:24.01-py3"),
        ("ubuntu:22.04", "ubuntu:22.04"),
        ("library/ubuntu", "library/ubuntu"),
    ],
)
def test_image_names_use_enroots_registry_separator(image: str, pyxis: str) -> None:
    assert script.pyxis_image(image) == pyxis


def test_login_node_commands_take_only_slurm_job_ids() -> None:
    with pytest.raises(BackendError, match="not a Slurm job id"):
        commands.squeue(["12", "12; rm -rf ~"])
