"""The simulator's input files (CLUSTER.json, JOBS.csv) parsed from text, and CSV text for
the files it writes.

Parsing is pure: the caller reads and writes the files. Every error names the file, the line and the
field, in one line, for the command's exit-2 message.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from json.scanner import py_make_scanner  # type: ignore[attr-defined]  # not in typeshed
from typing import Any

from . import mig
from .types import DEFAULT_PRIORITY_CLASSES, JobRequest, Node, PriorityClass, Quota, Team


class InputError(ValueError):
    """A bad input file: one line (the spec's exit-2 message), whatever the file's strings
    hold; a control character in a name is shown escaped."""

    def __init__(self, message: str) -> None:
        super().__init__(_CONTROL.sub(lambda m: repr(m.group())[1:-1], message))


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# What JOBS_OUT.csv and RUNS.csv separate node names and GPU indices with (`placement`:
# `node:0,1;node2:0`): a node name holding one would read back as other nodes.
_NODE_NAME_SEPARATORS = frozenset(";:,")


# Bounds that keep a simulation finite: a node's GPUs are indexed one by one (1e8 of them
# take gigabytes), and sums of times beyond ~1e308 overflow to inf, which JSON cannot hold.
MAX_NODE_GPUS = 1024
MAX_SECONDS = 1e12  # about 31,700 years
MIN_WEIGHT = 0.01


@dataclass(frozen=True)
class Cluster:
    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]
    priority_classes: tuple[PriorityClass, ...] = DEFAULT_PRIORITY_CLASSES


@dataclass(frozen=True)
class SimJob:
    request: JobRequest
    duration_s: float
    checkpoint_s: float | None = None


class _Object(dict[str, Any]):
    """A JSON object that knows its line and the line where each of its values starts."""

    line = 1
    value_lines: dict[str, int]
    # A key given twice: the key and where its second value starts (a text index).
    duplicate: tuple[str, int] | None = None


class _DuplicateKey(ValueError):
    def __init__(self, path: str, line: int) -> None:
        super().__init__(path, line)
        self.path, self.line = path, line


class _Array(list[Any]):
    """A JSON array that knows its line and the line where each of its items starts."""

    line = 1
    item_lines: list[int]


def _load_located(text: str) -> Any:
    """json.loads, with objects and arrays that know their lines (_Object, _Array), so that
    an error names the line of the bad value, not the first place its text appears.

    The value scanner is the json module's own pure-Python one, given hooks that note where
    each value starts: the C scanner offers none."""
    newlines = [i for i, c in enumerate(text) if c == "\n"]

    def line_at(index: int) -> int:
        return bisect_left(newlines, index) + 1

    decoder = json.JSONDecoder()
    base_object, base_array = decoder.parse_object, decoder.parse_array  # type: ignore[attr-defined]
    twice: list[_Object] = []

    def parse_object(
        s_and_end: tuple[str, int],
        strict: bool,
        scan_once: Callable[[str, int], tuple[Any, int]],
        object_hook: Any,
        object_pairs_hook: Any,
        memo: Any = None,
    ) -> tuple[_Object, int]:
        starts: list[int] = []

        def scan(s: str, idx: int) -> tuple[Any, int]:
            starts.append(idx)
            return scan_once(s, idx)

        pairs, end = base_object(s_and_end, strict, scan, None, list, memo)
        obj = _Object(pairs)
        obj.line = line_at(s_and_end[1] - 1)
        obj.value_lines = {k: line_at(i) for (k, _), i in zip(pairs, starts, strict=True)}
        if len(obj) != len(pairs):
            seen: set[str] = set()
            for (k, _), i in zip(pairs, starts, strict=True):
                if k in seen:
                    obj.duplicate = (k, i)
                    break
                seen.add(k)
            twice.append(obj)
        return obj, end

    def parse_array(
        s_and_end: tuple[str, int], scan_once: Callable[[str, int], tuple[Any, int]]
    ) -> tuple[_Array, int]:
        starts: list[int] = []

        def scan(s: str, idx: int) -> tuple[Any, int]:
            starts.append(idx)
            return scan_once(s, idx)

        items, end = base_array(s_and_end, scan)
        arr = _Array(items)
        arr.line = line_at(s_and_end[1] - 1)
        # The scanner is also called once past the last item of an empty array.
        arr.item_lines = [line_at(i) for i in starts[: len(items)]]
        return arr, end

    decoder.parse_object = parse_object  # type: ignore[attr-defined]
    decoder.parse_array = parse_array  # type: ignore[attr-defined]
    decoder.scan_once = py_make_scanner(decoder)  # type: ignore[attr-defined]
    data = decoder.decode(text)
    if twice:
        # json keeps the last of a key given twice; the other is silently lost (a CSV
        # column named twice is refused alike). The first one in the text is named.
        path, at = _first_duplicate(data)
        raise _DuplicateKey(path, line_at(at))
    return data


def _first_duplicate(data: Any) -> tuple[str, int]:
    """The path of the key given twice whose second value comes first in the text, and
    where that value starts."""
    found: tuple[int, str] | None = None
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, _Object):
            if value.duplicate is not None:
                key, at = value.duplicate
                if found is None or at < found[0]:
                    found = (at, f"{path}.{key}" if path else key)
            stack.extend((v, f"{path}.{k}" if path else k) for k, v in value.items())
        elif isinstance(value, _Array):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(value))
    assert found is not None
    return found[1], found[0]


def _integral(value: Any) -> int | None:
    """`value` as an integer if it is one: JSON has a single number type, so 8.0 and 1e3 are
    the integers 8 and 1000 written another way."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _line(container: Any, key: str | int | None = None) -> int:
    """The line of `container[key]` (of the container itself without a key; 1 if unknown)."""
    if isinstance(container, _Object):
        if isinstance(key, str) and key in container.value_lines:
            return container.value_lines[key]
        return container.line
    if isinstance(container, _Array):
        if isinstance(key, int) and 0 <= key < len(container.item_lines):
            return container.item_lines[key]
        return container.line
    return 1


class _JsonReader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str, line: int = 1) -> InputError:
        return InputError(f"{self.source}: line {line}, field {path}: {message}")

    def list_of(self, data: dict[str, Any], key: str, what: str) -> list[Any]:
        """`data[key]`, which must be a list when present (absent: empty)."""
        value = data.get(key, [])
        if not isinstance(value, list):
            raise self.fail(key, f"expected a list of {what}, got {value!r}", _line(data, key))
        return value

    def number(self, obj: dict[str, Any], key: str, path: str, *, minimum: float = 0) -> float:
        v = obj.get(key)
        if (
            isinstance(v, bool)
            or not isinstance(v, int | float)
            or v < minimum
            or not math.isfinite(v)
        ):
            raise self.fail(
                f"{path}.{key}", f"expected a number >= {minimum:g}, got {v!r}", _line(obj, key)
            )
        return float(v)


def parse_cluster(text: str, source: str) -> Cluster:
    try:
        data = _load_located(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{source}: line {e.lineno}, field -: invalid JSON ({e.msg})") from e
    except _DuplicateKey as e:
        raise InputError(f"{source}: line {e.line}, field {e.path}: key given twice") from None
    except (ValueError, RecursionError) as e:  # an integer too long to convert, deep nesting
        raise InputError(f"{source}: line 1, field -: invalid JSON ({e})") from None
    r = _JsonReader(source)
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise r.fail("nodes", "expected an object with a list of nodes", _line(data, "nodes"))
    nodes: list[Node] = []
    seen: set[str] = set()
    for i, raw in enumerate(data["nodes"]):
        path = f"nodes[{i}]"
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
            at = _line(raw, "name") if isinstance(raw, dict) else _line(data["nodes"], i)
            raise r.fail(f"{path}.name", "expected a non-empty string", at)
        name = raw["name"]
        if _NODE_NAME_SEPARATORS & set(name):
            raise r.fail(
                f"{path}.name",
                f"{name!r} holds ';', ':' or ',', which separate nodes and GPUs in the output",
                _line(raw, "name"),
            )
        if name in seen:
            raise r.fail(f"{path}.name", f"duplicate node {name!r}", _line(raw, "name"))
        seen.add(name)
        model = raw.get("gpu_model")
        if not isinstance(model, str) or not model:
            raise r.fail(
                f"{path}.gpu_model", "expected a non-empty string", _line(raw, "gpu_model")
            )
        gpus = _integral(raw.get("gpus"))
        if gpus is None or not 0 <= gpus <= MAX_NODE_GPUS:
            raise r.fail(
                f"{path}.gpus",
                f"expected an integer from 0 to {MAX_NODE_GPUS}, got {raw.get('gpus')!r}",
                _line(raw, "gpus"),
            )
        pool = raw.get("pool")
        if pool is not None and not isinstance(pool, str):
            raise r.fail(f"{path}.pool", "expected a string", _line(raw, "pool"))
        is_mig = raw.get("mig", False)
        if not isinstance(is_mig, bool):
            raise r.fail(f"{path}.mig", "expected true or false", _line(raw, "mig"))
        if is_mig and mig.geometry(model) is None:
            raise r.fail(f"{path}.mig", f"{model} has no MIG profile table", _line(raw, "mig"))
        nodes.append(Node(name, model, gpus, pool, is_mig))
    teams: list[Team] = []
    team_names: set[str] = set()
    listed_teams = r.list_of(data, "teams", "teams")
    for i, raw in enumerate(listed_teams):
        path = f"teams[{i}]"
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
            at = _line(raw, "name") if isinstance(raw, dict) else _line(listed_teams, i)
            raise r.fail(f"{path}.name", "expected a non-empty string", at)
        if raw["name"] in team_names:
            raise r.fail(f"{path}.name", f"duplicate team {raw['name']!r}", _line(raw, "name"))
        team_names.add(raw["name"])
        # The service's lower bound: Jain's index divides by the weight, and a weight of 0
        # (or 1e-300) entitles a team to nothing the index could measure.
        weight = r.number(raw, "weight", path, minimum=MIN_WEIGHT) if "weight" in raw else 1.0
        quotas = []
        quota = raw.get("quota", {})
        if not isinstance(quota, dict):
            raise r.fail(
                f"{path}.quota", "expected an object keyed by GPU model", _line(raw, "quota")
            )
        for model, q in quota.items():
            qpath = f"{path}.quota.{model}"
            if not isinstance(q, dict):
                raise r.fail(qpath, "expected an object with nominal", _line(quota, model))
            nominal = r.number(q, "nominal", qpath)
            limits: list[float | None] = []
            for key, default in (("borrowing_limit", 0.0), ("lending_limit", None)):
                if key not in q:
                    limits.append(default)
                elif q[key] is None:
                    limits.append(None)
                else:
                    limits.append(r.number(q, key, qpath))
            raw_max_jobs = q.get("max_running_jobs")
            max_jobs = None if raw_max_jobs is None else _integral(raw_max_jobs)
            # The service's PositiveIntegerField: below 0, no job of the team would ever start.
            if raw_max_jobs is not None and (max_jobs is None or max_jobs < 0):
                raise r.fail(
                    f"{qpath}.max_running_jobs",
                    f"expected an integer >= 0, got {raw_max_jobs!r}",
                    _line(q, "max_running_jobs"),
                )
            quotas.append(Quota(model, nominal, limits[0], limits[1], max_jobs))
        teams.append(Team(raw["name"], weight, tuple(quotas)))
    classes = DEFAULT_PRIORITY_CLASSES
    if "priority_classes" in data:
        parsed = []
        class_names: set[str] = set()
        listed = r.list_of(data, "priority_classes", "priority classes")
        for i, raw in enumerate(listed):
            path = f"priority_classes[{i}]"
            value = _integral(raw.get("value")) if isinstance(raw, dict) else None
            if not (
                isinstance(raw, dict)
                and isinstance(raw.get("name"), str)
                and value is not None
                and isinstance(raw.get("preemptible", True), bool)
            ):
                raise r.fail(
                    path,
                    "expected {name: str, value: int, preemptible: bool}",
                    _line(listed, i),
                )
            if raw["name"] in class_names:
                raise r.fail(
                    f"{path}.name",
                    f"duplicate priority class {raw['name']!r}",
                    _line(raw, "name"),
                )
            class_names.add(raw["name"])
            parsed.append(PriorityClass(raw["name"], value, raw.get("preemptible", True)))
        classes = tuple(parsed)
    return Cluster(tuple(nodes), tuple(teams), classes)


_REQUIRED = ("job_id", "team", "submit_s", "duration_s")
_COLUMNS = (
    *_REQUIRED,
    *("nodes", "gpus_per_node", "gpu_model", "mig_profile", "priority"),
    *("time_limit_s", "checkpoint_s"),
)
# ASCII only: str.isdigit() and float() also take other scripts' digits ("²" passes
# isdigit() and then fails int()), and float() takes "1_000".
_INTEGER = re.compile(r"[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def default_time_limit(duration_s: float) -> float:
    """`duration_s` rounded up to the next minute (at least one minute)."""
    return max(60.0, math.ceil(duration_s / 60.0) * 60.0)


class _CsvRow:
    def __init__(self, row: dict[str, str | None], line: int, source: str) -> None:
        self.row = row
        self.line = line
        self.source = source

    def fail(self, field: str, message: str) -> InputError:
        return InputError(f"{self.source}: line {self.line}, field {field}: {message}")

    def text(self, field: str) -> str:
        return (self.row.get(field) or "").strip()

    def required(self, field: str) -> str:
        value = self.text(field)
        if not value:
            raise self.fail(field, "a value is required")
        return value

    def number(
        self,
        field: str,
        default: float | None,
        minimum: float = 0.0,
        maximum: float = MAX_SECONDS,
    ) -> float | None:
        raw = self.text(field)
        if not raw:
            return default
        if not _NUMBER.fullmatch(raw):
            raise self.fail(field, f"expected a number, got {raw!r}")
        v = float(raw)
        if not math.isfinite(v) or not minimum <= v <= maximum:
            raise self.fail(
                field, f"expected a number from {minimum:g} to {maximum:g}, got {raw!r}"
            )
        return v

    def required_number(self, field: str) -> float:
        self.required(field)
        v = self.number(field, None)
        return 0.0 if v is None else v

    def integer(self, field: str, default: int, minimum: int) -> int:
        raw = self.text(field)
        if not raw:
            return default
        value: int | None = None
        try:
            if _INTEGER.fullmatch(raw):
                value = int(raw)
            elif _NUMBER.fullmatch(raw):  # `8.0`, as pandas writes a column with empty cells
                v = float(raw)
                value = int(v) if v.is_integer() else None
        except ValueError:  # more digits than int() converts
            value = None
        if value is None or value < minimum:
            raise self.fail(field, f"expected an integer >= {minimum}, got {raw!r}")
        return value


def _csv_rows(reader: csv.DictReader[str], source: str) -> Iterator[dict[str, str | None]]:
    """The reader's rows; what the csv module refuses (a field over its size limit) is an
    InputError naming the line."""
    try:
        yield from reader
    except csv.Error as e:
        raise InputError(
            f"{source}: line {reader.reader.line_num}, field -: invalid CSV ({e})"
        ) from None


def parse_jobs(text: str, source: str, classes: tuple[PriorityClass, ...]) -> list[SimJob]:
    # newline="": the csv module then finds every line end, a bare CR (Excel for Mac) too.
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = [name.strip() for name in reader.fieldnames or []]
    except csv.Error as e:
        raise InputError(f"{source}: line 1, field -: invalid CSV ({e})") from None
    # Stripped as the values are: `a, gpus_per_node` names the column, not an unknown one.
    reader.fieldnames = header
    for col in _REQUIRED:
        if col not in header:
            raise InputError(f"{source}: line 1, field {col}: required column is missing")
    for col in _COLUMNS:  # unknown columns are ignored, even two of one name
        if header.count(col) > 1:
            raise InputError(f"{source}: line 1, field {col}: column named twice")
    names = {c.name for c in classes}
    jobs: list[SimJob] = []
    seen: set[str] = set()
    for raw in _csv_rows(reader, source):
        row = _CsvRow(raw, reader.line_num, source)
        extra = raw.get(None)  # type: ignore[call-overload]  # DictReader's key for extras
        if extra:
            fields = len(header) + len(extra)
            raise row.fail("-", f"{fields} fields, the header names {len(header)}")
        job_id = row.required("job_id")
        if job_id in seen:
            raise row.fail("job_id", f"duplicate job id {job_id!r}")
        seen.add(job_id)
        team = row.required("team")
        submit = row.required_number("submit_s")
        duration = row.required_number("duration_s")
        nodes = row.integer("nodes", 1, 1)
        gpus_per_node = row.integer("gpus_per_node", 1, 0)
        profile = row.text("mig_profile") or None
        if profile is not None:
            try:
                mig.parse_profile(profile)
            except ValueError as e:
                raise row.fail("mig_profile", str(e)) from None
            if nodes != 1:
                raise row.fail("nodes", "a MIG job runs on exactly 1 node")
            gpus_per_node = 0
        priority = row.text("priority") or "normal"
        if priority not in names:
            known = ", ".join(sorted(names))
            raise row.fail("priority", f"unknown priority class {priority!r} (known: {known})")
        request = JobRequest(
            id=job_id,
            team=team,
            priority=priority,
            submit_time=submit,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            gpu_model=row.text("gpu_model") or None,
            mig_profile=profile,
            time_limit_s=row.number("time_limit_s", default_time_limit(duration), minimum=1e-9),
            kind="agent" if profile else "training",
        )
        jobs.append(SimJob(request, duration, row.number("checkpoint_s", None, minimum=1e-9)))
    return jobs


def csv_text(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A header row and the rows, as the simulator's CSV files hold them."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    w.writerows(rows)
    return buf.getvalue()
