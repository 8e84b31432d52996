#!/usr/bin/env python3
"""gpuq: the queue from a terminal, over the REST API (what sbatch, squeue, scancel and
`sky logs` are to their systems).

    gpuq submit job.yaml [--dry-run | -f] gpuq ls [--state running,pending] [--mine | --user bob]
    gpuq show ID                          gpuq logs ID [-f] [--stderr]
    gpuq cancel ID [ID ...] | --array ID  gpuq queue [--team vision] [--user bob]
    gpuq usage vision [--from 2026-11-01] [--to 2026-11-30]   gpuq me [--email ADDRESS]
    gpuq update ID [ID ...] | --array ID [--priority high] [--time-limit 30m] [--max-running 8]
                [--notify end,fail]

Configured by GPUQ_URL (default http://127.0.0.1:8000) and GPUQ_TOKEN (or a file named by
GPUQ_TOKEN_FILE), or --url and --token.
Exit status: 0 done, 1 the server or the network said no, 2 a usage error (and `submit -f`:
the job's own; 130 interrupted; 141 the reader of the output left, as `gpuq logs ID | head`).

Standard library only, so this one file runs wherever Python 3.11 does: the service serves
it at /cli/gpuq, and it imports nothing of the service (tests/service/test_cli.py checks).
"""

from __future__ import annotations

import argparse
import base64
import codecs
import functools
import http.client
import json
import math
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import IO, Any, NoReturn, TypeVar

DEFAULT_URL = "http://127.0.0.1:8000"
LOG_CHUNK = 1_048_576  # the API's largest log read
PAGE_MAX = 500  # the API's largest page of jobs
T = TypeVar("T")
MAX_IDEMPOTENCY_KEY = 128  # the API's (api/views.py)
FOLLOW_PATIENCE_S = 600.0  # how long `-f` waits out a service or cluster that does not answer
ENDED = frozenset({"succeeded", "failed", "cancelled", "timeout", "preempted", "lost"})


class CliError(Exception):
    """What the user is told on stderr before exit status 1. Transient: the service or its
    cluster did not answer (a 503 or 504, or no connection), so a later try may succeed.
    `status` is the server's HTTP status, and `detail` its own words, where it answered;
    `fields`, the fields of the request its answer refused (a 400's)."""

    def __init__(
        self,
        message: str,
        *,
        transient: bool = False,
        status: int | None = None,
        detail: str = "",
        fields: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(message)
        self.transient = transient
        self.status = status
        self.detail = detail
        self.fields = fields


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    # urllib follows a 301/302 for a POST as a GET without the body: a submit would turn
    # into a listing and the job would be lost without a word. Say where the server points.
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Api:
    """The REST API with a bearer token; every call has a timeout."""

    def __init__(self, url: str, token: str, timeout_s: float) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"GPUQ_URL must start with http:// or https://, not {url!r}")
        try:
            # What the resolver would refuse later, as a traceback: an empty label (a..b).
            (parts.hostname or "").encode("idna")
        except UnicodeError:
            raise ValueError(f"GPUQ_URL has no valid host name: {url!r}") from None
        self.base = url.rstrip("/") + "/api/v1/"
        self.token = token
        self.timeout_s = timeout_s
        self._opener = urllib.request.build_opener(_NoRedirects)
        self.retry_pauses_s: tuple[float, ...] = (0.5, 2.0)
        self.last_headers: Mapping[str, str] = {}

    def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | list[str]] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        url = self.base + path
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)  # a list: repeated
        request = urllib.request.Request(url, data=body, method=method)  # noqa: S310 (http(s) only: __init__)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if content_type:
            request.add_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        # A request that may be repeated (a read, or a submit with an Idempotency-Key) is
        # tried again when the network fails: a submit whose answer was lost then returns
        # the job it made instead of making a second one.
        repeatable = method == "GET" or "Idempotency-Key" in (headers or {})
        for pause in (*(self.retry_pauses_s if repeatable else ()), None):
            try:
                with self._opener.open(request, timeout=self.timeout_s) as response:
                    data = response.read()
                    self.last_headers = response.headers
                break
            except urllib.error.HTTPError as exc:
                message, from_gpuq, detail, fields = _http_error(exc)
                # A proxy's 502 (its own page, not gpuq's JSON: gpuq's says the cluster
                # refused) is the service restarting behind it, as a 504 is.
                transient = exc.code in (503, 504) or (exc.code == 502 and not from_gpuq)
                raise CliError(
                    message, transient=transient, status=exc.code, detail=detail, fields=fields
                ) from None
            # HTTPException: an answer cut short (a proxy dropped it), or no HTTP at all.
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                if pause is None:
                    why = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                    raise CliError(f"cannot reach {self.base}: {why}", transient=True) from None
                time.sleep(pause)
        try:
            return json.loads(data) if data else None
        except (ValueError, RecursionError):
            raise CliError(
                f"{url} answered with something other than JSON: is GPUQ_URL a gpuq service?"
            ) from None


def _http_error(exc: urllib.error.HTTPError) -> tuple[str, bool, str, frozenset[str]]:
    """What to tell of an HTTP error, whether its body was JSON (gpuq's own), what that
    body said, on one line, and the fields it named."""
    if 300 <= exc.code < 400:
        where = exc.headers.get("Location", "?")
        return (
            (
                f"the server answered {exc.code}, redirecting to {where};"
                " set GPUQ_URL to where it points"
            ),
            False,
            "",
            frozenset(),
        )
    try:
        raw = exc.read()
    except (OSError, http.client.HTTPException):  # the error's body was cut short
        raw = b""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return f"the server answered {exc.code} {exc.reason}", False, "", frozenset()
    said = _flatten(body)
    if exc.code == 401:
        return (
            f"not signed in: {said[0] if said else exc.reason} (check GPUQ_TOKEN)",
            True,
            "; ".join(said),
            frozenset(),
        )
    lines = "\n".join("  " + line for line in said)
    fields = frozenset(str(k) for k in body) - {"detail"} if isinstance(body, dict) else frozenset()
    return f"the server answered {exc.code}:\n" + lines, True, "; ".join(said), fields


def _flatten(body: Any, prefix: str = "") -> list[str]:
    """DRF's error bodies, one line per field: {"retries": {"max": ["..."]}} -> retries.max."""
    if isinstance(body, Mapping):
        if set(body) == {"detail"} and not prefix:
            return [clean(str(body["detail"]))]
        return [
            line
            for key, value in body.items()
            # The server echoes a field as it was written: an unknown one too.
            for line in _flatten(
                value, f"{prefix}.{clean(str(key))}" if prefix else clean(str(key))
            )
        ]
    if isinstance(body, list) and all(isinstance(v, str) for v in body):
        return [f"{prefix}: {clean(v)}" if prefix else clean(v) for v in body]
    if isinstance(body, list):
        return [line for i, v in enumerate(body) for line in _flatten(v, f"{prefix}[{i}]")]
    return [f"{prefix}: {clean(str(body))}" if prefix else clean(str(body))]


def clean(text: str) -> str:
    """Text other people chose (job names, reasons) as it may reach a terminal: control
    characters shown escaped, so a name cannot move the cursor, retitle the window or hide
    a line."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def job_id(value: str) -> str:
    """A job id as the API gives it. Checked here so nothing but a UUID is put in a path."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a job id: {value!r}") from None


def array_id(value: str) -> str:
    """A job array's id (a job's `array.id`), checked as a job id is."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an array id: {value!r}") from None


def array_limit(value: str) -> dict[str, int | None]:
    """--max-running N|none as the API's `array` change: at most N tasks at once, or none."""
    return {"max_running": None if value.strip().lower() == "none" else count(value)}


def notify_events(value: str) -> list[str] | str:
    """--notify end,fail | all | none, as the API's `notify` (the server checks the names)."""
    if value.strip().lower() == "none":
        return []
    if value.strip().lower() == "all":
        return "all"
    return [e.strip() for e in value.split(",") if e.strip()]


def comma_list(value: str) -> str:
    """A comma-separated filter as the API reads it: "running, pending" is running,pending."""
    return ",".join(part.strip() for part in value.split(",") if part.strip())


def _given_empty(namespace: Any, values: Any, option: Any) -> None:
    """Note a filter given an empty value: `ls` takes it as no filter, as the API does, but a
    command that acts refuses it (main): `--name "$PREFIX"` with PREFIX unset would widen
    its selection to every job the other filters match."""
    if not values:
        namespace.empty_filters = [*getattr(namespace, "empty_filters", []), option]


class AnyOf(argparse.Action):
    """A list filter given again selects jobs of any of its values, as the API's repeated
    parameter does (`--state pending --state suspended` is pending,suspended), not of the
    last one only. An empty value adds nothing: alone it is no filter, as the API's."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        _given_empty(namespace, values, option)
        before = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, ",".join(v for v in (before, values) if v) or None)


class AnyName(argparse.Action):
    """--name given again: names containing any of the texts, each sent as the API's
    repeated `name` (a comma in a name is text)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        _given_empty(namespace, values, option)
        before = getattr(namespace, self.dest, None) or []
        setattr(namespace, self.dest, [*before, values] if values else before or None)


ANY_OF = "A filter given again adds its values: --team a --team b is --team a,b."
USERS = "only jobs these users submitted, comma-separated (me: you), as squeue -u"


def count(value: str) -> int:
    try:
        size = int(value)
    except ValueError:
        size = 0
    if size < 1:
        raise argparse.ArgumentTypeError(f"a whole number from 1, not {value!r}")
    return size


# -- output --------------------------------------------------------------------------------


def table(rows: Sequence[Sequence[str]], out: IO[str]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=False)]
        print("  ".join([*cells, row[-1]]).rstrip(), file=out)


def when(value: str | None) -> str:
    if not value:
        return "-"
    moment = datetime.fromisoformat(value).astimezone()
    return moment.strftime("%Y-%m-%d %H:%M:%S %Z")


def age(value: str | None, now: datetime) -> str:
    if not value:
        return "-"
    seconds = max(0, int((now - datetime.fromisoformat(value)).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def gpus(job: Mapping[str, Any]) -> str:
    spec = job.get("spec") or {}
    if spec.get("mig_profile"):
        return f"mig {clean(str(spec['mig_profile']))}"
    nodes, per_node = spec.get("nodes", 1), spec.get("gpus_per_node", 0)
    return f"{nodes}x{per_node}" if nodes != 1 else str(per_node)


def job_name(job: Mapping[str, Any]) -> str:
    """The name, cleaned; a task of an array with its index, as Slurm shows it: sweep[7]."""
    array = job.get("array")
    return clean(job["name"]) + (f"[{array['index']}]" if array else "")


def why(job: Mapping[str, Any]) -> str:
    reason = job.get("reason") or {}
    return clean(str(reason.get("message", "")))


def duration(seconds: Any) -> str:
    """Seconds as the shortest exact form the API takes back: 7200 -> 2h, 90 -> 90s."""
    if not seconds:
        return "none"
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def index_ranges(indices: Iterable[int]) -> str:
    """Array indices as Slurm writes them, each run of consecutive ones as a range:
    [3, 5, 7, 8, 9] -> 3,5,7-9."""
    runs: list[list[int]] = []
    for index in sorted(set(indices)):
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in runs)


# -- commands ------------------------------------------------------------------------------


def cmd_submit(api: Api, args: argparse.Namespace, out: IO[str], now: datetime) -> int:
    try:
        body = sys.stdin.buffer.read() if args.file == "-" else _read(args.file)
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc.strerror}") from None
    # Editors on Windows save UTF-8 with a byte order mark, which the server's JSON refuses.
    body = body.removeprefix(codecs.BOM_UTF8)
    # A job file is YAML, or JSON, which goes as JSON: YAML reads most JSON, but not JSON
    # indented with tabs.
    try:
        json.loads(body)
        kind = "application/json"
    except RecursionError:  # JSON nested too deep to read here: the server says what is wrong
        kind = "application/json"
    except ValueError:
        kind = "application/yaml"
    # Always a key: a submit whose answer the network lost is sent again (Api.call), and
    # the server answers with the job the first one made.
    key = args.idempotency_key
    headers = {"Idempotency-Key": f"gpuq-cli-{uuid.uuid4()}" if key is None else key}
    if args.dry_run:
        result = api.call("POST", "jobs/preview/", body=body, content_type=kind)
        if args.json:
            return _dump(result, out)
        if result["starts_now"]:
            print("would start now", file=out)
        elif result.get("starts_soon"):  # the reason says what a submit would do first
            print(why(result), file=out)
        else:
            print(f"would wait: {why(result)}", file=out)
            if result.get("position"):
                print(f"position: {result['position']}", file=out)
            if result.get("estimated_start"):
                print(f"estimated start: {when(result['estimated_start'])}", file=out)
        return 0
    job = api.call("POST", "jobs/", body=body, content_type=kind, headers=headers)
    return _submitted(api, job, args, out)


def cmd_resubmit(api: Api, args: argparse.Namespace, out: IO[str], now: datetime) -> int:
    """A copy of a job (its spec, team and pinned cluster), submitted as you; --array: as an
    array of those indices; --failed: of the indices of its array's tasks that did not
    succeed (as `sbatch --array=3,17` after reading sacct)."""
    key = args.idempotency_key
    headers = {"Idempotency-Key": f"gpuq-cli-{uuid.uuid4()}" if key is None else key}
    indices = args.array
    if args.failed:
        array = (api.call("GET", f"jobs/{args.id}/") or {}).get("array")
        if not array:
            raise CliError(f"job {args.id} is not a task of an array: --failed needs one")
        tasks, _ = list_jobs(api, {"array": array["id"]}, None)
        failed = [t["array"]["index"] for t in tasks if t["state"] in ENDED - {"succeeded"}]
        if not failed:
            ended = sum(1 for t in tasks if t["state"] in ENDED)
            raise CliError(
                f"no task of array {array['id']} ended otherwise than succeeded"
                f" ({ended} of {len(tasks)} have ended)"
            )
        indices = index_ranges(failed)
    body = json.dumps({"array": indices}).encode() if indices is not None else None
    job = api.call(
        "POST",
        f"jobs/{args.id}/resubmit/",
        headers=headers,
        body=body,
        content_type="application/json" if body else None,
    )
    return _submitted(api, job, args, out)


def _submitted(api: Api, job: dict[str, Any], args: argparse.Namespace, out: IO[str]) -> int:
    if args.json:
        return _dump(job, out)
    print(f"{job['id']}  {job_name(job)}  {job['state']}", file=out)
    array: dict[str, Any] = job.get("array") or {}
    size = int(array.get("size", 1))
    if array:
        tasks = f"{size} task{'s' if size != 1 else ''}"
        print(
            f"the first of an array of {tasks} ({array['indices']}): gpuq ls --array {array['id']}",
            file=out,
        )
    if not args.follow:
        return 0
    # As `srun` or `sbatch --wait`: the output as it comes, then the job's own exit status.
    # An array's tasks run side by side and their outputs would interleave: only the first's
    # is followed, but the exit status is all of theirs, as `sbatch --wait`'s.
    if size > 1:
        print(
            f"gpuq: following the output of {job_name(job)} only; then waiting for all"
            f" {size} tasks to end",
            file=sys.stderr,
        )
    ended = [follow_job(api, job["id"], args.interval, out)]
    if size > 1:
        ended = wait_array(api, array["id"], args.interval)
    return exit_status(ended)


class Patience:
    """While following a job, a transient failure (the service restarting, or its cluster
    not answering a log read) is waited out, with pauses growing from the poll interval to
    30 s, for up to FOLLOW_PATIENCE_S in a row; the job runs on meanwhile. A user is told
    once per outage, on stderr, so the output stays the job's own."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.failing_since: float | None = None

    def __call__(self, call: Callable[[], T]) -> T:
        pause = max(self.interval_s, 0.1)
        while True:
            try:
                result = call()
            except CliError as exc:
                now = time.monotonic()
                if not exc.transient:
                    raise
                if self.failing_since is None:
                    self.failing_since = now
                    print(f"gpuq: {exc}; still following, trying again", file=sys.stderr)
                elif now - self.failing_since >= FOLLOW_PATIENCE_S:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 30.0)
                continue
            self.failing_since = None
            return result


def wait_array(api: Api, ident: str, interval_s: float) -> list[dict[str, Any]]:
    """The array's tasks once every one has ended, by index."""
    patiently = Patience(interval_s)
    while True:
        tasks, _ = patiently(lambda: list_jobs(api, {"array": ident}, None))
        if all(task["state"] in ENDED for task in tasks):
            return sorted(tasks, key=lambda task: int(task["array"]["index"]))
        time.sleep(interval_s)


def exit_status(jobs: Sequence[Mapping[str, Any]]) -> int:
    """0 if every job succeeded; otherwise how each other one ended, on stderr, and the highest
    exit status among them (as `sbatch --wait` for an array), or 1 where none has one."""
    status = 0
    for job in jobs:
        if job["state"] == "succeeded":
            continue
        code = job["exit_code"]
        # The local backend's reason is "exit code 7"; Slurm's, "NonZeroExitCode".
        details = [why(job)] if why(job) else []
        if code is not None and f"exit code {code}" not in why(job):
            details.append(f"exit code {code}")
        task = f" ({job_name(job)})" if job.get("array") else ""
        print(
            f"gpuq: job {job['id']}{task} ended {job['state']}:"
            f" {', '.join(details) or 'no reason given'}",
            file=sys.stderr,
        )
        status = max(status, code if isinstance(code, int) and 0 < code < 256 else 1)
    return status


def follow_job(api: Api, ident: str, interval_s: float, out: IO[str]) -> dict[str, Any]:
    """Write the job's stdout to `out` and its stderr to stderr as they come, until the job
    has ended and both are read out; return the job as it ended."""
    return follow_streams(api, ident, interval_s, {"stdout": out, "stderr": sys.stderr})


def follow_streams(
    api: Api, ident: str, interval_s: float, sinks: Mapping[str, IO[str]]
) -> dict[str, Any]:
    """Each stream to its sink as it comes, until the job has ended and they are read out;
    the job as it ended. The end is the job's state, not the logs' eof: a backend sees its
    process end before gpuq's next sync records it, and a lost job's log never ends. A new
    attempt (a requeue, a resume) writes a new log: the attempt being read is read to its
    end (`attempt_eof`: what it wrote last, often why it stopped), then the next from its
    start. The attempt each chunk was read from says which log an offset counts in (from
    an older server, whose chunks do not say, the job read before them)."""
    offsets = dict.fromkeys(sinks, 0)
    logs: dict[str, Any] = dict.fromkeys(sinks)  # the log each offset counts in
    state = None
    patiently = Patience(interval_s)

    def read_at(stream: str, offset: int, attempt: int | None) -> dict[str, Any]:
        query = _log_query(offset, stream, attempt)
        return patiently(functools.partial(api.call, "GET", f"jobs/{ident}/logs/", query=query))

    while True:
        job: dict[str, Any] = patiently(lambda: api.call("GET", f"jobs/{ident}/"))
        if job["state"] != state and job["state"] == "suspended":
            print(f"gpuq: job {ident} is suspended; following it once resumed", file=sys.stderr)
        state = job["state"]
        read = False
        for stream, sink in sinks.items():
            chunk, logs[stream] = _chunk_of_one_attempt(
                functools.partial(read_at, stream),
                offsets[stream],
                logs[stream],
                job["attempts"],
            )
            data = base64.b64decode(chunk["data_base64"])
            _write(data, sink)
            offsets[stream] = chunk["next_offset"]
            read = read or bool(data)
            if _attempt_read_out(chunk, logs[stream], job["attempts"], ident, stream):
                logs[stream], offsets[stream], read = (logs[stream][0] + 1, ""), 0, True
        if job["state"] in ENDED and not read:
            return job
        if not read:
            time.sleep(interval_s)


def _log_query(offset: int, stream: str, attempt: int | None) -> dict[str, str | int]:
    query: dict[str, str | int] = {"offset": offset, "limit": LOG_CHUNK, "stream": stream}
    if attempt is not None:
        query["attempt"] = attempt
    return query


def _attempt_read_out(
    chunk: Mapping[str, Any], log: tuple[Any, str], attempts: Any, ident: str, stream: str
) -> bool:
    """Whether the attempt `log` names is read to its end and the job has a later one (to
    be read next); a log its cluster no longer keeps is said to be gone."""
    if not (chunk.get("attempt_eof") and isinstance(log[0], int) and log[0] < attempts):
        return False
    if chunk.get("gone"):
        print(f"gpuq: attempt {log[0]}'s {stream} is gone from its cluster", file=sys.stderr)
    return True


def _chunk_of_one_attempt(
    read_at: Callable[[int, int | None], dict[str, Any]], offset: int, log: Any, unsaid: Any
) -> tuple[dict[str, Any], Any]:
    """The chunk at `offset`, counted in the log `log` names ((attempt, log_id), or None
    before the first read: then the latest attempt's), and the log it was read from. A
    chunk of another log (from a server that reads only the latest attempt, since a requeue;
    or a restart in place since the offset was counted) is read again from that log's
    start: at the old offset it would skip the new log's first bytes, or repeat them once
    the change was seen. A chunk that does not say its attempt (an older server) is taken
    to be of attempt `unsaid`."""
    while True:
        chunk = read_at(offset, None if log is None else log[0])
        said = (chunk.get("attempt", unsaid), chunk.get("log_id", ""))
        if said == log or offset == 0:
            return chunk, said
        offset, log = 0, said


def _write(data: bytes, sink: IO[str]) -> None:
    """The bytes as the job wrote them (decoded only where the stream takes no bytes)."""
    if not data:
        return
    raw = getattr(sink, "buffer", None)
    sink.flush()
    if raw is not None:
        raw.write(data)
        raw.flush()
    else:
        sink.write(data.decode("utf-8", errors="replace"))
        sink.flush()


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def cmd_ls(api: Api, args: argparse.Namespace, out: IO[str], now: datetime) -> int:
    jobs, more = list_jobs(api, _filters(args), None if args.all else args.limit)
    if args.json:
        return _dump(jobs, out)
    rows = [["ID", "NAME", "TEAM", "USER", "STATE", "GPUS", "AGE", "REASON"]]
    for job in jobs:
        rows.append(
            [
                job["id"],
                job_name(job),
                clean(job["team"]),
                clean(job["user"]),
                job["state"],
                gpus(job),
                age(job["submitted_at"], now),
                why(job) if job["state"] in ("pending", "suspended") else "",
            ]
        )
    table(rows, out)
    if more:
        print(f"(the {len(jobs)} newest shown; --limit N or --all for more)", file=out)
    return 0


FILTERS = ("state", "team", "name", "kind", "priority", "cluster", "array")


def _filters(args: argparse.Namespace) -> dict[str, str | int | list[str]]:
    query: dict[str, str | int | list[str]] = {
        n: getattr(args, n) for n in FILTERS if getattr(args, n, None)
    }
    users = [args.user] if args.user else []
    if args.mine:  # --user me
        users.append("me")
    if users:
        query["user"] = ",".join(users)
    return query


def list_jobs(
    api: Api, query: Mapping[str, str | int | list[str]], want: int | None
) -> tuple[list[Any], bool]:
    """Up to `want` jobs (all: None) that match, newest first, and whether more match. The
    API's pages hold at most 500: its cursor is followed until enough are read."""
    query = dict(query)
    jobs: list[Any] = []
    more = True
    while more and (want is None or len(jobs) < want):
        size = PAGE_MAX if want is None else min(PAGE_MAX, want - len(jobs))
        page = api.call("GET", "jobs/", query={**query, "page_size": size})
        jobs += page["results"]
        cursor = _cursor(page.get("next"))
        more = cursor is not None
        query["cursor"] = cursor or ""
    return jobs, more


def _cursor(next_url: str | None) -> str | None:
    """The cursor of a page's next link: only it is followed, not the link's host."""
    if not next_url:
        return None
    found = urllib.parse.parse_qs(urllib.parse.urlsplit(next_url).query).get("cursor")
    return found[0] if found else None


def cmd_queue(api: Api, args: argparse.Namespace, out: IO[str], now: datetime) -> int:
    query = {n: getattr(args, n) for n in ("team", "cluster", "user") if getattr(args, n)}
    jobs = api.call("GET", "queue/", query=query)
    total = api.last_headers.get("X-Total-Count", "")
    if args.json:
        return _dump(jobs, out)
    cut = total.isdigit() and int(total) > len(jobs)
    rows = [["POS", "ID", "NAME", "TEAM", "PRIORITY", "GPUS", "WAITED", "EST. START", "REASON"]]
    for tasks in queue_lines(jobs):
        job, name, reason = tasks[0], job_name(tasks[0]), why(tasks[0])
        if len(tasks) > 1:
            # An array's tasks held by its limit, as squeue shows them: sweep[3-11], with
            # the first of them (the next to go) for the other columns. The list's end may
            # have cut the last such line short.
            job = min(tasks, key=lambda task: task["array"]["index"])
            name = f"{clean(job['name'])}[{index_ranges(t['array']['index'] for t in tasks)}]"
            many = f"at least {len(tasks)}" if cut and tasks[-1] is jobs[-1] else str(len(tasks))
            reason = f"{many} tasks: {why(job)}"
        rows.append(
            [
                str(job["queue_position"] or "-"),
                job["id"],
                name,
                clean(job["team"]),
                clean(job["priority"]),
                gpus(job),
                age(job["submitted_at"], now),
                when(job["estimated_start"]),
                reason,
            ]
        )
    table(rows, out)
    if cut:
        print(f"(the first {len(jobs)} of {total} shown)", file=out)
    return 0


def queue_lines(jobs: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The queue's jobs as `gpuq queue` prints them: one line each, except the tasks held
    back by their array's limit (the %N of 0-99%10), one line per array where its first
    held task is."""
    lines: list[list[Mapping[str, Any]]] = []
    held: dict[str, list[Mapping[str, Any]]] = {}
    for job in jobs:
        reason = job.get("reason") or {}
        if not job.get("array") or reason.get("code") != "array_limit":
            lines.append([job])
        elif job["array"]["id"] in held:
            held[job["array"]["id"]].append(job)
        else:
            held[job["array"]["id"]] = [job]
            lines.append(held[job["array"]["id"]])
    return lines


def cmd_show(api: Api, args: argparse.Namespace, out: IO[str], now: datetime) -> int:
    job = api.call("GET", f"jobs/{args.id}/")
    events = api.call("GET", f"jobs/{args.id}/events/")
    if args.json:
        return _dump({**job, "events": events}, out)
    fields = [("id", job["id"]), ("name", job_name(job))]
    if job.get("array"):
        a = job["array"]
        fields.append(
            (
                "array",
                f"{a['id']} (index {a['index']} of {a['size']}, indices {clean(a['indices'])})",
            )
        )
    fields += [
        ("state", job["state"]),
        (
            "team",
            f"{clean(job['team'])} (user {clean(job['user'])}, priority {clean(job['priority'])})",
        ),
        ("gpus", gpus(job) + (f" {clean(job['gpu_model'])}" if job.get("gpu_model") else "")),
    ]
    if job["state"] == "pending":
        fields.append(("why", why(job) or "not considered yet"))
        if job.get("queue_position"):
            fields.append(("position", str(job["queue_position"])))
        if job.get("estimated_start"):
            fields.append(("estimated start", when(job["estimated_start"])))
    elif job["state"] == "suspended":
        fields.append(("why", why(job)))
    if job.get("cluster"):
        fields.append(("cluster", clean(job["cluster"])))
    if job.get("placement"):
        fields.append(("placement", ", ".join(map(_alloc, job["placement"]))))
    if job.get("exit_code") is not None:
        fields.append(("exit code", str(job["exit_code"])))
    if job["spec"].get("after"):
        fields.append(("after", ", ".join(_after(api, dep) for dep in job["spec"]["after"])))
    if job["spec"].get("notify"):
        fields.append(("notify", ", ".join(clean(str(e)) for e in job["spec"]["notify"])))
    fields += [("submitted", when(job["submitted_at"])), ("attempts", str(job["attempts"]))]
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        print(f"{name + ':':<{width + 1}}  {value}", file=out)
    print("events:", file=out)
    for e in events:
        state = e["to_state"] or ""
        print(f"  {when(e['at'])}  {state:<11}  {clean(e['message'])}{_repeats(e)}", file=out)
    return 0


def _repeats(event: dict[str, Any]) -> str:
    """A note repeated is one event that counts its repeats (a retry while a cluster stays
    down): how many, and when the last was, as the job page says it."""
    details = event.get("details") or {}
    repeats, last_at = details.get("repeats"), details.get("last_at")
    if not isinstance(repeats, int) or repeats < 2:
        return ""
    try:
        last = f", the last at {when(last_at)}" if isinstance(last_at, str) else ""
    except ValueError:  # not a time: left out
        last = ""
    return f" ({repeats} times{last})"


def _after(api: Api, ident: str) -> str:
    """A job this one runs after: its name and state; an array: its name, indices and size;
    only the id where you cannot see it."""
    try:
        ident = str(uuid.UUID(ident))  # nothing but a UUID goes in a path
        dep = api.call("GET", f"jobs/{ident}/")
    except ValueError:
        return clean(ident)
    except CliError:
        try:
            tasks, _ = list_jobs(api, {"array": ident}, 1)
        except CliError:
            return ident
        if not tasks:
            return ident
        array = tasks[0]["array"]
        name = f"{clean(tasks[0]['name'])}[{clean(array['indices'])}]"
        return f"array {name} ({array['size']} tasks, {ident})"
    return f"{job_name(dep)} ({dep['state']}, {ident})"


def _alloc(a: Mapping[str, Any]) -> str:
    """n1 GPUs 0,1 | n3 GPU 2 MIG 1g.10gb"""
    mig = a.get("mig")
    if mig:
        return f"{clean(a['node'])} GPU {mig['gpu']} MIG {clean(str(mig['profile']))}"
    return f"{clean(a['node'])} GPUs {','.join(map(str, a.get('gpus', [])))}"


def cmd_usage(api: Api, args: argparse.Namespace, out: IO[str], now: datetime) -> int:
    query = {name: getattr(args, name) for name in ("from", "to") if getattr(args, name)}
    usage = api.call("GET", f"teams/{args.team}/usage/", query=query)
    if args.json:
        return _dump(usage, out)

    def number(value: float) -> str:
        # In full, to the API's 4 decimals: `:g` would print 1105920 as 1.10592e+06.
        return f"{value:.4f}".rstrip("0").rstrip(".")

    print(
        f"team {usage['team']}, {usage['from']} to {usage['to']} (UTC days):"
        f" {number(usage['total_gpu_hours'])} GPU-hours",
        file=out,
    )
    if usage["users"]:
        rows = [["USER", "GPU-HOURS"]]
        rows += [[u["user"], number(u["gpu_hours"])] for u in usage["users"]]
        table(rows, out)
    rows = [["QUOTA", "IN USE", "NOMINAL", "BORROWING LIMIT", "BORROWED"]]
    for q in usage["quotas"]:
        limit = q["borrowing_limit_gpus"]
        rows.append(
            [
                clean(q["gpu_model"]),
                number(q["used_gpus"]),
                number(q["nominal_gpus"]),
                "unlimited" if limit is None else number(limit),  # null: no limit
                number(q["borrowed_gpus"]),
            ]
        )
    print(file=out)
    table(rows, out)
    return 0


def team_slug(value: str) -> str:
    """A team as the API names it (a slug). Checked here so nothing else is put in a path."""
    if not value or not all(c.isascii() and (c.isalnum() or c in "-_") for c in value):
        raise argparse.ArgumentTypeError(f"not a team slug: {value!r}")
    return value


def _interval(value: str) -> float:
    """A poll interval: seconds, more than 0 and finite (time.sleep refuses a negative)."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise argparse.ArgumentTypeError(f"not a positive number of seconds: {value!r}")
    return seconds


# What cancel, suspend and resume select by filters when no --state is given.
ACTS_ON = {
    "cancel": "pending,admitted,dispatching,queued,running,preempting,cancelling,suspending,"
    "suspended",
    "suspend": "pending,admitted,dispatching,queued,running,preempting",
    "resume": "suspended",
}


def cmd_stop_or_resume(api: Api, args: argparse.Namespace, out: IO[str], now: datetime) -> int:
    """cancel, suspend or resume (args.command) each job named, or each job the filters
    select (as `scancel -u me --name x`); each is reported. A selected job that ended after
    the list was read is said to have ended, not an error (scancel of an array passes over
    its finished tasks), and one resumed meanwhile (by another user or terminal) to have
    been resumed (a suspend of a job suspended meanwhile is the server's success); one the
    user may not change (a teammate's) is passed over, counted once on stderr. One named by
    its id is the server's to refuse."""
    failed = 0
    answers: list[Any] = []
    passed_over: list[CliError] = []
    for job in selected(api, args, ACTS_ON[args.command]):
        note = ""
        try:
            answer = api.call("POST", f"jobs/{job['id']}/{args.command}/")
        except CliError as exc:
            if _not_yours(args, exc):
                passed_over.append(exc)
                continue
            answer, note = (None, "") if args.ids else _meanwhile(api, args.command, job, exc)
            if answer is None:
                failed += 1
                print(f"gpuq: {job['id']}: {exc}", file=sys.stderr)
                continue
        answers.append(answer)
        if not args.json:
            print(f"{answer['id']}  {answer['state']}{note}", file=out)
    _say_passed_over(args.command, passed_over)
    if args.json:
        _dump(answers, out)
    return 1 if failed else 0


def _not_yours(args: argparse.Namespace, exc: CliError) -> bool:
    """Whether a job the filters selected is one the server says the user may not change (a
    teammate's: seen, not theirs): passed over, as scancel with filters leaves others' jobs.
    A job named by its id is the user's own request: its refusal is a failure."""
    return not args.ids and exc.status == 403 and bool(exc.detail)


def _say_passed_over(verb: str, refusals: Sequence[CliError]) -> None:
    """One line for the selected jobs passed over, in the server's words for the first."""
    if refusals:
        jobs = f"{len(refusals)} job{'s' if len(refusals) != 1 else ''}"
        print(f"gpuq: passed over {jobs} you may not {verb}: {refusals[0].detail}", file=sys.stderr)


def _meanwhile(
    api: Api, verb: str, listed: Mapping[str, Any], exc: CliError
) -> tuple[dict[str, Any] | None, str]:
    """A selected job the server refused to `verb`, read again, with a note on what became of
    it since the list was read: it ended, or (resume) it was resumed, being back in the queue
    or running, as asked. (None, "") otherwise, or unread: the refusal stands."""
    try:
        job: dict[str, Any] = api.call("GET", f"jobs/{listed['id']}/")
    except CliError:
        return None, ""
    state = job.get("state")
    if state in ENDED:
        return job, " (it had ended already)"
    # The server's 409 to resume a job no longer suspended. Suspended leaves only for pending
    # (a resume) or cancelled: listed suspended and now waiting or running, it was resumed.
    if (
        verb == "resume"
        and exc.status == 409
        and listed.get("state") == "suspended"
        and state in ACTS_ON["suspend"].split(",")
    ):
        return job, " (it was resumed already)"
    return None, ""


def selected(api: Api, args: argparse.Namespace, states: str) -> list[dict[str, Any]]:
    """The jobs args.ids names (as {"id": ...}), or those the filters select, in `states`
    unless --state says otherwise. main() saw to it: IDs or filters, not both, not neither."""
    if args.ids:
        return [{"id": ident} for ident in args.ids]
    jobs, _ = list_jobs(api, {"state": states, **_filters(args)}, None)
    if not jobs:
        print(f"gpuq: no job to {args.command} matches", file=sys.stderr)
    return jobs


# What update selects by filters when no --state is given: a priority or time limit changes
# only while a job waits (the server's 409 otherwise); an array's %N while any task is left.
UPDATE_WAITING = "pending,suspended"


def cmd_update(api: Api, args: argparse.Namespace, out: IO[str], now: datetime) -> int:
    """Change jobs' priority class or time limit while they wait, what they email about, or
    their arrays' limit of tasks at once (as `scontrol update`), each job reported. By
    filters without --state, each job is sent the changes its state allows (a started one
    only its --notify, its line saying what was kept). The %N goes once to every array a
    selected job is in: with the first of its jobs' changes that the job's state allows,
    else alone, by its first job selected (before that job's own changes, which the server
    refuses: a refused PATCH is not followed by the %N). A refusal of a value the request
    sets (an unknown priority class, a time limit that is no duration, a --notify refused
    for the account or the site) is said once, with how many more jobs it refused."""
    changes: dict[str, Any] = {}
    if args.new_priority is not None:
        changes["priority"] = args.new_priority
    if args.time_limit is not None:
        changes["time_limit"] = None if args.time_limit.lower() == "default" else args.time_limit
    while_waiting = tuple(changes)  # the changes a job's state allows only while it waits
    if args.notify is not None:  # until a job ends
        changes["notify"] = args.notify
    # By filters without --state, the started jobs are selected only if they have something
    # to carry: their notify (until they end), or their array's %N (at any time).
    anytime = not while_waiting or args.notify is not None or args.max_running is not None
    states = ACTS_ON["cancel"] if anytime else UPDATE_WAITING
    waiting = UPDATE_WAITING.split(",")
    named = bool(args.ids or args.state)  # sent what was asked: the server says what it refuses
    failed = 0
    answers: list[Any] = []
    tried = 0
    passed_over: list[CliError] = []
    refused: dict[str, CliError] = {}  # arrays whose task was not the user's, by id
    # A 400 only at fields of `changes` refuses their values (an unknown class, no duration,
    # past the site's limit), or for `notify` the site (it sends no email) or the owner (no
    # address): never the job, so every job it refuses is told it in the same words. Said
    # once, for the first; the rest counted. The job's own (its state's 409, its array's
    # "not a task of an array": the %N is no field of `changes`) are said per job.
    said_for: dict[str, str] = {}  # such a refusal -> the job it was said for
    alike: dict[str, int] = {}  # such a refusal -> how many more jobs it refused
    notify_refused: dict[str, str] = {}  # owner -> refusal: their other jobs are not sent it

    def patch(job: Mapping[str, Any], body: Mapping[str, Any], kept: str = "") -> bool:
        nonlocal failed, tried
        if "notify" in body and job.get("user") in notify_refused:
            failed += 1
            alike[notify_refused[job["user"]]] += 1
            return False
        tried += 1
        try:
            answer = api.call(
                "PATCH",
                f"jobs/{job['id']}/",
                body=json.dumps(body).encode(),
                content_type="application/json",
            )
        except CliError as exc:
            if _not_yours(args, exc):
                passed_over.append(exc)
                if job.get("array"):  # its tasks share their owner: so would they be
                    refused[job["array"]["id"]] = exc
                return False
            failed += 1
            if exc.status == 400 and exc.fields and exc.fields <= set(changes) & set(body):
                if exc.fields == {"notify"} and job.get("user"):
                    notify_refused[job["user"]] = str(exc)
                if str(exc) in said_for:
                    alike[str(exc)] += 1
                    return False
                said_for[str(exc)], alike[str(exc)] = job["id"], 0
            print(f"gpuq: {job['id']}: {exc}", file=sys.stderr)
            return False
        answers.append(answer)
        if not args.json:
            print(f"{answer['id']}  {job_name(answer)}  {updated(answer, body)}{kept}", file=out)
        return True

    def body_of(job: Mapping[str, Any]) -> dict[str, Any]:
        if named or job["state"] in waiting:
            return dict(changes)
        return {k: v for k, v in changes.items() if k not in while_waiting}

    def kept(job: Mapping[str, Any], body: Mapping[str, Any]) -> str:
        """What of the asked changes the job's state left out, and why."""
        left = [k.replace("_", " ") for k in while_waiting if k not in body]
        if not left:
            return ""
        return (
            f"; {' and '.join(left)} kept: it is {job['state']}, and a priority or time limit"
            " changes only while a job waits"
        )

    def allowed(job: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
        """Whether the job's state allows these changes (the server's 409 otherwise)."""
        state = job.get("state")
        if set(body) & set(while_waiting) and state not in waiting:
            return False
        return bool(body) and not ("notify" in body and state in ENDED)

    jobs: list[dict[str, Any] | CliError] = [*selected(api, args, states)]
    if args.max_running is not None and args.ids:
        jobs = [_job_or_error(api, ident) for ident in args.ids]  # its array and state decide
    # Arrays with a selected job whose own changes may carry the %N: only those jobs do.
    carried = {
        job["array"]["id"]
        for job in jobs
        if not isinstance(job, CliError) and job.get("array") and allowed(job, body_of(job))
    }
    limited: set[str] = set()  # arrays whose %N has been sent, with one of their tasks
    for job in jobs:
        if isinstance(job, CliError):
            failed += 1
            print(f"gpuq: {job}", file=sys.stderr)
            continue
        body, array = body_of(job), job.get("array")
        if array is not None and array["id"] in refused:
            passed_over.append(refused[array["id"]])
            continue
        if args.max_running is None:
            pass
        elif array is None:
            if not changes and args.ids:
                body["array"] = args.max_running  # the server says it is not in an array
        elif array["id"] in limited:
            pass
        elif array["id"] in carried:
            if allowed(job, body):
                body["array"] = args.max_running
        elif patch(job, {"array": args.max_running}):
            limited.add(array["id"])
        else:
            continue  # refused (not yours, or gone): so would its changes be
        if not body:
            continue  # only its array's %N, sent with another task (or by filters, in none)
        # Once done: a refused PATCH leaves it to the array's next task.
        if patch(job, body, kept(job, body)) and "array" in body and array is not None:
            limited.add(array["id"])
    if jobs and not tried and not failed and not passed_over:
        # selected only to carry a %N, and in no array
        print(f"gpuq: no job to {args.command} matches", file=sys.stderr)
    repeated = [(said_for[why], more) for why, more in alike.items() if more]
    for first, more in repeated:
        jobs_more = f"{more} more job{'s' if more != 1 else ''}"
        which = f" as {first}" if len(repeated) > 1 else ""  # one reason: the one above
        print(f"gpuq: {jobs_more} not updated, for the same reason{which}", file=sys.stderr)
    _say_passed_over(args.command, passed_over)
    if args.json:
        _dump(answers, out)
    return 1 if failed else 0


def _job_or_error(api: Api, ident: str) -> dict[str, Any] | CliError:
    try:
        job: dict[str, Any] = api.call("GET", f"jobs/{ident}/")
    except CliError as exc:
        return CliError(f"{ident}: {exc}")
    return job


def updated(job: Mapping[str, Any], sent: Mapping[str, Any]) -> str:
    """What the job now holds of what was sent: priority high, time limit 30m, array 0-15%8
    (at most 8 at once)."""
    said = []
    if "priority" in sent:
        said.append(f"priority {clean(str(job['priority']))}")
    if "time_limit" in sent:
        said.append(f"time limit {duration((job.get('spec') or {}).get('time_limit'))}")
    if "notify" in sent:
        events = (job.get("spec") or {}).get("notify") or ["nothing"]
        said.append("email on " + ",".join(clean(str(e)) for e in events))
    if "array" in sent and job.get("array"):
        array = job["array"]
        limit = array.get("max_running")
        most = "no limit" if limit is None else f"at most {limit} at once"
        said.append(f"array {clean(str(array['indices']))} ({most})")
    return ", ".join(said)


def cmd_logs(api: Api, args: argparse.Namespace, out: IO[str], now: datetime) -> int:
    """The job's output from the start; with -f, what follows too until the job ends (as
    `tail -f`, or `kubectl logs -f`), then exits as `submit -f` does: with the job's own
    status; --json: the API's chunks as read, in one list."""
    if args.json:
        return _dump(list(log_chunks(api, args.id, args.stream)), out)
    if args.follow:
        return exit_status([follow_streams(api, args.id, args.interval, {args.stream: out})])
    write_logs(api, args.id, args.stream, out)
    return 0


def log_chunks(api: Api, ident: str, stream: str) -> Iterator[dict[str, Any]]:
    """The API's answers for the log from offset 0 to the end of what there is; if the job
    moves to a new attempt meanwhile, the attempt being read is read to its end, then the
    next from its start (as `logs -f` reads them)."""

    def at(offset: int, attempt: int | None) -> dict[str, Any]:
        query = _log_query(offset, stream, attempt)
        chunk: dict[str, Any] = api.call("GET", f"jobs/{ident}/logs/", query=query)
        return chunk

    offset, log = 0, None
    while True:
        chunk, log = _chunk_of_one_attempt(at, offset, log, None)
        yield chunk
        offset = chunk["next_offset"]
        if chunk.get("attempt_eof") and not chunk["eof"]:
            attempts = api.call("GET", f"jobs/{ident}/")["attempts"]
            if _attempt_read_out(chunk, log, attempts, ident, stream):
                offset, log = 0, (log[0] + 1, "")
                continue
        if chunk["eof"] or chunk["next_offset"] == chunk["offset"]:
            return


def write_logs(api: Api, ident: str, stream: str, out: IO[str]) -> None:
    """Write the bytes as the job wrote them, from offset 0 until the end of what there is."""
    for chunk in log_chunks(api, ident, stream):
        _write(base64.b64decode(chunk["data_base64"]), out)
    if not chunk["eof"] and chunk["next_offset"] == 0:  # silence would look like an empty log
        state = api.call("GET", f"jobs/{ident}/")["state"]
        where = " on stderr" if stream == "stderr" else ""
        print(f"gpuq: no output yet{where} (the job is {state}); -f waits for it", file=sys.stderr)


def cmd_me(api: Api, args: argparse.Namespace, out: IO[str], now: datetime) -> int:
    """Who the token is, and the address a job's notify writes to (--email mails a link that
    sets it, or clears it)."""
    if args.email is not None:
        body = json.dumps({"email": args.email}).encode()
        me = api.call("PATCH", "me/", body=body, content_type="application/json")
    else:
        me = api.call("GET", "me/")
    if args.json:
        return _dump(me, out)
    teams = ", ".join(f"{clean(t['team'])} ({clean(t['role'])})" for t in me["teams"])
    print(f"user:   {clean(me['username'])}{' (site staff)' if me['is_staff'] else ''}", file=out)
    print(f"email:  {clean(me['email']) or 'none (a job cannot notify you)'}", file=out)
    print(f"teams:  {teams or 'none'}", file=out)
    if me.get("pending_email"):  # the link mailed to a new address: `email` is still the old
        print(clean(me["detail"]), file=out)
    return 0


def _dump(value: Any, out: IO[str]) -> int:
    json.dump(value, out, indent=2)
    out.write("\n")
    return 0


# -- the command line ----------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="gpuq",
        description="Submit and follow GPU jobs on a gpuq service.",
        epilog="GPUQ_URL and GPUQ_TOKEN configure the service and your API token"
        " (make one on your account page).",
    )
    top.add_argument("--url", help=f"the service (GPUQ_URL; default {DEFAULT_URL})")
    top.add_argument("--token", help="your API token (GPUQ_TOKEN, or GPUQ_TOKEN_FILE)")
    top.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default 30)")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Any, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(run=run)
        p.add_argument("--json", action="store_true", help="print the API's JSON")
        return p

    def submitting(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--idempotency-key",
            type=_idempotency_key,
            help="a repeat with the same key returns the first job (default: a new key per run)",
        )
        p.add_argument(
            "-f",
            "--follow",
            action="store_true",
            help="then print its output (stdout and stderr) until it ends, and exit with its"
            " exit status; an array: the first task's output, then wait for all its tasks and"
            " exit with the highest status (as sbatch --wait)",
        )
        p.add_argument("--interval", type=_interval, default=2.0, help=argparse.SUPPRESS)

    p = command("submit", cmd_submit, "submit a job file (YAML or JSON; - for stdin)")
    p.add_argument("file")
    p.add_argument("--dry-run", action="store_true", help="say whether it would start now")
    submitting(p)

    p = command("resubmit", cmd_resubmit, "submit a copy of a job (its file, team and cluster)")
    p.add_argument("id", type=job_id)
    indices = p.add_mutually_exclusive_group()
    indices.add_argument(
        "--array", metavar="INDICES", help="as an array of these indices instead (e.g. 3,17,40-45)"
    )
    indices.add_argument(
        "--failed",
        action="store_true",
        help="a task of an array: as an array of its array's tasks that ended otherwise than"
        " succeeded",
    )
    submitting(p)

    p = command("ls", cmd_ls, "your jobs and your teams', newest first")
    p.epilog = ANY_OF
    p.add_argument(
        "--state", type=comma_list, action=AnyOf, help="comma-separated, e.g. pending,running"
    )
    p.add_argument("--team", type=comma_list, action=AnyOf)
    p.add_argument("--kind", choices=["training", "agent"], action=AnyOf)
    p.add_argument("--priority", type=comma_list, action=AnyOf)
    p.add_argument("--cluster", type=comma_list, action=AnyOf)
    p.add_argument("--name", action=AnyName, help="names containing this text")
    p.add_argument("--user", type=comma_list, action=AnyOf, help=USERS)
    p.add_argument("--mine", action="store_true", help="only jobs you submitted (--user me)")
    p.add_argument(
        "--array",
        type=array_id,
        action=AnyOf,
        metavar="ID",
        help="only this job array's tasks (its id)",
    )
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--limit", type=count, default=50, help="the N newest (default 50)")
    shown.add_argument("--all", action="store_true", help="every job that matches")

    p = command(
        "queue",
        cmd_queue,
        "pending jobs in scheduling order, and why each waits"
        " (an array's tasks held back by its limit: one line, as sweep[3-11])",
    )
    p.add_argument("--team", type=comma_list, action=AnyOf)
    p.add_argument("--cluster", type=comma_list, action=AnyOf)
    p.add_argument("--user", type=comma_list, action=AnyOf, help=USERS)
    p.epilog = ANY_OF

    p = command("show", cmd_show, "one job: state, why it waits, placement, events")
    p.add_argument("id", type=job_id)

    p = command("logs", cmd_logs, "a job's output")
    p.add_argument("id", type=job_id)
    p.add_argument("-f", "--follow", action="store_true", help="until the job ends")
    p.add_argument("--stderr", dest="stream", action="store_const", const="stderr")
    p.add_argument("--interval", type=_interval, default=2.0, help=argparse.SUPPRESS)
    p.set_defaults(stream="stdout")

    p = command("me", cmd_me, "who your token is, your teams, and where notify writes to")
    p.add_argument(
        "--email",
        metavar="ADDRESS",
        help="have a link mailed to ADDRESS that makes it where jobs' notify writes to"
        " ('' clears it at once)",
    )
    p = command("usage", cmd_usage, "a team's GPU-hours per user and its quotas in use (admins)")
    p.add_argument("team", type=team_slug)
    p.add_argument("--from", help="the first UTC day, YYYY-MM-DD (default: 14 days to --to)")
    p.add_argument("--to", help="the last UTC day (default: today)")

    def selecting(p: argparse.ArgumentParser, verb: str, states: str) -> None:
        p.add_argument("ids", nargs="*", type=job_id, metavar="ID")
        p.epilog = ANY_OF
        p.add_argument(
            "--state",
            type=comma_list,
            action=AnyOf,
            help=f"with no IDs: comma-separated (default {states})",
        )
        p.add_argument(
            "--name",
            action=AnyName,
            help="with no IDs: jobs whose names contain this text",
        )
        p.add_argument("--team", type=comma_list, action=AnyOf)
        p.add_argument("--kind", choices=["training", "agent"], action=AnyOf)
        if verb != "update":  # there, --priority is the new one
            p.add_argument("--priority", type=comma_list, action=AnyOf)
        p.add_argument("--cluster", type=comma_list, action=AnyOf)
        p.add_argument("--user", type=comma_list, action=AnyOf, help=f"with no IDs: {USERS}")
        p.add_argument(
            "--mine", action="store_true", help="with no IDs: only jobs you submitted (--user me)"
        )
        p.add_argument(
            "--array",
            type=array_id,
            action=AnyOf,
            metavar="ID",
            help="with no IDs: this job array's tasks (its id), as `scancel ARRAY_ID`",
        )

    for verb, what in (
        ("cancel", "cancel jobs"),
        ("suspend", "take jobs out of the queue, or stop them (TERM first), until resumed"),
        ("resume", "put suspended jobs back in the queue"),
    ):
        p = command(verb, cmd_stop_or_resume, f"{what} (yours, or your team's as its admin)")
        selecting(p, verb, ACTS_ON[verb])

    p = command(
        "update",
        cmd_update,
        "change waiting jobs' priority or time limit, what jobs email about until they end"
        " (--notify), or their arrays' limit of tasks at once, as scontrol update (yours, or"
        " your team's as its admin)",
    )
    selecting(
        p,
        "update",
        f"all but ended ones; with --priority or --time-limit, {UPDATE_WAITING}, or all but"
        " ended ones if --notify or --max-running too, the started ones then sent only those",
    )
    p.add_argument(
        "--priority", dest="new_priority", metavar="CLASS", help="the new priority class, e.g. high"
    )
    p.add_argument(
        "--time-limit",
        metavar="T",
        help="the new time limit: seconds (a bare number), 90m, 2h, 30d, Slurm's MM:SS, HH:MM:SS,"
        " D-HH[:MM[:SS]] (10:00 is ten minutes, 1-0 a day), or default (the site's)",
    )
    p.add_argument(
        "--max-running",
        type=array_limit,
        metavar="N|none",
        help="its array's tasks at most N at once (the %%N of 0-15%%4), or none: no limit;"
        " sent once to each array a selected job is in, whatever the job's state",
    )
    p.add_argument(
        "--notify",
        type=notify_events,
        metavar="EVENTS|none",
        help="what to email its owner about until it ends: start,end,fail,requeue or all"
        " (as --mail-type), or none",
    )
    return top


def main(
    argv: Sequence[str] | None = None,
    *,
    environ: Mapping[str, str] = os.environ,
    out: IO[str] | None = None,
) -> int:
    top = parser()
    args = top.parse_args(argv)
    token = (args.token or environ.get("GPUQ_TOKEN", "")).strip()
    token_file = environ.get("GPUQ_TOKEN_FILE", "")
    if token_file and not args.token and "GPUQ_TOKEN" in environ:
        # As the service's own settings: which of two tokens was meant is no guess to make.
        _usage(top, "both GPUQ_TOKEN and GPUQ_TOKEN_FILE are set: set one of them")
    if not token and token_file:  # as the service's own secrets: VAR or VAR_FILE
        try:
            with open(token_file, encoding="utf-8-sig") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            _usage(top, f"GPUQ_TOKEN_FILE={token_file!r} cannot be read: {exc}")
    if not token:
        _usage(
            top,
            "no API token: set GPUQ_TOKEN (or GPUQ_TOKEN_FILE) or pass --token"
            " (your account page makes one)",
        )
    if any(not 33 <= ord(c) <= 126 for c in token):  # a header carries printable ASCII only
        _usage(top, "the API token holds a character a token cannot have (pasted from a document?)")
    url = args.url or environ.get("GPUQ_URL") or DEFAULT_URL
    if not 0 < args.timeout <= 3600:  # also refuses nan and inf, which sockets cannot take
        _usage(top, "--timeout must be more than 0 and at most 3600 seconds")
    acting = args.command in (*ACTS_ON, "update")
    if acting and getattr(args, "empty_filters", None):
        _usage(
            top,
            f"{args.command}: {args.empty_filters[0]}: an empty value selects no job"
            " (a variable unset?)",
        )
    if acting:  # a job named twice is acted on once, as `scancel 5 5`
        args.ids = list(dict.fromkeys(args.ids))
    if acting and bool(args.ids) == bool(_filters(args)):
        _usage(
            top,
            f"{args.command}: name jobs, or select them with filters (--mine, --name, --array, …)"
            + (": not both" if args.ids else ""),
        )
    changes = ("new_priority", "time_limit", "max_running", "notify")
    if args.command == "update" and all(getattr(args, c) is None for c in changes):
        _usage(
            top, "update: say what to change: --priority, --time-limit, --max-running or --notify"
        )
    following = args.command in ("submit", "resubmit") and args.follow
    if following and (args.json or getattr(args, "dry_run", False)):
        _usage(top, f"{args.command} -f prints the job's output: not with --json or --dry-run")
    if args.command == "logs" and args.follow and args.json:
        _usage(top, "logs -f prints the output as it comes: not with --json")
    try:
        api = Api(url, token, args.timeout)
    except ValueError as exc:
        _usage(top, str(exc))
    stream = out or sys.stdout
    if stream is sys.stdout and hasattr(sys.stdout, "reconfigure"):
        # A job name the terminal's encoding cannot show is escaped, not a crash for all.
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        try:
            code: int = args.run(api, args, stream, datetime.now(UTC))
        except CliError as exc:
            print(f"gpuq: {exc}", file=sys.stderr)
            code = 1
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            # JSON of another shape than gpuq's (another service behind GPUQ_URL): the
            # commands read answers as the API writes them (a time, fromisoformat's).
            print(
                f"gpuq: {api.base} answered JSON that is not a gpuq answer"
                f" ({type(exc).__name__}: {exc}): is GPUQ_URL a gpuq service?",
                file=sys.stderr,
            )
            code = 1
        # Here, not at the interpreter's exit: a reader that left (`gpuq ls | true`) is
        # then a BrokenPipeError below, not a traceback after main() returned.
        stream.flush()
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `gpuq logs ID | head`: the reader left. Stop quietly with SIGPIPE's status, as cat
        # does; stdout goes to /dev/null so the interpreter's last flush fails no more.
        if stream is sys.stdout:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _idempotency_key(value: str) -> str:
    """--idempotency-key as the server takes it (1 to 128 printable characters), in what an
    HTTP header carries (Latin-1). An empty one ("$KEY" unset) is refused, not replaced by
    a new key per run: a script's retry would submit twice."""
    key = value.strip()
    if not key or len(key) > MAX_IDEMPOTENCY_KEY or not key.isprintable():
        raise argparse.ArgumentTypeError(
            f"must be 1 to {MAX_IDEMPOTENCY_KEY} printable characters, not {value!r}"
        )
    try:
        key.encode("latin-1")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(
            f"must be Latin-1 characters (what an HTTP header carries), not {value!r}"
        ) from None
    return key


def _usage(top: argparse.ArgumentParser, message: str) -> NoReturn:
    top.error(message)


if __name__ == "__main__":
    sys.exit(main())
