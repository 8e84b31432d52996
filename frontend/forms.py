"""The submit form and pasted YAML, turned into the dict the API's JobSpecSerializer takes, and
its errors turned back into per-field (or per-line) messages.

Values go to the serializer as the strings typed, so the messages are the API's own; the form
adds only what is about its own format (the NAME=value lines of the environment box)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from queue_service.echoes import CUT
from queue_service.jobs.spec import NOTIFY_EVENTS, JobSpecSerializer, duration_text

# The form's inputs, in the order they are read.
TEXT_FIELDS = (
    "name",
    "image",
    "command",
    "nodes",
    "gpus_per_node",
    "gpu_model",
    "mig_profile",
    "cpus_per_gpu",
    "memory",
    "time_limit",
    "priority",
    "team",
    "cluster",
    "array",
)
FORM_FIELDS = (
    "kind",
    *TEXT_FIELDS,
    "retries_max",
    "checkpoint_dir",
    "checkpoint_interval",
    "env",
    "after",
    "hold",
    "notify",
)
# The "Email me when it" boxes (the spec's notify, jobs.notify): value and label.
NOTIFY_LABELS = {"start": "starts", "end": "ends", "fail": "fails", "requeue": "is requeued"}
NOTIFY_CHOICES = tuple((event, NOTIFY_LABELS[event]) for event in NOTIFY_EVENTS)
# Where an error for a (dotted) spec path is shown on the form.
ERROR_FIELD = {
    "retries.max": "retries_max",
    "retries": "retries_max",
    "checkpoint.dir": "checkpoint_dir",
    "checkpoint.interval": "checkpoint_interval",
    "checkpoint": "checkpoint_interval",
}
NON_FIELD = "__all__"


@dataclass
class Parsed:
    data: dict[str, Any]
    errors: dict[str, list[str]] = field(default_factory=dict)


def form_to_spec(post: Mapping[str, str]) -> Parsed:
    """The posted form -> the spec dict. Blank inputs are left out (the API's defaults apply);
    inputs of the other job kind are left out, since the page hides them."""
    values = {name: (post.get(name) or "").strip() for name in FORM_FIELDS}
    kind = values["kind"] or "training"
    data: dict[str, Any] = {"kind": kind}
    for name in TEXT_FIELDS:
        if values[name]:
            data[name] = values[name]
    # The command box is one shell line or script; keep its inner whitespace as typed.
    if values["command"]:
        data["command"] = (post.get("command") or "").replace("\r\n", "\n").strip("\n")
    if kind == "training":
        data.pop("mig_profile", None)
    else:
        data.pop("nodes", None)
        if "mig_profile" in data:
            data.pop("gpus_per_node", None)
            data.pop("gpu_model", None)
    if values["retries_max"]:
        data["retries"] = {"max": values["retries_max"]}
    if values["checkpoint_dir"] or values["checkpoint_interval"]:
        checkpoint = {"dir": values["checkpoint_dir"]}
        if values["checkpoint_interval"]:
            checkpoint["interval"] = values["checkpoint_interval"]
        data["checkpoint"] = checkpoint
    if values["after"]:
        data["after"] = [a for a in re.split(r"[\s,]+", values["after"]) if a]
    if values["hold"]:
        data["hold"] = True
    if notify := ticked(post, "notify"):
        data["notify"] = notify  # as posted: the API names an unknown one
    errors: dict[str, list[str]] = {}
    env, env_errors = parse_env(post.get("env") or "")
    if env:
        data["env"] = env
    if env_errors:
        errors["env"] = env_errors
    return Parsed(data, errors)


def ticked(post: Mapping[str, Any], name: str) -> list[str]:
    """A group of checkboxes: a posted form's values of `name` (a QueryDict's list), or the
    comma-separated text spec_to_form and form_values keep them in."""
    getlist = getattr(post, "getlist", None)
    raw = getlist(name) if getlist is not None else [post.get(name) or ""]
    return [v for item in raw for v in re.split(r"[\s,]+", str(item)) if v]


def form_values(post: Mapping[str, Any]) -> dict[str, str]:
    """What was posted, to show again on a refused form."""
    values = {name: str(post.get(name) or "") for name in FORM_FIELDS}
    values["notify"] = ", ".join(ticked(post, "notify"))
    return values


def parse_env(text: str) -> tuple[dict[str, str], list[str]]:
    """NAME=value per line; blank lines and # comments are skipped."""
    env: dict[str, str] = {}
    errors = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            errors.append(f"line {number}: expected NAME=value")
            continue
        env[name.strip()] = value
    return env, errors


def spec_to_form(spec: Mapping[str, Any]) -> dict[str, str]:
    """A job's copy (its stored spec with team and cluster, jobs.services.copy_data) -> the
    form's values."""
    command = spec.get("command", "")
    checkpoint = spec.get("checkpoint") or {}
    retries = spec.get("retries") or {}
    values = {
        "kind": spec.get("kind", "training"),
        "name": spec.get("name", ""),
        "image": spec.get("image") or "",
        "command": shlex.join(command) if isinstance(command, list) else str(command),
        "nodes": _text(spec.get("nodes")),
        "gpus_per_node": _text(spec.get("gpus_per_node")) if not spec.get("mig_profile") else "",
        "gpu_model": spec.get("gpu_model") or "",
        "mig_profile": spec.get("mig_profile") or "",
        "cpus_per_gpu": _text(spec.get("cpus_per_gpu")),
        "memory": f"{spec['memory']}M" if spec.get("memory") else "",
        "time_limit": duration_text(spec.get("time_limit")),
        "priority": spec.get("priority", ""),
        "team": spec.get("team") or "",
        "cluster": spec.get("cluster") or "",
        "retries_max": _text(retries.get("max")),
        "checkpoint_dir": checkpoint.get("dir") or "",
        "checkpoint_interval": duration_text(checkpoint.get("interval")),
        "env": "\n".join(f"{k}={v}" for k, v in (spec.get("env") or {}).items()),
        "after": ", ".join(spec.get("after") or ()),
        "hold": "on" if spec.get("hold") else "",
        "notify": ", ".join(spec.get("notify") or ()),
        # A task's stored spec holds its own index: its copy is that one task again.
        "array": _text(spec.get("array")),
    }
    return {k: str(v) for k, v in values.items()}


def spec_to_yaml(spec: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(spec), sort_keys=False, allow_unicode=True)


# The form's pickers: a value they do not offer now cannot be shown, and would be dropped.
PICKERS = ("team", "gpu_model", "mig_profile", "priority", "cluster")


def form_changes(spec: Mapping[str, Any], offered: Mapping[str, Collection[str]]) -> list[str]:
    """What a copy (jobs.services.copy_data) would lose or change if sent from the form
    unchanged: spec fields the form has no input for or cannot hold ("nccl_debug",
    "retries.on", "env.OPTS"), and picked values not among `offered` now (per PICKERS).
    Empty: the form holds the copy exactly."""
    values = spec_to_form(spec)
    # As a browser posts it: a textarea's line breaks come back as CRLF.
    posted = {
        k: re.sub(r"\r\n|\r|\n", "\r\n", v) if k in ("command", "env") else v
        for k, v in values.items()
    }
    back = form_to_spec(posted)
    changes = [
        f"{name}: {back.data[name]} is not offered now"
        for name in PICKERS
        if back.data.get(name) and back.data[name] not in offered.get(name, ())
    ]
    # A list command becomes one shell line that runs the same argv: a different form, not a
    # change.
    if isinstance(spec.get("command"), list):
        spec = {**spec, "command": values["command"]}
    before, after = _as_stored(spec), _as_stored(back.data)
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        # Named by the original's entries that change (env.OPTS), not by what a cut-up value
        # would add.
        subs = [
            f"{key}.{sub}"
            for sub in (old if isinstance(old, Mapping) else ())
            if not isinstance(new, Mapping) or old[sub] != new.get(sub)
        ]
        changes += subs or [key]
    return list(dict.fromkeys(changes))


def _as_stored(data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` as the API's serializer would store it; a field it refuses now (a priority
    class since removed, a time limit above a lowered ceiling) by its errors instead."""
    data, refused = dict(data), {}
    for _ in range(3):  # a refusal in validate() may hide those of other fields
        serializer = JobSpecSerializer(data=data)
        if serializer.is_valid():
            return {**serializer.validated_data, **refused}
        for key, errors in serializer.errors.items():
            refused[key] = [str(e) for e in errors] if isinstance(errors, list) else errors
            data.pop(key, None)
    return refused


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def flatten_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """A DRF ValidationError's detail -> {"retries.max": [...], "env.FOO": [...], ...};
    errors not about a field are under NON_FIELD."""
    out: dict[str, list[str]] = {}
    if isinstance(detail, Mapping):
        for key, value in detail.items():
            name = NON_FIELD if key in ("non_field_errors", NON_FIELD) else str(key)
            path = f"{prefix}.{name}" if prefix and name != NON_FIELD else (prefix or name)
            for k, v in flatten_errors(value, path).items():
                out.setdefault(k, []).extend(v)
    elif isinstance(detail, list | tuple):
        for item in detail:
            for k, v in flatten_errors(item, prefix).items():
                out.setdefault(k, []).extend(v)
    else:
        out.setdefault(prefix or NON_FIELD, []).append(str(detail))
    return out


def form_errors(detail: Any) -> dict[str, list[str]]:
    """API errors -> the form input each belongs to (env.FOO -> env, with the name kept)."""
    out: dict[str, list[str]] = {}
    for path, messages in flatten_errors(detail).items():
        head, _, rest = path.partition(".")
        if path in ERROR_FIELD:
            name = ERROR_FIELD[path]
        elif head == "env" and rest:
            name, messages = "env", [f"{rest}: {m}" for m in messages]
        elif head == "after":  # after.2: the third id
            name = "after"
        elif path in FORM_FIELDS:
            name = path
        else:
            name, messages = NON_FIELD, [f"{path}: {m}" for m in messages]
        out.setdefault(name, []).extend(messages)
    return out


# The job page's update forms (jobs.services.update_job): the input each error is shown at.
UPDATE_ERROR_FIELD = {
    "priority": "priority",
    "time_limit": "time_limit",
    "checkpoint": "time_limit",  # the checkpoint interval is longer than the new time limit
    "checkpoint.interval": "time_limit",
    "array": "max_running",
    "array.max_running": "max_running",
    "max_running": "max_running",
    "notify": "notify",
}
# The job page's "Email me when it" form says it was sent with this hidden input, so that
# boxes all unticked (which post nothing) mean "email about nothing".
NOTIFY_FORM = "notify_form"


def update_changes(post: Mapping[str, str], shown: Mapping[str, str]) -> dict[str, Any]:
    """The priority and time-limit form, or the "Email me when it" boxes -> update_job's
    changes: only the inputs whose value differs from what the form showed (its was_<name>
    fields, else `shown`), so a page left open does not put back what someone else has changed
    since. An empty time limit is the site's default; no box ticked is `notify: []`."""
    changes: dict[str, Any] = {}
    for name in ("priority", "time_limit"):
        if name in post:
            value = (post.get(name) or "").strip()
            if value != (post.get(f"was_{name}") or shown.get(name) or "").strip():
                changes[name] = (value or None) if name == "time_limit" else value
    if NOTIFY_FORM in post:
        # The boxes ticked when the page was drawn (was_notify, "" for none), else the job's.
        was = ticked(post, "was_notify") if "was_notify" in post else ticked(shown, "notify")
        now = ticked(post, "notify")
        if set(now) != set(was):
            changes["notify"] = now  # [] for nothing; the API names an unknown event
    return changes


def update_errors(detail: Any, *, array: bool) -> dict[str, list[str]]:
    """update_job's ValidationError -> the input each message belongs to; the array's limit
    only when the page shows its form (a task of an array), the rest above the forms."""
    out: dict[str, list[str]] = {}
    for path, messages in flatten_errors(detail).items():
        name = UPDATE_ERROR_FIELD.get(path, NON_FIELD)
        if name == "max_running" and not array:
            name = NON_FIELD
        if name == NON_FIELD and path != NON_FIELD:
            messages = [f"{path}: {m}" for m in messages]
        out.setdefault(name, []).extend(messages)
    return out


@dataclass(frozen=True)
class YamlLine:
    number: int
    text: str
    errors: tuple[str, ...] = ()
    gap: bool = False  # stands for lines left out between the errors' neighbourhoods


# A refused file is listed whole up to this many lines; past it, only the lines around its
# errors: each listed line is markup, and the textarea already echoes the text once.
LISTING_WHOLE = 200
LISTING_AROUND = 3
# A listed line is cut past this many characters, then "…" (the textarea holds it whole): a
# megabyte pasted on one line is not answered twice. Wider than echoes.py's 64 for a value,
# as the line is where the eye looks for the mistake: a command line or an env value whole.
LISTING_LINE_CHARS = 200


def yaml_listing(
    text: str, detail: Any, field_lines: Mapping[str, int], syntax: tuple[int | None, str] | None
) -> tuple[list[YamlLine], list[str]]:
    """The pasted text as numbered lines, each with the errors that point at it, and the errors
    that point at no line (a missing field). `syntax` is a YAML error's (line, message)."""
    by_line: dict[int, list[str]] = {}
    loose: list[str] = []
    lines = text.splitlines() or [""]
    if syntax is not None:
        line, message = syntax
        if line is not None and 1 <= line <= len(lines):
            # The listing says the line; YAML's message (the API's) says it too.
            by_line.setdefault(line, []).append(message.removeprefix(f"line {line}: "))
        else:
            loose.append(message)
    for path, messages in flatten_errors(detail or {}).items():
        line = field_lines.get(path.partition(".")[0])
        for message in messages:
            where = f"{path}: {message}"
            if line is not None:
                by_line.setdefault(line, []).append(where)
            else:
                loose.append(where)
    if len(lines) <= LISTING_WHOLE:
        shown = range(1, len(lines) + 1)
    else:
        near = {
            n
            for line in by_line
            for n in range(line - LISTING_AROUND, line + LISTING_AROUND + 1)
            if 1 <= n <= len(lines)
        }
        shown = sorted(near or range(1, LISTING_AROUND * 2 + 2))
    listing: list[YamlLine] = []
    previous = 0
    for i in shown:
        if i > previous + 1:
            listing.append(YamlLine(i - 1, "", gap=True))
        line = lines[i - 1]
        if len(line) > LISTING_LINE_CHARS:
            line = line[:LISTING_LINE_CHARS] + CUT
        listing.append(YamlLine(i, line, tuple(by_line.get(i, ()))))
        previous = i
    if previous < len(lines):
        listing.append(YamlLine(len(lines), "", gap=True))
    return listing, loose
