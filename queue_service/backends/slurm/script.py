"""The batch script gpuq hands to `sbatch`: a pure function of the job spec and the cluster's
settings.

All user text (name, command, env values, paths, image) is written after the first command
line, quoted for bash, and never at the start of a line, so it can be neither an `#SBATCH`
directive (sbatch stops reading those at the first command) nor a second command. Only values
gpuq made or validated (ids, numbers, operator settings, node names) appear in `#SBATCH` lines.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from queue_service.backends.base import BackendError, DispatchRequest, cpus_per_node, job_env

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Values that go into #SBATCH lines: sbatch splits those itself, so no blanks or quotes.
_DIRECTIVE_VALUE = re.compile(r"[A-Za-z0-9._:/@+=,~%\[\]-]+")
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A registry host is the first path part when it has a dot or a port, or is localhost.
_REGISTRY = re.compile(r"^(localhost|[^/]*[.:][^/]*)/(.+)$")

# slurmctld's default max_script_size (SchedulerParameters): sbatch refuses a larger script.
MAX_SCRIPT_BYTES = 4 * 1024 * 1024

NCCL_DEFAULTS: tuple[tuple[str, str], ...] = (
    ("NCCL_DEBUG", "WARN"),
    # Turns a hung or failed collective into an error instead of a job that hangs until its
    # time limit.
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
)
NCCL_DEBUG_ON: tuple[tuple[str, str], ...] = (
    ("NCCL_DEBUG", "INFO"),
    ("NCCL_DEBUG_SUBSYS", "INIT,NET"),
)


@dataclass(frozen=True)
class ScriptOptions:
    """The cluster settings that shape a batch script (see docs/slurm.md)."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    requeue: bool = False
    gres_map: Mapping[str, str] = field(default_factory=dict)
    container_mounts: tuple[str, ...] = ()
    checkpoint_signal_s: int = 120
    # The placed nodes' GPUs have no GRES type (`Gres=gpu:4`): a job asks `gpu:N`.
    untyped_gpus: bool = False

    def __post_init__(self) -> None:
        for name in ("partition", "account", "qos"):
            value = getattr(self, name)
            if value is not None:
                directive_value(f"setting {name}", value)
        for gres in self.gres_map.values():
            directive_value("a gres_map type", gres)


def sh_quote(text: str) -> str:
    """Quote for bash so the text is one literal word. Text with control characters (a
    newline, say) becomes $'...' with escapes, so the script has no line that the text starts;
    other text takes the shorter of shlex.quote and $'...' (shlex writes each `'` as the five
    bytes `'"'"'`, $'...' as two: a script must fit sbatch's size limit)."""
    if "\x00" in text:
        raise BackendError("text with a NUL byte cannot be passed to a command", permanent=True)
    escaped = []
    for ch in text:
        if ch in "\\'":
            escaped.append("\\" + ch)
        elif _CONTROL.fullmatch(ch):
            escaped.append(f"\\x{ord(ch):02x}")
        else:
            escaped.append(ch)
    ansi = "$'" + "".join(escaped) + "'"
    if _CONTROL.search(text):
        return ansi
    return min(shlex.quote(text), ansi, key=len)


def sh_join(words: Sequence[str]) -> str:
    return " ".join(sh_quote(w) for w in words)


def directive_value(what: str, value: str) -> str:
    if not _DIRECTIVE_VALUE.fullmatch(value):
        raise BackendError(f"{what} {value!r} cannot be passed to sbatch", permanent=True)
    return value


def job_name(job_id: str) -> str:
    """The unique Slurm job name gpuq looks a job up by."""
    if not _JOB_ID.fullmatch(job_id):
        raise BackendError(f"job id {job_id!r} is not a gpuq id", permanent=True)
    return f"gpuq-{job_id}"


def attempt_name(job: DispatchRequest) -> str:
    """`<job id>.<attempt>`: the attempt's directory and its log files are named so."""
    job_name(job.job_id)
    return f"{job.job_id}.{int(job.attempt)}"


def job_dir(workdir: str, job: DispatchRequest) -> str:
    """One directory per attempt, so a retry never adopts an earlier attempt's Slurm job."""
    return f"{workdir.rstrip('/')}/{attempt_name(job)}"


def logs_dir(workdir: str) -> str:
    return f"{workdir.rstrip('/')}/logs"


def log_path(workdir: str, name: str, stream: str) -> str:
    """Where Slurm writes a job's output: named by the attempt (`attempt_name`), which its
    external id carries, so `logs()` needs no lookup and a Slurm id given again (ids wrap at
    MaxJobId, and restart when slurmctld's state is lost) never appends to another job's
    file. Jobs submitted before that are named by their Slurm id."""
    if stream not in ("stdout", "stderr"):
        raise BackendError(f"unknown log stream {stream!r}", permanent=True)
    return f"{logs_dir(workdir)}/{name}.{'out' if stream == 'stdout' else 'err'}"


def filename_pattern(path: str) -> str:
    """A path as sbatch's --output and --error read it: `%` starts one of its replacement
    symbols (`%u`, `%j`…), and `%%` is a `%` (a workdir may have one)."""
    return path.replace("%", "%%")


def format_time_limit(seconds: int) -> str:
    """Slurm's D-HH:MM:SS; Slurm itself rounds up to whole minutes."""
    seconds = max(1, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"


def gres(job: DispatchRequest, gres_map: Mapping[str, str], untyped: bool = False) -> str | None:
    """`gpu[:type]:N` per node: a MIG profile or GPU model goes through the cluster's map
    (unmapped names are used as they are, as inventory reports unmapped types); on nodes of
    untyped GPUs, `gpu:N` whatever the model."""
    if job.mig_profile:
        mig_type = gres_map.get(job.mig_profile, job.mig_profile)
        return f"gpu:{directive_value('MIG profile', mig_type)}:1"
    if job.gpus_per_node <= 0:
        return None
    if job.gpu_model and not untyped:
        gpu_type = directive_value("GPU model", gres_map.get(job.gpu_model, job.gpu_model))
        return f"gpu:{gpu_type}:{job.gpus_per_node}"
    return f"gpu:{job.gpus_per_node}"


def pyxis_image(image: str) -> str:
    """enroot names a registry with `#` (nvcr.io#nvidia/pytorch:24.01-py3); a docker-style
    `nvcr.io/nvidia/pytorch:24.01-py3` is rewritten to that form."""
    if "#" in image:
        return image
    match = _REGISTRY.match(image)
    return f"{match.group(1)}#{match.group(2)}" if match else image


def directives(job: DispatchRequest, opts: ScriptOptions, workdir: str) -> list[str]:
    name = job_name(job.job_id)
    lines = [
        f"--job-name={name}",
        f"--comment=gpuq:{job.job_id}:{job.attempt}",
        f"--chdir={directive_value('workdir', job_dir(workdir, job))}",
        f"--output={filename_pattern(log_path(workdir, attempt_name(job), 'stdout'))}",
        f"--error={filename_pattern(log_path(workdir, attempt_name(job), 'stderr'))}",
        # A run Slurm requeues writes after the first run's output instead of truncating it
        # (byte offsets stay valid); each gpuq attempt has its own file.
        "--open-mode=append",
        f"--nodes={job.nodes}",
        "--ntasks-per-node=1",
    ]
    if (spec := gres(job, opts.gres_map, opts.untyped_gpus)) is not None:
        lines.append(f"--gres={spec}")
    if job.cpus_per_gpu:
        lines.append(f"--cpus-per-task={cpus_per_node(job.cpus_per_gpu, job.gpus_per_node)}")
    if job.memory_mb:
        lines.append(f"--mem={job.memory_mb}M")
    if job.time_limit_s:
        lines.append(f"--time={format_time_limit(job.time_limit_s)}")
    for flag, value in (
        ("partition", opts.partition),
        ("account", opts.account),
        ("qos", opts.qos),
    ):
        if value:
            lines.append(f"--{flag}={value}")
    if job.placement:
        nodes = ",".join(directive_value("node name", a.node) for a in job.placement)
        lines.append(f"--nodelist={nodes}")
    lines.append("--requeue" if opts.requeue else "--no-requeue")
    if job.checkpoint_dir or job.checkpoint_interval_s:
        # B: signals the batch shell, which is the job's own launcher after `exec`.
        lines.append(f"--signal=B:USR1@{opts.checkpoint_signal_s}")
    return ["#SBATCH " + line for line in lines]


def user_env(job: DispatchRequest) -> list[str]:
    """The user's env as `K=V` words for `env --` on the launch line. Not bash `export`: bash
    refuses its readonly names (UID, EUID, PPID) and replaces its dynamic ones (RANDOM,
    SHLVL, LINENO), which are valid names a job may set."""
    for key in job.env:
        if not _ENV_NAME.fullmatch(key):
            raise BackendError(f"environment variable name {key!r} is invalid", permanent=True)
    return [f"{key}={value}" for key, value in job.env.items()]


def environment(job: DispatchRequest) -> list[str]:
    """Exports in order of precedence, lowest first: NCCL defaults (a value the site already
    set wins), gpuq's own variables. The user's env, which wins over everything, is set on
    the launch line (`user_env`)."""
    lines: list[str] = []
    if job.gpus_per_node > 0 or job.mig_profile:
        lines += [f'export {key}="${{{key}:-{value}}}"' for key, value in NCCL_DEFAULTS]
        if job.nccl_debug:
            lines += [f"export {key}={value}" for key, value in NCCL_DEBUG_ON]
    for key, value in job_env(job).items():
        lines.append(f"export {key}={sh_quote(value)}")
    if job.nodes > 1:
        # Each node's rank comes from SLURM_NODEID inside the step; the rendezvous host is the
        # allocation's first node and the port differs per job so jobs can share a node.
        lines.append(
            'export MASTER_ADDR="${MASTER_ADDR:-$(scontrol show hostnames "$SLURM_JOB_NODELIST"'
            ' | head -n 1)}"'
        )
        lines.append('export MASTER_PORT="${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 20000))}"')
        lines.append(f"export NNODES={job.nodes}")
    return lines


# Names bash sets, rewrites or refuses at its start whatever its environment holds.
BASH_OWN_NAMES = frozenset(
    {
        "BASH", "BASHOPTS", "BASHPID", "BASH_ALIASES", "BASH_ARGC", "BASH_ARGV", "BASH_ARGV0",
        "BASH_CMDS", "BASH_COMMAND", "BASH_EXECUTION_STRING", "BASH_LINENO", "BASH_SOURCE",
        "BASH_SUBSHELL", "BASH_VERSINFO", "BASH_VERSION", "DIRSTACK", "EPOCHREALTIME",
        "EPOCHSECONDS", "EUID", "FUNCNAME", "GROUPS", "HISTCMD", "HOSTNAME", "HOSTTYPE", "IFS",
        "LINENO", "MACHTYPE", "OLDPWD", "OPTARG", "OPTERR", "OPTIND", "OSTYPE", "PIPESTATUS",
        "PPID", "PS4", "PWD", "RANDOM", "REPLY", "SECONDS", "SHELLOPTS", "SHLVL", "SRANDOM",
        "UID",
    }
)  # fmt: skip


def _torchrun(job: DispatchRequest, argv: Sequence[str], env: Sequence[str]) -> list[str]:
    """Multi-node training: one torchrun per node, node_rank read on that node. The user's
    env reaches it through srun's environment, except the names this bash would drop or
    rewrite: those are applied again after it, as arguments. Only those: an argument stays
    in the process table (`ps`, /proc/<pid>/cmdline) for the job's life, where any user of
    the node can read it, and env values are often secrets."""
    env = [word for word in env if word.split("=", 1)[0] in BASH_OWN_NAMES]
    # A program named `-x` is no option of torchrun's: its `--` (argparse's) ends them.
    program = ["--", *argv] if argv[0].startswith("-") else list(argv)
    script_args = program if argv[0].endswith(".py") else ["--no-python", *program]
    if env:
        inner = (
            'exec env -- "${@:4:$3}" torchrun --nnodes="$1" --nproc_per_node="$2"'
            ' --node_rank="$SLURM_NODEID" --master_addr="$MASTER_ADDR"'
            ' --master_port="$MASTER_PORT" "${@:4+$3}"'
        )
        counted = [str(len(env)), *env]
    else:
        inner = (
            'exec torchrun --nnodes="$1" --nproc_per_node="$2" --node_rank="$SLURM_NODEID"'
            ' --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" "${@:3}"'
        )
        counted = []
    return [
        "bash",
        "-c",
        inner,
        "gpuq-torchrun",
        str(job.nodes),
        str(max(1, job.gpus_per_node)),
        *counted,
        *script_args,
    ]


def launch(job: DispatchRequest, opts: ScriptOptions) -> str:
    """The last line: `exec` so the batch step IS the job (signals and exit code reach it).
    The user's env comes first, `exec env -- K=V ... [srun ...] command`: srun hands the
    environment to its steps, and Pyxis keeps these names' values over the image's own
    (`--container-env`)."""
    env = user_env(job)
    if isinstance(job.command, str):
        if not job.command.strip():
            raise BackendError("the command is empty", permanent=True)
        payload = ["bash", "-c", job.command]
    else:
        if not job.command:
            raise BackendError("the command is empty", permanent=True)
        payload = list(job.command)
    torchrun = job.kind == "training" and job.nodes > 1 and not isinstance(job.command, str)
    if torchrun:
        payload = _torchrun(job, payload, env)
    srun: list[str] = []
    if job.image:
        srun = ["srun", f"--container-image={pyxis_image(job.image)}"]
        if opts.container_mounts:
            srun.append("--container-mounts=" + ",".join(opts.container_mounts))
        if job.env:
            srun.append("--container-env=" + ",".join(job.env))
        if not torchrun:
            srun += ["--nodes=1", "--ntasks=1"]
    elif torchrun:
        srun = ["srun"]
    prefix = ["env", "--", *env] if env else []
    # The program as the spec names it: one named `-x` is no option of exec or srun (`--`
    # ends theirs; env takes it as the program after its own `--`).
    program = ["--", *payload] if payload[0].startswith("-") else payload
    if prefix and srun:
        # `env` would look srun up in the user's PATH (theirs is for the job or its
        # container): the batch shell's PATH finds it.
        return (
            "gpuq_srun=$(command -v srun) || gpuq_srun=srun\n"
            f'exec {sh_join(prefix)} "$gpuq_srun" {sh_join([*srun[1:], *program])}'
        )
    if prefix and "=" in payload[0]:
        # env reads every word with `=` as a variable, also after `--`: a program path such
        # as `sweeps/lr=0.1/run.sh` would be set, and the next argument run. `nice -n 0`
        # execs it as it is and changes nothing else; the batch shell's PATH finds it.
        return (
            "gpuq_nice=$(command -v nice) || gpuq_nice=nice\n"
            f'exec {sh_join(prefix)} "$gpuq_nice" -n 0 {sh_join(["--", *payload])}'
        )
    if prefix:
        return "exec " + sh_join([*prefix, *payload])
    return "exec " + sh_join([*srun, *program])


def render(job: DispatchRequest, opts: ScriptOptions, workdir: str) -> str:
    """The whole batch script for one attempt of a job."""
    lines = [
        "#!/bin/bash",
        *directives(job, opts, workdir),
        "# Generated by gpuq: every user value below is quoted.",
        *environment(job),
        launch(job, opts),
    ]
    text = "\n".join(lines) + "\n"
    # The spec's 1 MiB of command and env can still quote past it (a control character is
    # written as four bytes): say so here rather than as sbatch's refusal.
    if (size := len(text.encode())) > MAX_SCRIPT_BYTES:
        raise BackendError(
            f"the batch script would be {size:,} bytes, over sbatch's limit of"
            f" {MAX_SCRIPT_BYTES:,} (max_script_size): shorten the command or env",
            permanent=True,
        )
    return text
