"""The job spec: one validating serializer for the API, YAML files and the UI form.

`JobSpecSerializer(data=...).is_valid()` yields field-level errors; `.validated_data` is the
normalized spec stored on the Job (durations in seconds, memory in MB, command as a list
or a string, retries and checkpoint expanded)."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

import yaml
from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from queue_service.shape import ShapeProblem, shape_problem

# \Z, not $: `$` also matches before a final newline ("FOO\n" was a valid name). RegexField
# searches with these as they are; the schema shows \Z as ECMA's $ (drf-spectacular).
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
MIG_PROFILE = re.compile(r"^[1-7]g\.[1-9][0-9]{0,3}gb(\+me)?\Z")
GPU_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
IMAGE = re.compile(r"^[^\s\x00-\x1f\x7f-\x9f]{1,512}\Z")
# C0, DEL and C1 (U+0080-U+009F: NEL breaks a line, CSI starts a terminal escape).
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# In a name, also Unicode's bidirectional embeddings, overrides and isolates, which make it
# display as other text ("report\u202egpj.exe" shows as "reportexe.jpg"), and its line and
# paragraph separators, newlines to some renderers. Marks (U+200E, U+200F) and joiners stay.
NAME_SPOOF = re.compile("[\u2028-\u202e\u2066-\u2069]")
# NUL, and lone surrogates (JSON's "\ud800" escape): PostgreSQL can store neither.
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
UNSTORABLE_SAYS = "has a NUL byte or a lone surrogate, which cannot be stored"
RESERVED_ENV_PREFIXES = ("GPUQ_", "SLURM_")
RESERVED_ENV = {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}
# Names Slurm's commands read as their own options (docs/slurm.md, "Environment"): srun's
# would change how gpuq's own srun runs the job; sbatch's and salloc's never reach gpuq's
# sbatch, so they would only seem to do something.
LAUNCHER_ENV_PREFIXES = {
    "SRUN_": "srun reads it as one of its options (SRUN_CPUS_PER_TASK is --cpus-per-task),"
    " so it would change how gpuq's own srun (multi-node training, an image) runs the job;"
    " for an srun of yours, export it in the command",
    "SBATCH_": "sbatch reads it as one of its options, but a job's env never reaches the"
    " sbatch gpuq runs, so it would change nothing: use the spec's own fields (time_limit,"
    " gpus_per_node…), or export it in the command for an sbatch of yours",
    "SALLOC_": "salloc reads it as one of its options, but gpuq runs no salloc, so it would"
    " change nothing; for a salloc of yours, export it in the command",
}
RETRY_CAUSES = ("node_failure", "preemption")
# Slurm's --time, in the forms that have a `:` or a `-` (time_str2secs; no field's range
# is checked): MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS. Its bare MM is not among them: a
# number is seconds here, as text too (YAML's `60` and `"60"` must not differ sixty times).
SLURM_TIME = re.compile(
    r"^(?:(?P<days>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?"
    r"|(?P<a>\d+):(?P<b>\d+)(?::(?P<c>\d+))?)\Z"
)
DURATION_FORMS = (
    "seconds as a number, 90m, 2h, 30d, or as Slurm's --time MM:SS, HH:MM:SS, D-HH,"
    " D-HH:MM or D-HH:MM:SS"
)
DURATION_UNIT = re.compile(r"^(?P<n>\d+(?:\.\d+)?)\s*(?P<u>s|m|min|h|d)?\Z")
MEMORY = re.compile(r"^(?P<n>\d+(?:\.\d+)?)\s*(?P<u>[KMGT]i?B?|[kmgt])?\Z")
UNIT_S = {"s": 1, None: 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
UNIT_MB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, None: 1}
# Per item, as a backend can pass them on; and command and env together, in UTF-8, well
# inside what any backend runs: Linux's execve takes 2 MiB of argv and environment in all
# (128 KiB a string), and etcd refuses a Kubernetes object of over 1.5 MiB.
MAX_ARGS = 1024
MAX_ARG_CHARS = 65536
MAX_ENV_VARS = 256
MAX_ENV_VALUE_CHARS = 32768
MAX_COMMAND_ENV_BYTES = 1024 * 1024
# Linux's MAX_ARG_STRLEN: no argument or environment string (`NAME=value`, the name counted)
# over 128 KiB of bytes, its NUL included; characters of UTF-8 take up to 4. A KiB below it,
# for what a backend may write around the text in the same string (a wrapper's prefix).
MAX_STRING_BYTES = 128 * 1024 - 1024
# Larger is a typo, and unbounded a 400-digit number overflowed float(): a 500.
MAX_DURATION_S = 100 * 365 * 86400
MAX_MEMORY_MB = 1024**3  # a pebibyte per node


def _whole(amount: float, most: float, too_large: str, *, least: float = 0.0) -> int:
    """`amount` rounded up, once it is known to be a number above 0 (at least `least`, if
    given) and no larger than `most` (YAML's .nan and .inf are floats too; a JSON integer
    may have 400 digits)."""
    if amount != amount:
        raise ValueError("must be a number")
    if amount <= 0 or amount < least:
        raise ValueError(f"must be at least {least:g} MB" if least else "must be positive")
    if amount > most:
        raise ValueError(too_large)
    return int(-(-float(amount) // 1))


def parse_duration(value: Any) -> int:
    """Seconds from 3600 (or "3600"), "90m", "2h", "1d", or Slurm's --time forms: "10:00"
    (ten minutes), "01:30:00", "1-0" (a day), "2-06:30", "2-00:00:00"."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration: {DURATION_FORMS}")
    if isinstance(value, int | float):
        seconds = value
    elif isinstance(value, str):
        text = value.strip().lower()
        if m := SLURM_TIME.match(text):
            fields = [m[k] or "0" for k in ("days", "dh", "dm", "ds", "a", "b", "c")]
            # Before int(), which refuses over 4,300 digits with a message of its own.
            if any(len(f.lstrip("0")) > len(str(MAX_DURATION_S)) for f in fields):
                raise ValueError("at most 100 years")
            days, dh, dm, ds, a, b, c = map(int, fields)
            if m["days"] is not None:
                seconds = days * 86400 + dh * 3600 + dm * 60 + ds
            elif m["c"] is not None:
                seconds = a * 3600 + b * 60 + c  # HH:MM:SS
            else:
                seconds = a * 60 + b  # MM:SS
        elif m := DURATION_UNIT.match(text):
            seconds = float(m["n"]) * UNIT_S[m["u"]]
        else:
            raise ValueError(f"{value[:40]!r} is not a duration (use {DURATION_FORMS})")
    else:
        raise ValueError(f"expected a duration: {DURATION_FORMS}")
    return _whole(seconds, MAX_DURATION_S, "at most 100 years")


def duration_text(seconds: Any) -> str:
    """Seconds -> the shortest exact form the API accepts back ("2h", "90m", "45s")."""
    if not seconds:
        return ""
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def parse_memory_mb(value: Any) -> int:
    """MB from 4096 (MB), "64G", "64GiB", "512M", "1T"."""
    if isinstance(value, bool):
        raise ValueError("expected a size")
    if isinstance(value, int | float):
        mb = value
    elif isinstance(value, str) and (m := MEMORY.match(value.strip())):
        unit = (m["u"] or "")[:1].upper() or None
        mb = float(m["n"]) * UNIT_MB[unit]
    elif isinstance(value, str):
        raise ValueError(f"{value[:40]!r} is not a size (use MB as a number, or 512M, 64G, 1T)")
    else:
        raise ValueError("expected a size (MB as a number, or 512M, 64G, 1T)")
    return _whole(mb, MAX_MEMORY_MB, "at most 1024T (a pebibyte)", least=1)


class TextField(serializers.CharField):
    """DRF's CharField, for text only: it writes a number as Python does (JSON's 12 as "12",
    1e400 as "inf"; YAML's `name: 007` as "7", `1.10` as "1.1"). As Kubernetes refuses a
    number for a string field in JSON and YAML alike, a number here is refused: quoted, it
    is kept as written (`name: "2024"`)."""

    default_error_messages = {"not_text": "expected a string"}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("not_text")
        return str(super().to_internal_value(data))


class TextPatternField(TextField, serializers.RegexField):
    pass


class SlugTextField(TextField, serializers.SlugField):
    pass


@extend_schema_field(
    {
        "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "example": "2h"}],
        "description": "seconds (a number, or a number as text), 90m / 2h / 30d, or as"
        " Slurm's --time: MM:SS / HH:MM:SS / D-HH / D-HH:MM / D-HH:MM:SS",
    }
)
class DurationField(serializers.Field):
    default_error_messages = {"invalid": "{message}"}

    def to_internal_value(self, data: Any) -> int:
        try:
            return parse_duration(data)
        except ValueError as exc:
            self.fail("invalid", message=str(exc))
            raise  # unreachable; fail() raises

    def to_representation(self, value: int) -> int:
        return value


@extend_schema_field(
    {
        "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "example": "64G"}],
        "description": "MB, or 512M / 64G / 1T",
    }
)
class MemoryField(DurationField):
    def to_internal_value(self, data: Any) -> int:
        try:
            return parse_memory_mb(data)
        except ValueError as exc:
            self.fail("invalid", message=str(exc))
            raise


def _too_many_bytes(what: str, size: int) -> str:
    return (
        f"{what} {size:,} bytes of UTF-8: at most {MAX_STRING_BYTES:,}"
        " (Linux runs no program given a longer one)"
    )


@extend_schema_field(
    {
        "oneOf": [
            {
                "type": "array",
                "items": {"type": "string", "maxLength": MAX_ARG_CHARS},
                "minItems": 1,
                "maxItems": MAX_ARGS,
            },
            {"type": "string", "minLength": 1, "maxLength": MAX_ARG_CHARS},
        ],
        "description": "argv (no shell), or one string run by /bin/sh -c; each at most"
        f" {MAX_STRING_BYTES:,} bytes of UTF-8, and with env at most"
        f" {MAX_COMMAND_ENV_BYTES:,} in all",
    }
)
class CommandField(serializers.Field):
    """A list of arguments (run as argv, no shell), or one string (run by /bin/sh -c)."""

    default_error_messages = {"invalid": "{message}"}

    def to_internal_value(self, data: Any) -> list[str] | str:
        if isinstance(data, str):
            if not data.strip():
                self.fail("invalid", message="must not be empty")
            if len(data) > MAX_ARG_CHARS:
                self.fail(
                    "invalid",
                    message=f"is too long: {len(data):,} characters, at most {MAX_ARG_CHARS:,}",
                )
            if UNSTORABLE.search(data):
                self.fail("invalid", message=UNSTORABLE_SAYS)
            if (size := len(data.encode())) > MAX_STRING_BYTES:
                self.fail("invalid", message=_too_many_bytes("is", size))
            return data
        if isinstance(data, list):
            if not data:
                self.fail("invalid", message="must not be an empty list")
            if len(data) > MAX_ARGS:
                self.fail("invalid", message=f"at most {MAX_ARGS} arguments")
            for i, arg in enumerate(data):
                if not isinstance(arg, str):
                    self.fail("invalid", message=f"argument {i} must be a string")
                if len(arg) > MAX_ARG_CHARS:
                    self.fail(
                        "invalid",
                        message=f"argument {i} is too long: {len(arg):,} characters, at most"
                        f" {MAX_ARG_CHARS:,}",
                    )
                if UNSTORABLE.search(arg):
                    self.fail("invalid", message=f"argument {i} {UNSTORABLE_SAYS}")
                if (size := len(arg.encode())) > MAX_STRING_BYTES:
                    self.fail("invalid", message=_too_many_bytes(f"argument {i} is", size))
            if not data[0].strip():
                self.fail("invalid", message="the program (argument 0) must not be empty")
            return list(data)
        self.fail("invalid", message="must be a list of strings or one shell string")
        raise AssertionError  # unreachable

    def to_representation(self, value: Any) -> Any:
        return value


# Its schema: queue_service/api/schema.py (OpenAPI 3.0 has no propertyNames).
class EnvField(serializers.DictField):
    """NAME: value, each name a shell variable's and none gpuq or the backend sets; values
    strings or numbers (stored as strings)."""

    def to_internal_value(self, data: Any) -> dict[str, str]:
        if not isinstance(data, dict):
            raise serializers.ValidationError("must be a mapping of NAME to value")
        errors: dict[str, str] = {}
        out: dict[str, str] = {}
        if len(data) > MAX_ENV_VARS:
            raise serializers.ValidationError(f"at most {MAX_ENV_VARS} variables")
        for name, value in data.items():
            if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
                errors[str(name)] = "not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)"
            elif name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES):
                errors[name] = "is set by gpuq or the backend and cannot be overridden"
            elif (why := launcher_option(name)) and name not in (stored_value(self, "env") or {}):
                # A job stored before this rule keeps its env through an update.
                errors[name] = why
            elif isinstance(value, bool) or not isinstance(value, str | int | float):
                errors[name] = "value must be a string or a number"
            elif len(str(value)) > MAX_ENV_VALUE_CHARS:
                errors[name] = (
                    f"value is too long: {len(str(value)):,} characters, at most"
                    f" {MAX_ENV_VALUE_CHARS:,}"
                )
            elif UNSTORABLE.search(str(value)):
                errors[name] = f"value {UNSTORABLE_SAYS}"
            elif (size := len(f"{name}={value}".encode())) > MAX_STRING_BYTES:
                errors[name] = _too_many_bytes("NAME=value is", size)
            else:
                out[name] = str(value)
        if errors:
            raise serializers.ValidationError(errors)
        return out


class _KnownKeysOnly(serializers.Serializer):
    """A part of the spec whose misspelt key is refused, as a top-level one is: dropped, the
    default would run instead (`retries: {maximum: 0}` retried 3 times)."""

    def to_internal_value(self, data: Any) -> Any:
        # key=str: a YAML file may mix number and text keys.
        unknown = sorted(set(data) - set(self.fields), key=str) if isinstance(data, dict) else []
        if unknown:
            known = ", ".join(self.fields)
            raise serializers.ValidationError(
                {str(k)[:64]: [f"unknown field (known: {known})"] for k in unknown}
            )
        return super().to_internal_value(data)


class RetriesSerializer(_KnownKeysOnly):
    max = serializers.IntegerField(min_value=0, max_value=20, default=3)
    on = serializers.ListField(
        child=serializers.ChoiceField(choices=RETRY_CAUSES),
        default=lambda: list(RETRY_CAUSES),
        max_length=len(RETRY_CAUSES),
    )


# Slurm's filename patterns (sbatch --output's) a checkpoint dir may hold: %j the job, %A
# its array, %a its task's index, %% a %. Any other % is kept as written.
CHECKPOINT_PATTERN = re.compile(r"%(.)", re.S)
ARRAY_PATTERNS = frozenset("aA")


def checkpoint_dir_of(template: str, job_id: str, array_id: str | None, index: int | None) -> str:
    """A spec's checkpoint dir for one job, its patterns filled in (the same on every attempt,
    so a requeue or resume finds what the last one saved; apart per task of an array)."""
    values = {"j": job_id, "A": array_id or "", "a": "" if index is None else str(index)}
    values["%"] = "%"
    return CHECKPOINT_PATTERN.sub(lambda m: values.get(m[1], m[0]), template)


class CheckpointSerializer(_KnownKeysOnly):
    dir = TextField(
        max_length=1024,
        help_text="an absolute path on storage every attempt reaches; %j is the job's id, and"
        " for an array's task %A the array's id and %a the task's index (%% a %)",
    )
    interval = DurationField(required=False, allow_null=True, default=None)

    def validate_dir(self, value: str) -> str:
        if CONTROL.search(value) or "\n" in value:
            raise serializers.ValidationError("must not contain control characters")
        # Each attempt runs in a directory of its own (the local backend's, Slurm's --chdir,
        # a new pod): a relative path would be another directory on every attempt. A job
        # stored before this rule (06383ce) keeps its own through an update: not the
        # update's doing.
        if not value.startswith("/") and value != stored_value(self, "checkpoint", "dir"):
            raise serializers.ValidationError("must be an absolute path, the same on every attempt")
        return value


def launcher_option(name: str) -> str | None:
    """Why an env name is refused as an option of srun, sbatch or salloc; None if it is not."""
    for prefix, why in LAUNCHER_ENV_PREFIXES.items():
        if name.startswith(prefix):
            return why
    return None


def stored_value(field: serializers.Field, *path: str) -> Any:
    """What the stored job an update checks again holds at `path` of its spec (the
    serializer's context `stored`, services.update_job's), or None on a submit."""
    value = field.context.get("stored")
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


MAX_AFTER = 20
ARRAY = re.compile(r"(?P<ranges>[0-9][0-9,:-]*)(?:%(?P<limit>[0-9]+))?")  # fullmatch
ARRAY_RANGE = re.compile(r"(?P<a>[0-9]+)(?:-(?P<b>[0-9]+)(?::(?P<step>[0-9]+))?)?")
# Room for the indices a rerun of an array's failed tasks lists one by one.
MAX_ARRAY_TEXT = 16384
MAX_ARRAY_INDEX = 999_999
ARRAY_HELP = "use 0-15, 1,3,5 or 0-15:2, with %N for at most N at once"


@dataclass(frozen=True)
class ArraySpec:
    """A job array (Slurm's --array): one task per index, each a job of its own."""

    text: str  # normalized: "0-15%4"
    indices: tuple[int, ...]
    max_running: int | None


def parse_array(value: Any, most: int) -> ArraySpec:
    """Slurm's --array syntax: "0-15", "1,3,5", "0-15:4" (every 4th), "0-99%10" (at most 10
    tasks at once); a number is one index, as in Slurm. At most `most` tasks."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"expected indices as text ({ARRAY_HELP})")
    if isinstance(value, int) and not 0 <= value <= MAX_ARRAY_INDEX:
        raise ValueError(f"indices go from 0 to {MAX_ARRAY_INDEX}")
    text = str(value).replace(" ", "")
    if len(text) > MAX_ARRAY_TEXT:
        raise ValueError(f"at most {MAX_ARRAY_TEXT} characters")
    m = ARRAY.fullmatch(text)
    if m is None:
        raise ValueError(f"{str(value)[:40]!r} is not an array ({ARRAY_HELP})")
    indices: set[int] = set()
    listed = 0  # indices as the parts list them, overlaps counted twice
    for part in m["ranges"].split(","):
        r = ARRAY_RANGE.fullmatch(part)
        if r is None:
            raise ValueError(f"{part[:40]!r} is not an index or a range ({ARRAY_HELP})")
        if any(len(number or "") > len(str(MAX_ARRAY_INDEX)) for number in r.groups()):
            raise ValueError(f"indices go up to {MAX_ARRAY_INDEX}")  # before int() of 10k digits
        first = int(r["a"])
        last = int(r["b"]) if r["b"] is not None else first
        step = int(r["step"]) if r["step"] is not None else 1
        if last > MAX_ARRAY_INDEX:
            raise ValueError(f"indices go up to {MAX_ARRAY_INDEX}")
        if last < first:
            raise ValueError(f"the range {part!r} ends before it starts")
        if step == 0:
            raise ValueError(f"the range {part!r} has a step of 0")
        span = range(first, last + 1, step)
        # Counted before expanding, and overlaps too: however the text repeats a range, the
        # work is bounded by `most` ("0-999999" must not build a million-element set).
        listed += len(span)
        if listed > most:
            raise ValueError(f"at most {most} tasks in an array on this site")
        indices.update(span)
    if m["limit"] is not None and len(m["limit"]) > len(str(MAX_ARRAY_INDEX)):
        raise ValueError(f"%N is at most %{MAX_ARRAY_INDEX}")
    limit = int(m["limit"]) if m["limit"] is not None else None
    if limit == 0:
        raise ValueError("%0 would never run a task: give at least %1")
    if limit is not None and limit > MAX_ARRAY_INDEX:
        raise ValueError(f"%N is at most %{MAX_ARRAY_INDEX}")
    if limit is not None:
        limit = min(limit, len(indices))  # %N past the size limits nothing
    return ArraySpec(text, tuple(sorted(indices)), limit)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "example": "0-15%4"},
            {"type": "integer", "minimum": 0, "maximum": MAX_ARRAY_INDEX},
        ],
        "description": "a job array: one task per index (Slurm's --array syntax: 0-15, 1,3,5,"
        " 0-15:2; %N runs at most N at once); each task sees GPUQ_ARRAY_TASK_ID",
    }
)
class ArrayField(serializers.Field):
    default_error_messages = {"invalid": "{message}"}

    def to_internal_value(self, data: Any) -> ArraySpec:
        try:
            return parse_array(data, int(settings.GPUQ_MAX_ARRAY_TASKS))
        except ValueError as exc:
            self.fail("invalid", message=str(exc))
            raise

    def to_representation(self, value: Any) -> Any:
        return value.text if isinstance(value, ArraySpec) else value


# What a job's `notify` may ask to be emailed about (Slurm's --mail-type BEGIN, END, FAIL,
# REQUEUE); "all" is every one.
NOTIFY_EVENTS = ("start", "end", "fail", "requeue")


@extend_schema_field(
    {
        "oneOf": [
            {"type": "array", "items": {"type": "string", "enum": list(NOTIFY_EVENTS)}},
            {"type": "string", "enum": ["all", *NOTIFY_EVENTS]},
        ],
        "description": "email the submitter when the job starts, ends, fails or is requeued"
        " (Slurm's --mail-type); an array's start and end are told once, for the whole array",
    }
)
class NotifyField(serializers.Field):
    default_error_messages = {"invalid": "{message}"}

    def to_internal_value(self, data: Any) -> list[str]:
        if data == "all":
            return list(NOTIFY_EVENTS)
        items = [data] if isinstance(data, str) else data
        known = ", ".join(NOTIFY_EVENTS)
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            self.fail("invalid", message=f"expected a list of events ({known}) or 'all'")
        unknown = [i for i in items if i not in NOTIFY_EVENTS]
        if unknown:
            self.fail("invalid", message=f"unknown event {unknown[0][:40]!r} (known: {known}, all)")
        return [e for e in NOTIFY_EVENTS if e in items]  # each once, in one order

    def to_representation(self, value: Any) -> Any:
        return value


class JobSpecSerializer(serializers.Serializer):
    name = TextField(max_length=128)
    kind = serializers.ChoiceField(choices=["training", "agent"], default="training")
    # Formats are RegexFields so that the OpenAPI schema carries their patterns.
    image = TextPatternField(
        IMAGE,
        required=False,
        allow_null=True,
        default=None,
        max_length=512,
        error_messages={"invalid": "must be an image reference without spaces"},
    )
    command = CommandField()
    env = EnvField(required=False, default=dict)
    nodes = serializers.IntegerField(min_value=1, max_value=512, default=1)
    gpus_per_node = serializers.IntegerField(min_value=0, max_value=16, required=False)
    gpu_model = TextPatternField(
        GPU_MODEL,
        required=False,
        allow_null=True,
        default=None,
        error_messages={"invalid": "must look like A100-SXM4-80GB (letters, digits, ._-)"},
    )
    mig_profile = TextPatternField(
        MIG_PROFILE,
        required=False,
        allow_null=True,
        default=None,
        error_messages={"invalid": "must look like 1g.10gb or 3g.40gb (<g>g.<mem>gb[+me])"},
    )
    cpus_per_gpu = serializers.IntegerField(
        min_value=1, max_value=256, required=False, allow_null=True, default=None
    )
    memory = MemoryField(required=False, allow_null=True, default=None)
    time_limit = DurationField(required=False, allow_null=True, default=None)
    priority = TextField(required=False, default="normal", max_length=32)
    retries = RetriesSerializer(required=False)
    checkpoint = CheckpointSerializer(required=False, allow_null=True, default=None)
    nccl_debug = serializers.BooleanField(default=False)
    team = SlugTextField(required=False, allow_null=True, default=None)
    cluster = SlugTextField(required=False, allow_null=True, default=None)
    # Slurm's --hold: stored suspended, so it waits until resumed.
    hold = serializers.BooleanField(
        required=False,
        default=False,
        help_text="submit it suspended: it waits, holding nothing, until resumed",
    )
    # Slurm's --dependency=afterok: start only once each of these jobs has succeeded.
    after = serializers.ListField(
        child=serializers.UUIDField(format="hex_verbose"),
        required=False,
        max_length=MAX_AFTER,
        help_text="ids of jobs that must succeed before this one may start (Slurm's afterok);"
        " a job array's id stands for all its tasks",
    )
    # Slurm's --array: stored on each task as its own index (submit_job splits it).
    array = ArrayField(required=False)
    # Slurm's --mail-type: emails to the submitter's address (notify.py).
    notify = NotifyField(required=False)

    def validate_name(self, value: str) -> str:
        # A tab too, as in a token's name: it breaks the columns `gpuq ls` prints. Names
        # stored while a tab (or a NAME_SPOOF character) was taken keep it through an
        # update: not the update's doing.
        stored = value == stored_value(self, "name")
        late = ("\t" in value or NAME_SPOOF.search(value)) and not stored
        if CONTROL.search(value) or "\n" in value or late or not value.strip():
            raise serializers.ValidationError("must be non-empty text without control characters")
        return value

    def validate_time_limit(self, value: int | None) -> int:
        if value is None:
            return int(settings.GPUQ_DEFAULT_TIME_LIMIT_S)
        if value > settings.GPUQ_MAX_TIME_LIMIT_S:
            # In the units the UI and the CLI show the limit in.
            most = duration_text(settings.GPUQ_MAX_TIME_LIMIT_S)
            raise serializers.ValidationError(f"at most {most} on this site")
        return value

    def validate_priority(self, value: str) -> str:
        from .models import PriorityClass

        if not PriorityClass.objects.filter(name=value).exists():
            known = ", ".join(PriorityClass.objects.values_list("name", flat=True))
            raise serializers.ValidationError(f"unknown priority class {value!r} (known: {known})")
        return value

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        # A misspelt field would otherwise vanish (`gpu_per_node: 8` runs on one GPU); it is
        # named beside the other errors (validate() adds it to its own), so one answer lists
        # every mistake. `x-` keys are free, as in Compose files: a place for YAML anchors.
        self._unknown: dict[str, str] = {}
        keys = set(data) - set(self.fields) if isinstance(data, dict) else set()
        for key in sorted(keys, key=str):
            if str(key).startswith("x-"):
                continue
            close = difflib.get_close_matches(str(key), list(self.fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            self._unknown[str(key)[:64]] = (
                f"unknown field{hint} (known: {', '.join(self.fields)}; x-… keys are free)"
            )
        try:
            attrs: dict[str, Any] = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if self._unknown and isinstance(exc.detail, dict):
                unknown = {k: [v] for k, v in self._unknown.items()}
                raise serializers.ValidationError({**unknown, **exc.detail}) from None
            raise
        return attrs

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        errors: dict[str, Any] = dict(self._unknown)
        if problem := command_env_problem(attrs["command"], attrs.get("env") or {}):
            errors.update(problem)
        mig = attrs.get("mig_profile")
        if mig is not None:
            if attrs["kind"] != "agent":
                errors["mig_profile"] = "only agent jobs run on a MIG slice (set kind: agent)"
            if attrs["nodes"] != 1:
                errors["nodes"] = "a MIG job runs on one slice of one node (nodes must be 1)"
            # 0 is what is stored for a slice: a stored spec submitted again stays valid.
            if attrs.get("gpus_per_node") not in (None, 0, 1):
                errors["gpus_per_node"] = "a MIG job takes exactly one slice; omit gpus_per_node"
            attrs["gpus_per_node"] = 0
        else:
            attrs.setdefault("gpus_per_node", 1)
        if attrs["nodes"] > 1 and attrs["gpus_per_node"] == 0:
            errors["gpus_per_node"] = "a multi-node job needs GPUs on every node"
        if attrs["kind"] == "agent" and attrs["nodes"] > 1:
            errors.setdefault("nodes", "agent jobs run on one node")
        if attrs.get("nccl_debug") and attrs["nodes"] == 1 and attrs["gpus_per_node"] <= 1:
            errors["nccl_debug"] = "NCCL debugging needs more than one GPU"
        checkpoint = attrs.get("checkpoint")
        if (
            checkpoint
            and checkpoint.get("interval")
            and checkpoint["interval"] > attrs.get("time_limit", 0)
        ):
            errors["checkpoint"] = "the checkpoint interval is longer than the time limit"
        # A job of its own stored with one before this rule (06383ce) keeps it through an
        # update, as a relative dir (validate_dir): not the update's doing.
        if (
            checkpoint
            and attrs.get("array") is None
            and {m[1] for m in CHECKPOINT_PATTERN.finditer(checkpoint["dir"])} & ARRAY_PATTERNS
            and checkpoint["dir"] != stored_value(self, "checkpoint", "dir")
        ):
            errors.setdefault(
                "checkpoint",
                {"dir": ["%a and %A name an array's task and array: this job is not an array"]},
            )
        if errors:
            raise serializers.ValidationError(errors)
        if not attrs.get("hold"):
            attrs.pop("hold", None)  # stored only when asked for
        # Stored only when given, as strings in the order given, each once.
        after = list(dict.fromkeys(str(u) for u in attrs.pop("after", None) or ()))
        if after:
            attrs["after"] = after
        if not attrs.get("notify"):
            attrs.pop("notify", None)  # stored only when asked for
        attrs.setdefault("retries", {"max": 3, "on": list(RETRY_CAUSES)})
        if attrs.get("retries") is None:
            attrs["retries"] = {"max": 3, "on": list(RETRY_CAUSES)}
        return attrs


def command_env_problem(command: list[str] | str, env: dict[str, str]) -> dict[str, str]:
    """{field: message} when command and env together are too large to run, naming the one
    that takes more; empty when they fit."""
    args = [command] if isinstance(command, str) else command
    command_bytes = sum(len(a.encode()) for a in args)
    env_bytes = sum(len(n.encode()) + len(v.encode()) for n, v in env.items())
    total = command_bytes + env_bytes
    if total <= MAX_COMMAND_ENV_BYTES:
        return {}
    field = "command" if command_bytes >= env_bytes else "env"
    return {
        field: f"command ({command_bytes:,} bytes) and env ({env_bytes:,} bytes) take"
        f" {total:,} bytes of UTF-8 together: at most {MAX_COMMAND_ENV_BYTES:,}"
    }


class YamlError(ValueError):
    def __init__(self, message: str, line: int | None, shape: ShapeProblem | None = None) -> None:
        super().__init__(message)
        self.line = line
        self.shape = shape  # a file that parsed, but whose shape is refused


class _CoreLoader(yaml.SafeLoader):
    """YAML 1.2's core schema for plain scalars, as in JSON: only true/false are booleans
    (YAML 1.1's bare `on`, `off`, `yes`, `no` are strings: `retries: {on: [...]}`), and
    numbers are decimal, 0o octal or 0x hex (1.1's base-60 `12:00` and octal `010` are a
    string and ten), so a job file means what the same spec means as JSON."""


_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
# 1.1's bare timestamps (`2024-06-01`) and `=` are text in the core schema, as in JSON; an
# explicit !!timestamp is still read (and checked: _strict).
_NOT_CORE = (_INT, _FLOAT, _BOOL, "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value")
_CoreLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _NOT_CORE]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_CoreLoader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_CoreLoader.add_implicit_resolver(
    _INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)
_CoreLoader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def _core_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node))
    digits = text.lstrip("+-")
    sign = -1 if text.startswith("-") else 1
    try:
        if digits[:2] in ("0o", "0x"):
            return sign * int(digits[2:], 8 if digits[1] == "o" else 16)
        return sign * int(digits, 10)
    except ValueError:
        if digits.isdigit():  # more digits than int() reads: load_yaml_spec says so
            raise
        # An explicit !!int that is none.
        raise yaml.constructor.ConstructorError(
            None, None, f"{text[:40]!r} is not an integer", node.start_mark
        ) from None


_CoreLoader.add_constructor(_INT, _core_int)


def _strict(tag: str, what: str) -> None:
    """SafeLoader's constructor for `tag`, whose text that is not one (an explicit `!!bool
    maybe`, `!!timestamp abc`, an empty `!!float`, a month 13) is a YAML error at its line:
    PyYAML raises KeyError, AttributeError, IndexError or ValueError there, which were 500s."""
    construct = yaml.SafeLoader.yaml_constructors[tag]

    def strict(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
        try:
            return construct(loader, node)
        except (ValueError, KeyError, AttributeError, IndexError, TypeError, OverflowError):
            text = str(node.value)[:40] if isinstance(node, yaml.ScalarNode) else node.id
            raise yaml.constructor.ConstructorError(
                None, None, f"{text!r} is not {what}", node.start_mark
            ) from None

    _CoreLoader.add_constructor(tag, strict)


_strict(_FLOAT, "a number")
_strict(_BOOL, "a boolean")
_strict("tag:yaml.org,2002:timestamp", "a timestamp")


def load_yaml_spec(text: str) -> dict[str, Any]:
    """Parse a YAML job file into the dict the serializer takes; syntax errors carry a line."""
    try:
        data = yaml.load(text, Loader=_CoreLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark is not None else None
        raise YamlError(f"line {line}: {exc.problem}", line) from None
    except yaml.YAMLError as exc:
        raise YamlError(str(exc), None) from None
    except RecursionError:
        raise YamlError("the file is nested too deeply", None) from None
    except ValueError:  # an integer of more than 4300 digits
        raise YamlError("the file has a number too long to read", None) from None
    if not isinstance(data, dict):
        raise YamlError("the file must be a mapping of fields (name:, command:, ...)", 1)
    problem = shape_problem(data)
    if problem is not None:
        raise YamlError(f"the file {problem.message}", None, problem)
    return data


def yaml_field_lines(text: str) -> dict[str, int]:
    """Top-level field name -> line number, so the UI can point at the line of a bad field."""
    lines: dict[str, int] = {}
    try:
        node = yaml.compose(text)
    except (yaml.YAMLError, RecursionError):
        return lines
    if isinstance(node, yaml.MappingNode):
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode):
                lines[str(key.value)] = key.start_mark.line + 1
    return lines
