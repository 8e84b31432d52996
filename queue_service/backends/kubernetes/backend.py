"""The Kubernetes backend: lightkube over HTTPS to one API server per cluster.

Every call has a timeout (request_timeout_s). Transient failures (429 honouring Retry-After,
5xx, dropped or refused connections, timeouts) are retried `max_retries` times with backoff,
then raised as BackendError(permanent=False); 400/401/403/404/413/422 and etcd's "request is
too large" (a 500) are permanent and carry the API server's own message (with the 422
causes)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import subprocess
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, NamedTuple, TypeVar
from urllib.parse import quote_plus

import httpx2
import msgspec
import yaml
from lightkube import ApiError, Client, KubeConfig, codecs
from lightkube import operators as ops
from lightkube.config.client_adapter import Client as AdapterClient
from lightkube.config.client_adapter import ConnectionParams, ExecAuth
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import UserExec
from lightkube.core.exceptions import ConfigError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import CascadeType, PatchType

from ..base import (
    BackendError,
    DispatchRequest,
    JobStatus,
    LogChunk,
    NodeInfo,
    PartialPoll,
    RemoteState,
    SubmitResult,
)
from .config import K8sSettings
from .inventory import (
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    inventory,
    node_mig_strategy,
    not_ready,
    unreachable,
)
from .manifests import (
    ATTEMPT_LABEL,
    COMPLETION_INDEX,
    CONTAINER,
    FINALIZER,
    JOB_ID_ANNOTATION,
    JOB_ID_LABEL,
    ROLE_LABEL,
    VOLCANO_API,
    ManifestError,
    ObjectRef,
    Plan,
    build,
    job_label_of,
    label_value,
)
from .status import (
    LIVE_PHASES,
    STOPPED_UNSTARTED,
    Observation,
    nodes_deleting,
    nodes_wanted,
    observe,
    started,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
Obj = dict[str, Any]

VolcanoJob = create_namespaced_resource("batch.volcano.sh", "v1alpha1", "Job", "jobs")
RESOURCES: dict[str, Any] = {"vcjob": VolcanoJob, "job": Job}
TRANSIENT_CODES = frozenset({408, 429, 500, 502, 503, 504})
# etcd refuses an object over --max-request-bytes and the API server answers 500
# (kubernetes#112152): retrying cannot help.
TOO_LARGE = "etcdserver: request is too large"
MIG_LAYOUT_STATES = ("pending", "rebooting", "success", "failed")
RELEASE_TRIES = 3
# How long the last Node list tells the nodes' state: the sync lists nodes just before its
# poll; a process that polls or stops jobs otherwise (a stop's worker) may hold a list of
# long ago. An older list is read again for the nodes that pods being deleted are on.
NODE_LIST_FRESH_S = 10.0
# A poll lists the jobs it follows by `gpuq.io/job-id in (...)`, a selector that travels in
# the URL: the API server reads 1 MiB of request line and headers (Go's MaxHeaderBytes, a
# 431 past it), httpx sends no query over 64 KiB, and proxies before an API server often
# take 8 KiB a line (nginx's default). So the ids go in pieces of at most this many bytes
# of selector as sent (about 100 UUIDs).
SELECTOR_MAX_BYTES = 4096
# httpx2's MAX_URL_LENGTH (_urlparse.py): the client refuses, with InvalidURL, a URL or any
# part of it (path, query) that is longer, before sending anything.
URL_MAX_CHARS = 65536
# The kubelet's log timestamp (timestamps=true): RFC3339 with a fixed-width fraction, then
# a space, at the start of every line (not of a line's later CRI entries: kubernetes#113481).
LOG_PREFIX = re.compile(
    rb"(?P<second>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?(?P<zone>Z|[+-]\d\d:\d\d) "
)
LOG_PODS_KEPT = 64  # pods whose log positions a backend remembers
LOG_CURSORS_KEPT = 128  # positions remembered per pod
LOG_MIN_READ = 64 * 1024
LOG_MAX_ANSWER = 8 * 1024 * 1024  # what one log answer may hold in memory (see _walk_log)
LOG_RESUME_MARGIN_S = 2  # see LogCursor.since_time
LOG_PROBE_MAX = 256 * 1024  # the most a probe for an anchor may send (see _walk_log)
LOG_STAMP_MAX = 64  # a stamp is shorter (31 bytes with nanoseconds and Z)
LOG_STREAMS_KEPT = 8  # answers for finished logs a backend keeps open (see _stream_log)
LOG_STREAM_IDLE_S = 120.0  # one kept this long without a read is closed
LOG_STREAM_CHUNK = 64 * 1024
# Reads of one log() that may find rank 0's pod deleted between the pod list and its log's
# GET (a stop, Volcano killing the gang to restart it): each lists the pods again.
LOG_POD_TRIES = 2


def _grace_period(grace_s: float) -> int:
    """Whole seconds, rounded up as the manifests round a stop grace: a DELETE's 0 is a
    force deletion (no TERM-then-wait), which only an explicit 0 asks for."""
    return max(math.ceil(grace_s), 0)


def load_config(settings: K8sSettings) -> SingleConfig:
    try:
        if settings.in_cluster:
            config = KubeConfig.from_service_account()
        else:
            config = KubeConfig.from_dict(yaml.safe_load(settings.kubeconfig or ""))
        single = config.get(settings.context)
    except (ConfigError, yaml.YAMLError, KeyError, TypeError, AttributeError, ValueError) as exc:
        raise BackendError(f"unusable kubeconfig: {exc}", permanent=True) from None
    if single is None:
        raise BackendError(f"kubeconfig has no context {settings.context!r}", permanent=True)
    return single


class BoundedExecAuth(ExecAuth):
    """lightkube's kubeconfig exec plugin auth (EKS's `aws eks get-token`, GKE's
    gke-gcloud-auth-plugin) with a timeout: lightkube waits for the plugin however long it
    hangs (a login waiting for a human, a stuck metadata server), inside a call that must be
    bounded. The token is reused until the API server answers 401, as lightkube does."""

    def __init__(self, exec_: UserExec, timeout_s: float) -> None:
        super().__init__(exec_)
        self._timeout_s = timeout_s

    def sync_auth_flow(
        self, request: httpx2.Request
    ) -> Generator[httpx2.Request, httpx2.Response, None]:
        if self._last_bearer:
            request.headers["Authorization"] = self._last_bearer
            response = yield request
            if response.status_code != 401:
                return
        command, env = self._prepare()
        what = f"kubeconfig exec plugin {command[0]}"
        try:
            # stdin from /dev/null: a plugin asking a question would wait for ever.
            done = subprocess.run(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self._timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ConfigError(f"{what} gave no token within {self._timeout_s:g} s") from None
        except OSError as exc:
            raise ConfigError(f"{what}: {exc}") from None
        if done.returncode != 0:
            stderr = done.stderr.decode(errors="replace").strip()[-500:]
            raise ConfigError(f"{what} exited with {done.returncode}: {stderr}")
        try:
            token = json.loads(done.stdout)["status"]["token"]
        except (ValueError, KeyError, TypeError):
            raise ConfigError(f"{what} printed no ExecCredential with a token") from None
        request.headers["Authorization"] = self._last_bearer = f"Bearer {token}"
        yield request


def _api_message(exc: ApiError) -> str:
    status = exc.status
    message = status.message
    causes = (status.details.causes if status.details else None) or []
    missing = [
        f"{c.field}: {c.message}" for c in causes if c.message and c.message not in (message or "")
    ]
    return "; ".join([message or f"HTTP {status.code}", *missing])


@dataclass(frozen=True)
class LogCursor:
    """A position in a container's log that a read can resume from: `into` bytes into the
    `run`-th of the consecutive lines stamped `stamp` (the kubelet's timestamp, as sent)."""

    stamp: bytes
    run: int
    into: int
    lead: int = 0  # bytes a sinceTime read sends before this line (its second's lines)
    # Inside a line that has not ended (a progress bar redrawn with \r), stamped only where
    # it starts: an answer to sinceTime=`anchor` (a whole second, Unix time) begins `at`
    # bytes into this line, with its entries stamped from then on (see _anchored).
    anchor: int = 0
    at: int = 0
    open: bool = False  # the log ended here when read, inside a line still being written

    def line_second(self) -> datetime:
        m = LOG_PREFIX.match(self.stamp + b" ")
        assert m is not None
        return datetime.fromisoformat((m["second"] + m["zone"]).decode())

    def since_time(self) -> str:
        """sinceTime for a read that starts at or before this position: the API server
        hands sinceTime to the kubelet in whole seconds (time.RFC3339), and the kubelet
        sends every entry stamped at or after it. LOG_RESUME_MARGIN_S earlier than the
        line's second: a line can follow a later-stamped one in the file (the runtime
        stamps an entry before it takes the log's write lock, so stderr and stdout cross;
        a clock stepped back), and such a line is sent only if the margin covers it."""
        if self.anchor:
            return _rfc3339(self.anchor)
        second = self.line_second() - timedelta(seconds=LOG_RESUME_MARGIN_S)
        return second.isoformat().replace("+00:00", "Z")

    def resent(self) -> int:
        """The bytes an answer to since_time() holds before this position."""
        return self.into - self.at if self.anchor else self.lead + self.into


def _rfc3339(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class LogLine(NamedTuple):
    stamp: bytes | None  # None: the unstamped tail of a line that began before sinceTime
    data: bytes
    lead: int  # bytes of the answer from its first line in this line's second to this line


class LogFormatError(Exception):
    """An answer to timestamps=true that is not one stamp per line."""


class PodGone(Exception):
    """A pod's log answered 404: the pod was deleted after it was listed."""


def split_stamped_log(body: bytes, *, resumed: bool, cut: bool) -> list[LogLine]:
    """Lines of a timestamps=true answer. A line that began before sinceTime comes without
    its stamp (its first entry was skipped), and only as the first; a stamp that limitBytes
    cut short is left out."""
    pieces = body.split(b"\n")
    lines: list[LogLine] = []
    at = 0  # where the piece starts in the answer
    second_at, second = 0, b""
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        if not last:
            piece += b"\n"
        elif not piece:
            break
        m = LOG_PREFIX.match(piece)
        if m is not None:
            if m["second"] != second and not (i == 1 and lines and lines[0].stamp is None):
                second_at, second = at, m["second"]
            second = m["second"]  # the zone stays the same within one log
            lines.append(LogLine(piece[: m.end() - 1], piece[m.end() :], at - second_at))
        elif i == 0 and resumed:
            lines.append(LogLine(None, piece, 0))
        elif last and cut:
            break
        else:
            raise LogFormatError(f"no timestamp at the start of line {i + 1}")
        at += len(piece)
    return lines


class StampedReader:
    """An answer to timestamps=true read as it arrives, in chunks of any size: the log's bytes
    with the stamps taken off (as split_stamped_log), and the position (a LogCursor) after
    the last byte handed out. Begun at `start` (the answer to start.since_time()), it first
    passes what the answer holds before that position; LookupError when the position is not
    in it (rotated away). Nothing is held but the chunk being read: a line of any length
    streams through."""

    def __init__(self, chunks: Iterator[bytes], start: LogCursor | None) -> None:
        self._chunks = chunks
        self._buf = b""
        self._i = 0  # the next unread byte of _buf
        self._done = False  # the answer has no more chunks
        self._resumed = start is not None
        self._sent = 0  # bytes of the answer read (stamps included)
        self._lines = 0  # lines begun in the answer
        self._first_unstamped = False
        self._second, self._second_at = b"", 0  # the second of the last stamp, where it began
        self._prev: bytes | None = None  # the stamp of the line before, as sent
        self._in_line = False  # inside a line, its newline not read yet
        self._stamp: bytes | None = None  # where the last byte handed out lies:
        self._run = self._into = self._lead = 0
        self._anchored: LogCursor | None = None  # in the line an anchored start is inside
        self.ended = False  # the answer (the log) ended
        if start is not None:
            self._seek(start)

    @property
    def cursor(self) -> LogCursor | None:
        """The position after the last byte passed or handed out (None before any line)."""
        unfinished = self.ended and self._in_line
        if self._anchored is not None:
            return dataclasses.replace(self._anchored, into=self._into, open=unfinished)
        if self._stamp is None:
            return None
        return LogCursor(self._stamp, self._run, self._into, self._lead, open=unfinished)

    def read(self, skip: int, want: int) -> tuple[bytes, int]:
        """Pass `skip` bytes, then take up to `want` (fewer only where the log ends): the
        bytes, and how many of `skip` were left when it ended (the position is past its end)."""
        out = bytearray()
        while skip or len(out) < want:
            piece = self._next(skip or want - len(out))
            if piece is None:
                break
            if skip:
                skip -= len(piece)
            else:
                out += piece
        return bytes(out), skip

    def _more(self, need: int) -> bool:
        """At least `need` unread bytes at hand, unless the answer ends first."""
        while len(self._buf) - self._i < need and not self._done:
            chunk = next(self._chunks, None)
            if chunk is None:
                self._done = True
            elif chunk:
                self._buf = self._buf[self._i :] + chunk
                self._i = 0
        return len(self._buf) - self._i >= need

    def _begin_line(self) -> None:
        self._more(LOG_STAMP_MAX)
        at = self._sent
        m = LOG_PREFIX.match(self._buf, self._i)
        if m is None:
            if self._lines or not self._resumed:
                raise LogFormatError(f"no timestamp at the start of line {self._lines + 1}")
            stamp = None  # the tail of a line that began before sinceTime
            self._first_unstamped = True
            lead = 0
        else:
            if m["second"] != self._second and not (self._lines == 1 and self._first_unstamped):
                self._second_at = at
            self._second = m["second"]
            stamp = self._buf[self._i : m.end() - 1]
            self._sent += m.end() - self._i
            self._i = m.end()
            lead = at - self._second_at
        self._run = self._run + 1 if self._lines and stamp == self._prev else 0
        self._prev = self._stamp = stamp
        self._into, self._lead, self._anchored = 0, lead, None
        self._lines += 1
        self._in_line = True

    def _next(self, most: int) -> bytes | None:
        """Up to `most` bytes from here, within one line; None where the answer ends."""
        if not self._in_line:
            if not self._more(1):
                self.ended = True
                return None
            self._begin_line()
        if not self._more(1):
            self.ended = True
            return None
        end = self._buf.find(b"\n", self._i, self._i + most)
        stop = end + 1 if end >= 0 else min(len(self._buf), self._i + most)
        piece = self._buf[self._i : stop]
        self._i = stop
        self._sent += len(piece)
        self._into += len(piece)
        self._in_line = not piece.endswith(b"\n")
        return piece

    def _seek(self, start: LogCursor) -> None:
        if start.anchor:
            # The answer begins inside the start's line, `at` bytes into it.
            if not self._more(1):
                raise LookupError(start)
            self._begin_line()
            if self._stamp is not None:
                raise LookupError(start)
            self._stamp, self._run, self._into = start.stamp, start.run, start.at
            self._anchored = start
            self._pass_within_line(start.into - start.at, start)
            return
        while True:
            if not self._more(1):
                raise LookupError(start)
            self._begin_line()
            if (self._stamp, self._run) == (start.stamp, start.run):
                self._pass_within_line(start.into, start)
                return
            while self._in_line:
                if self._next(LOG_MAX_ANSWER) is None:
                    raise LookupError(start)

    def _pass_within_line(self, n: int, start: LogCursor) -> None:
        while n:
            piece = self._next(n) if self._in_line else None
            if piece is None:
                raise LookupError(start)  # the line is shorter than when it was read
            n -= len(piece)


@dataclass(eq=False)
class _LogStream:
    """An answer for a finished log, kept open at `offset` (see _stream_log)."""

    key: tuple[str, str, str]
    response: httpx2.Response
    reader: StampedReader
    offset: int
    used: float

    def close(self) -> None:
        self.response.close()


def _cut(text: str, most: int = 200) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def _url_refused(exc: httpx2.InvalidURL) -> str:
    """Why the HTTP client refused to send a request."""
    if "too long" in str(exc):
        return (
            f"the request's URL is too long for the HTTP client ({URL_MAX_CHARS:,} characters"
            " of the URL or of any part of it): a name, namespace or selector far longer than"
            " Kubernetes takes"
        )
    return f"the request's URL cannot be sent: {_cut(str(exc))}"


def _retry_after(response: httpx2.Response | None) -> float | None:
    if response is None:
        return None
    value = response.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class KubernetesBackend:
    kind = "kubernetes"

    def __init__(
        self,
        settings: K8sSettings,
        config: SingleConfig,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        timeout = httpx2.Timeout(settings.request_timeout_s)
        # trust_env=False: proxy variables must not divert calls meant for the API server.
        self.client = Client(config=config, timeout=timeout, trust_env=False)
        self._raw = AdapterClient(config, ConnectionParams(timeout=timeout, trust_env=False))
        if config.user is not None and config.user.exec is not None:
            # lightkube offers no hook for the auth of its own httpx client: replaced in place.
            for http in (self.client._client._client, self._raw):
                http.auth = BoundedExecAuth(config.user.exec, settings.request_timeout_s)
        self._sleep = sleep
        self._clock = clock
        self._monotonic = monotonic  # for ages: a wall clock may step back
        # The names of every node of the last Node list (nodes(), which the sync calls just
        # before poll): a pod bound or pinned to a name missing there is looked for once more.
        self._node_names: frozenset[str] | None = None
        # Those of them the node lifecycle controller had marked unreachable (not Ready,
        # tainted node.kubernetes.io/unreachable): a pod being deleted there stays terminating;
        # and those tainted node.kubernetes.io/not-ready for their kubelet's NotReady.
        self._unreachable: frozenset[str] = frozenset()
        self._not_ready: frozenset[str] = frozenset()
        self._nodes_listed_at = 0.0  # self._monotonic's time of that list
        # The threads of a process share this backend (a stop's poll beside the sync): a GET
        # answered before a newer list was taken must not be written over that list.
        self._nodes_lock = threading.Lock()
        self._nodes_listed = 0  # lists taken so far
        # (namespace, pod, uid) -> log offset -> where that offset is: see logs().
        self._log_cursors: OrderedDict[tuple[str, str, str], dict[int, LogCursor]] = OrderedDict()
        self._log_lock = threading.Lock()
        # Answers for finished logs kept open where the last read left them (_stream_log),
        # and the timer that closes those left idle.
        self._log_streams: list[_LogStream] = []
        self._log_reaper: threading.Timer | None = None
        self._closed = False  # no answer is kept after close(), even by a read under way

    def close(self) -> None:
        with self._log_lock:
            self._closed = True
            streams, self._log_streams = self._log_streams, []
            if self._log_reaper is not None:
                self._log_reaper.cancel()
                self._log_reaper = None
        for stream in streams:
            stream.close()
        self.client.close()
        self._raw.close()

    # --- error handling -------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], T], *, passthrough: Sequence[int] = ()) -> T:
        """Run one API call with retries for transient failures. Status codes in
        `passthrough` are re-raised as ApiError for the caller to interpret."""
        last = ""
        for attempt in range(self.settings.max_retries + 1):
            delay = min(2.0**attempt * 0.5, self.settings.retry_after_cap_s)
            try:
                return fn()
            except ApiError as exc:
                code = exc.status.code or exc.response.status_code
                if code in passthrough:
                    raise
                if code not in TRANSIENT_CODES or TOO_LARGE in (exc.status.message or ""):
                    raise BackendError(f"{what}: {_api_message(exc)}", permanent=True) from None
                last = f"HTTP {code}: {_api_message(exc)}"
                delay = _retry_after(exc.response) or delay
            except httpx2.HTTPStatusError as exc:  # an error without a Status body (a proxy)
                code = exc.response.status_code
                if code not in TRANSIENT_CODES:
                    raise BackendError(f"{what}: HTTP {code}", permanent=True) from None
                last = f"HTTP {code}"
                delay = _retry_after(exc.response) or delay
            except httpx2.InvalidURL as exc:
                # Refused by the client before anything is sent (a name, namespace or selector
                # too long, or holding what a URL cannot): the same request would be again.
                raise BackendError(f"{_cut(what)}: {_url_refused(exc)}", permanent=True) from None
            except httpx2.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            except msgspec.DecodeError as exc:  # a proxy or a half-written answer
                last = f"unreadable answer: {exc}"
            except ConfigError as exc:
                # The kubeconfig's exec plugin failed (expired SSO, a binary missing, its
                # timeout): not retried in the call (it would take as long again), but a login
                # or a fix of the host may mend it without a change of the settings.
                raise BackendError(f"{what}: {exc}", permanent=False) from None
            except RuntimeError as exc:
                # httpx's "client has been closed": the registry replaced this backend (its
                # cluster's settings changed) while the call ran. The new backend retries.
                if "client has been closed" not in str(exc):
                    raise
                raise BackendError(f"{what}: {exc}", permanent=False) from None
            if attempt < self.settings.max_retries:
                self._sleep(min(delay, self.settings.retry_after_cap_s))
        raise BackendError(f"{what}: {last} (gave up after retries)", permanent=False)

    # --- submit ---------------------------------------------------------------------------

    def submit(self, job: DispatchRequest) -> SubmitResult:
        strategy = self._node_mig_strategy(job)
        try:
            plan = build(job, self.settings, strategy)
        except ManifestError as exc:
            raise BackendError(str(exc), permanent=True) from None
        # Only a retry can find an earlier workload of the attempt elsewhere; a first submit
        # saves the two cluster-wide lists (its own name's 409 still catches a duplicate).
        earlier = self._earlier_submit(job, plan.ref) if job.resubmit else None
        if earlier is None:
            created, adopted = self._create(plan.objects[0])
        else:
            ref, created = earlier
            if ref != plan.ref:
                plan = self._plan_beside(job, ref, created, strategy)
            adopted = True
        if created["metadata"].get("deletionTimestamp"):
            # Deleted on the cluster while the submit was in doubt (its TTL once it ended, an
            # admin): gpuq's finalizer holds it until a poll reports its end, and only a job
            # named is polled. Named, it is followed to that end; what it would own is not
            # made (the garbage collector deletes it with its owner).
            return SubmitResult(plan.ref.external_id, adopted=True)
        workload, *owned = plan.objects
        meta = created["metadata"]
        owner = {
            "apiVersion": workload["apiVersion"],
            "kind": workload["kind"],
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        for obj in owned:
            child = {**obj, "metadata": {**obj["metadata"], "ownerReferences": [owner]}}
            try:
                made, _ = self._create(child)
                if made["metadata"].get("deletionTimestamp"):  # no finalizer of gpuq's holds it
                    raise BackendError(
                        f"create {obj['kind']} {obj['metadata']['name']}: an earlier object is"
                        " still being deleted",
                        permanent=False,
                    )
            except BackendError as exc:
                if not exc.permanent:
                    raise
                # A job reported failed without an external id is never polled or stopped:
                # its workload must not run on.
                raise self._discard(plan.ref, created, exc) from None
        return SubmitResult(plan.ref.external_id, adopted=adopted)

    def _earlier_submit(
        self, job: DispatchRequest, planned: ObjectRef
    ) -> tuple[ObjectRef, Obj] | None:
        """The workload an earlier submit of this job attempt created, of either kind and in
        any namespace: a submit retried after its answer was lost may run on a backend rebuilt
        with other settings (`workload`, `namespace`), where the name's 409 would find only
        one of the same kind in the same namespace, and a second gang would start. One list
        per kind in all namespaces, by the attempt's labels; without the right to list in all
        namespaces (403), in the namespace these settings give. A kind the cluster does not
        serve (404: no Volcano) has none. Should there be more than one, the planned one is
        taken, else the oldest."""
        selector = {
            JOB_ID_LABEL: label_value(job.job_id),
            ATTEMPT_LABEL: str(job.attempt),
        }
        found: list[tuple[ObjectRef, Obj]] = []
        for kind, resource in RESOURCES.items():
            what = f"look for an earlier {kind} of job {job.job_id} attempt {job.attempt}"
            try:
                items = self._call(
                    what, partial(self._list_by, resource, "*", selector), passthrough=(403, 404)
                )
            except ApiError as exc:
                if (exc.status.code or exc.response.status_code) == 404:
                    continue  # the cluster does not serve this kind (no Volcano): none
                try:  # 403: no `list` in all namespaces; where these settings put it
                    items = self._call(
                        what,
                        partial(self._list_by, resource, planned.namespace, selector),
                        passthrough=(404,),
                    )
                except ApiError:
                    continue
            found += [
                (ObjectRef(o["metadata"]["namespace"], kind, o["metadata"]["name"]), o)
                for o in items
                if (o["metadata"].get("annotations") or {}).get(JOB_ID_ANNOTATION) == job.job_id
            ]
        if not found:
            return None
        found.sort(
            key=lambda f: (
                f[0] != planned,
                f[1]["metadata"].get("creationTimestamp", ""),
                f[0].name,
            )
        )
        return found[0]

    def _list_by(self, resource: Any, namespace: str, labels: Mapping[str, Any]) -> list[Obj]:
        return [
            o.to_dict() for o in self.client.list(resource, namespace=namespace, labels={**labels})
        ]

    def _plan_beside(
        self, job: DispatchRequest, ref: ObjectRef, workload: Obj, strategy: str | None
    ) -> Plan:
        """The plan for a workload an earlier submit made under other settings: built with its
        namespace and kind, so that what it owns (an Indexed Job's Service, perhaps never
        made: the answer was lost) is made beside it. The workload alone when no such plan
        names it."""
        settings = dataclasses.replace(
            self.settings,
            namespace=ref.namespace,
            workload="volcano" if ref.kind == "vcjob" else "indexed",
        )
        try:
            plan = build(job, settings, strategy)
        except ManifestError:
            return Plan(ref, (workload,))
        return plan if plan.ref == ref else Plan(ref, (workload,))

    def _node_mig_strategy(self, job: DispatchRequest) -> str | None:
        """The `nvidia.com/mig.strategy` label (GPU feature discovery's) of the node a MIG
        job is placed on: one GET. None (the cluster's `mig_strategy` applies) for a node
        without it, or gone: its pod would wait in vain either way."""
        if not job.mig_profile or not job.placement:
            return None
        name = job.placement[0].node
        try:
            node = self._call(
                f"get node {name}", lambda: self.client.get(Node, name), passthrough=(403, 404)
            ).to_dict()
        except ApiError:  # gone, or no `get` on nodes (inventory needs only `list`)
            return None
        return node_mig_strategy(node)

    def _discard(self, ref: ObjectRef, workload: Obj, cause: BackendError) -> BackendError:
        """Delete a workload whose submit failed for good, with gpuq's finalizer, so it goes
        at once. Best effort: `cause` is what the caller reports, naming a failed cleanup."""
        try:
            self._delete(ref, grace_s=0)
            self._release(ref, workload)
        except BackendError as exc:
            return BackendError(
                f"{cause}; deleting {ref.external_id} also failed ({exc}): delete it by hand",
                permanent=True,
            )
        return cause

    def _create(self, obj: Obj) -> tuple[Obj, bool]:
        """Create, or adopt what an earlier interrupted call created (409 AlreadyExists),
        even one being deleted."""
        kind = obj["kind"]
        model: Any = (
            VolcanoJob.from_dict(obj) if obj["apiVersion"] == VOLCANO_API else codecs.from_dict(obj)
        )
        resource: Any = type(model)
        what = f"create {kind} {obj['metadata']['namespace']}/{obj['metadata']['name']}"
        try:
            made = self._call(what, lambda: self.client.create(model), passthrough=(409,))
            return made.to_dict(), False
        except ApiError as exc:
            if exc.status.reason != "AlreadyExists":
                raise BackendError(f"{what}: {_api_message(exc)}", permanent=False) from None
        existing = self._call(
            f"get {kind}",
            lambda: self.client.get(
                resource, obj["metadata"]["name"], namespace=obj["metadata"]["namespace"]
            ),
        ).to_dict()
        theirs = (existing["metadata"].get("labels") or {}).get(JOB_ID_LABEL)
        if theirs != obj["metadata"]["labels"][JOB_ID_LABEL]:
            raise BackendError(f"{what}: the name is taken by another object", permanent=True)
        return existing, True  # perhaps being deleted: the caller decides

    # --- poll -----------------------------------------------------------------------------

    def poll(self, external_ids: Sequence[str]) -> dict[str, JobStatus]:
        """Per namespace: one list per workload kind in use plus one list of pods, each of the
        polled jobs alone (_read_namespace; never one GET per job). What is seen is acted
        on: a workload that must stop is deleted, and an end once reported releases gpuq's
        finalizer."""
        out: dict[str, JobStatus] = {}
        failures: list[tuple[str, BackendError]] = []
        for eid, (ref, obj, seen, _) in self._observe(external_ids, failures).items():
            if ref is not None and seen.stop:
                self._delete(ref, grace_s=0)
            if ref is not None and obj is not None and seen.status.state in RemoteState.TERMINAL:
                self._release(ref, obj)
            out[eid] = seen.status
        if failures:
            if not out:
                raise failures[0][1]  # nothing was read: the error as it is
            # Namespaces are granted apart (a RoleBinding each): one gpuq may not read leaves
            # its jobs unknown, and every other namespace's are still followed.
            raise PartialPoll(
                "; ".join(
                    f"jobs in the namespace {ns} not read: {e.message}" for ns, e in failures
                ),
                out,
                permanent=all(e.permanent for _, e in failures),
            )
        return out

    def _observe(
        self,
        external_ids: Sequence[str],
        failures: list[tuple[str, BackendError]] | None = None,
    ) -> dict[str, tuple[ObjectRef | None, Obj | None, Observation, list[Obj]]]:
        """What poll sees (and the workload's pods), with no action taken. Given `failures`,
        a namespace whose lists fail is added to it and its jobs left out; without, the
        error is raised."""
        out: dict[str, tuple[ObjectRef | None, Obj | None, Observation, list[Obj]]] = {}
        refs: dict[str, list[ObjectRef]] = defaultdict(list)
        for eid in external_ids:
            try:
                ref = ObjectRef.parse(eid)
            except ValueError as exc:
                out[eid] = (
                    None,
                    None,
                    Observation(JobStatus(eid, RemoteState.LOST, reason=str(exc))),
                    [],
                )
                continue
            refs[ref.namespace].append(ref)
        now = self._clock()
        found: list[tuple[ObjectRef, Obj | None, list[Obj]]] = []
        for namespace, ns_refs in sorted(refs.items()):
            try:
                objects, ns_pods = self._read_namespace(namespace, ns_refs)
            except BackendError as exc:
                if failures is None:
                    raise
                failures.append((namespace, exc))
                continue
            pods_by_owner: dict[str, list[Obj]] = defaultdict(list)
            for pod in ns_pods:
                for owner in pod["metadata"].get("ownerReferences") or []:
                    pods_by_owner[owner.get("uid", "")].append(pod)
            for ref in ns_refs:
                obj = objects.get((ref.kind, ref.name))
                found.append(
                    (ref, obj, pods_by_owner.get(obj["metadata"]["uid"], []) if obj else [])
                )
        gone, unreachable_nodes, not_ready_nodes = self._node_states(
            [pod for _, _, pods in found for pod in pods]
        )
        for ref, obj, pods in found:
            seen = observe(
                ref.external_id,
                ref.kind,
                obj,
                pods,
                now=now,
                image_pull_grace_s=self.settings.image_pull_grace_s,
                gone_nodes=gone,
                unreachable_nodes=unreachable_nodes,
                not_ready_nodes=not_ready_nodes,
            )
            out[ref.external_id] = (ref, obj, seen, pods)
        return out

    def _read_namespace(
        self, namespace: str, refs: Sequence[ObjectRef]
    ) -> tuple[dict[tuple[str, str], Obj], list[Obj]]:
        """The workloads `refs` name, by (kind, name), and their pods: one list per workload
        kind and one of pods, each selecting these jobs by `gpuq.io/job-id in (...)` (in
        pieces: _list), never every gpuq workload of the namespace, where finished ones stay
        for ttl_after_finished_s with their pods. The job id is read back from the name; one
        the name does not give (an id gpuq had to hash) is read with a GET of its workload,
        whose label then selects its pods."""
        objects: dict[tuple[str, str], Obj] = {}
        ids: dict[str, set[str]] = defaultdict(set)
        unnamed: list[ObjectRef] = []
        for ref in refs:
            label = job_label_of(ref.name)
            if label is None:
                unnamed.append(ref)
            else:
                ids[ref.kind].add(label)
        for kind in sorted(ids):
            for item in self._list(RESOURCES[kind], namespace, ids[kind]):
                objects[(kind, item["metadata"]["name"])] = item
        pod_ids = set().union(*ids.values())
        for ref in unnamed:
            try:
                obj = self._call(
                    f"get {ref.external_id}",
                    partial(self.client.get, RESOURCES[ref.kind], ref.name, namespace=namespace),
                    passthrough=(404,),
                ).to_dict()
            except ApiError:
                continue  # gone
            objects[(ref.kind, ref.name)] = obj
            label = (obj["metadata"].get("labels") or {}).get(JOB_ID_LABEL)
            if label:
                pod_ids.add(label)
        return objects, self._list(Pod, namespace, pod_ids)

    def _node_states(
        self, pods: Sequence[Obj]
    ) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
        """(gone, unreachable, not ready) among the nodes these pods run on or wait for.
        Gone: no longer exists (deleted: a failure, a scale-down). Looked up in the last Node
        list (the sync's nodes(), just before its poll): no call at all while every node is
        there; a name missing from it is looked for with one GET (it may have joined since),
        or, without a list yet or without `get` on nodes, in a new list. The same list (or
        GET) tells which nodes are unreachable or NotReady; a list older than
        NODE_LIST_FRESH_S is read again (one GET each) for the nodes that pods being deleted
        are on, the only pods whose reading depends on it. A look that fails finds none gone,
        and takes none of the nodes it was to read again for unreachable or NotReady (the
        next poll looks again; the jobs' own states are reported meanwhile)."""
        wanted = nodes_wanted(pods)
        if not wanted:
            return frozenset(), self._unreachable, self._not_ready
        known = self._node_names
        recheck: frozenset[str] = frozenset()
        gone: set[str] = set()
        try:
            if known is None:
                return wanted - self._list_node_names(), self._unreachable, self._not_ready
            if self._monotonic() - self._nodes_listed_at >= NODE_LIST_FRESH_S:
                recheck = nodes_deleting(pods)
            for name in sorted((wanted - known) | recheck):
                listed = self._nodes_listed
                try:
                    node = self._call(
                        f"get node {name}",
                        partial(self.client.get, Node, name),
                        passthrough=(403, 404),
                    ).to_dict()
                except ApiError as exc:
                    if exc.status.code != 404:  # no `get` on nodes: a list tells as well
                        gone = set(wanted - self._list_node_names())
                        break
                    gone.add(name)
                    self._forget_node(name, listed)
                else:
                    self._remember_node(node, listed)
        except BackendError:
            return frozenset(), self._unreachable - recheck, self._not_ready - recheck
        # A list taken meanwhile (another thread's) is newer than these GETs.
        gone -= self._node_names or frozenset()
        return frozenset(gone), self._unreachable, self._not_ready

    def _list_node_names(self) -> frozenset[str]:
        self._list_nodes()
        assert self._node_names is not None
        return self._node_names

    def _list_nodes(self) -> list[Obj]:
        at = self._monotonic()
        listed = self._call("list nodes", lambda: [n.to_dict() for n in self.client.list(Node)])
        with self._nodes_lock:
            self._node_names = frozenset(n["metadata"]["name"] for n in listed)
            self._unreachable = frozenset(n["metadata"]["name"] for n in listed if unreachable(n))
            self._not_ready = frozenset(n["metadata"]["name"] for n in listed if not_ready(n))
            self._nodes_listed_at = at
            self._nodes_listed += 1
        return listed

    def _remember_node(self, node: Obj, listed: int) -> None:
        """One node as a GET found it, in place of what the last list said of it, unless a
        list was taken since the GET was sent (`listed`: the lists taken then)."""
        name = node["metadata"]["name"]
        with self._nodes_lock:
            if self._nodes_listed != listed:
                return
            self._node_names = (self._node_names or frozenset()) | {name}
            self._unreachable = (self._unreachable - {name}) | (
                {name} if unreachable(node) else set()
            )
            self._not_ready = (self._not_ready - {name}) | ({name} if not_ready(node) else set())

    def _forget_node(self, name: str, listed: int) -> None:
        """A GET found no such node: as _remember_node."""
        with self._nodes_lock:
            if self._nodes_listed != listed:
                return
            if self._node_names is not None:
                self._node_names = self._node_names - {name}
            self._unreachable = self._unreachable - {name}
            self._not_ready = self._not_ready - {name}

    def _release(self, ref: ObjectRef, obj: Obj) -> None:
        """Drop gpuq's finalizer once the end is reported, so a cancelled workload (held
        with a deletionTimestamp until now) goes, and a finished one can expire (TTL).

        A JSON patch that tests the finalizer's index, then removes it, with no
        resourceVersion precondition: poll's own delete and the garbage collector change the
        workload after it was listed, and a job reported ended is never polled again. A list
        that moved meanwhile (422) is read again; if it keeps moving, the poll fails and is
        retried whole."""
        for _ in range(RELEASE_TRIES):
            finalizers = obj["metadata"].get("finalizers") or []
            if FINALIZER not in finalizers:
                return
            path = f"/metadata/finalizers/{finalizers.index(FINALIZER)}"
            patch = [
                {"op": "test", "path": path, "value": FINALIZER},
                {"op": "remove", "path": path},
            ]
            try:
                self._patch_json(ref, patch)
                return
            except ApiError as exc:
                if exc.status.code == 404:
                    return
            try:
                obj = self._call(
                    f"get {ref.external_id}",
                    lambda: self.client.get(
                        RESOURCES[ref.kind], ref.name, namespace=ref.namespace
                    ).to_dict(),
                    passthrough=(404,),
                )
            except ApiError:
                return
        raise BackendError(
            f"release {ref.external_id}: its finalizers kept changing", permanent=False
        )

    def _patch_json(self, ref: ObjectRef, patch: list[dict[str, Any]]) -> None:
        self._call(
            f"release {ref.external_id}",
            lambda: self.client.patch(
                RESOURCES[ref.kind],
                ref.name,
                patch,
                namespace=ref.namespace,
                patch_type=PatchType.JSON,
            ),
            passthrough=(404, 409, 422),
        )

    def _list(self, resource: Any, namespace: str, job_ids: Iterable[str]) -> list[Obj]:
        """The objects of these jobs (by their `gpuq.io/job-id`), in as many lists as the
        selector's bound asks (selector_pieces)."""
        out: list[Obj] = []
        for piece in selector_pieces(sorted(job_ids)):
            out += self._call(
                f"list {resource.__name__} in {namespace}",
                partial(self._list_by, resource, namespace, {JOB_ID_LABEL: ops.in_(piece)}),
            )
        return out

    # --- cancel ---------------------------------------------------------------------------

    def cancel(self, external_id: str, grace_s: float = 30.0) -> bool:
        """False, deleting nothing, when the workload had already ended by itself (as Slurm's
        cancel): looked at first, with nothing acted on, so the poll that follows still reports
        the end and releases the finalizer. Once deleted it is True: a deletion's SIGTERM may
        end a pod with exit 0 (a checkpoint, then exit), so the end that follows cannot be
        told from a natural one. A workload being deleted was stopped by gpuq (True again)
        unless it had finished before the deletion (the TTL controller's)."""
        try:
            ref = ObjectRef.parse(external_id)
        except ValueError as exc:
            raise BackendError(str(exc), permanent=True) from None
        _, obj, seen, pods = self._observe([external_id])[external_id]
        if seen.ended_first:
            return False
        if obj is not None and started(ref.kind, obj, pods) is not True:
            self._mark_unstarted(ref, obj)
        self._delete(ref, grace_s=grace_s)
        # The workload's deletion gives its pods no grace of their own (the garbage collector
        # deletes each with its spec's terminationGracePeriodSeconds): each pod is deleted
        # with `grace_s` too, so that they get the grace the service names in its event. After
        # the workload, so that no controller replaces them (Volcano restarts a gang whose pod
        # is deleted); an API server only shortens a grace already running, so a pod the
        # garbage collector reached first keeps the shorter of the two.
        for pod in pods:
            if (pod.get("status") or {}).get("phase") in LIVE_PHASES:
                self._delete_pod(ref.namespace, pod["metadata"]["name"], grace_s=grace_s)
        return True

    def _mark_unstarted(self, ref: ObjectRef, obj: Obj) -> None:
        """Record on the workload, before deleting it, that no pod of it had started: once its
        pods are gone a batch/v1 Job keeps no trace of whether they ran, and the end the next
        poll reports must not be charged as a run. Best effort: without it the end is charged
        (a run that starts in the instant before the deletion is not)."""
        if (obj["metadata"].get("annotations") or {}).get(STOPPED_UNSTARTED):
            return
        now = datetime.fromtimestamp(self._clock(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = {"metadata": {"annotations": {STOPPED_UNSTARTED: now}}}
        try:
            self._call(
                f"annotate {ref.external_id}",
                lambda: self.client.patch(
                    RESOURCES[ref.kind],
                    ref.name,
                    patch,
                    namespace=ref.namespace,
                    patch_type=PatchType.MERGE,
                ),
                passthrough=(404,),
            )
        except (ApiError, BackendError):
            return

    def _delete_pod(self, namespace: str, name: str, *, grace_s: float) -> None:
        try:
            self._call(
                f"delete pod {namespace}/{name}",
                lambda: self.client.delete(
                    Pod, name, namespace=namespace, grace_period=_grace_period(grace_s)
                ),
                passthrough=(404,),
            )
        except ApiError:
            return
        except BackendError as exc:
            # Refused (RBAC that lets gpuq delete workloads but not pods): the workload's
            # deletion, made, stops the pod all the same (with its spec's grace), so this is
            # no refused stop. A transient failure is raised: the stop is sent again.
            if not exc.permanent:
                raise
            log.warning("%s; the workload's deletion stops it", exc.message)

    def _delete(self, ref: ObjectRef, *, grace_s: float) -> None:
        """Foreground: the workload disappears only after its pods (and Service) are gone,
        so a job seen deleted no longer holds GPUs. A 404 means already gone."""
        try:
            self._call(
                f"delete {ref.external_id}",
                lambda: self.client.delete(
                    RESOURCES[ref.kind],
                    ref.name,
                    namespace=ref.namespace,
                    grace_period=_grace_period(grace_s),
                    cascade=CascadeType.FOREGROUND,
                ),
                passthrough=(404,),
            )
        except ApiError:
            return

    # --- logs -----------------------------------------------------------------------------

    def logs(
        self, external_id: str, offset: int = 0, limit: int = 65536, stream: str = "stdout"
    ) -> LogChunk:
        """Rank 0's log. Kubernetes merges stdout and stderr into one log, served as
        stdout; stderr is always empty.

        The pod log API has no byte offset: it serves a log from its start (limitBytes),
        its tail, or from a time (sinceTime, in whole seconds). So reads are made with
        timestamps=true, the stamps taken off again (bytes stay exact), and the backend
        remembers, per pod, where each offset it answered up to lies (a LogCursor). A read
        at such an offset resumes with sinceTime from there and costs `limit` bytes plus
        the stamps (31 bytes a line) plus the lines of the same second before it; a read
        at another offset walks from the nearest position known below it (the log's start
        at worst: offset+limit bytes). Positions are per process: a download whose reads
        land on several workers re-reads, per read, what that worker did not see.

        Once the container has ended (its log grows no more), a read is instead taken from
        an answer that runs to the log's end, kept open between reads (_stream_log): the
        next piece goes on where this one stopped, so a download costs the log once plus
        the stamps, even inside a line that never ends (a progress bar's \r line, which a
        sinceTime resume re-reads from its start) and for the kubelet, which reads its file
        from the start for every answer.

        The pod listed can be deleted before its log is asked for (a 404: a stop, Volcano
        killing the gang to restart it): the read is then made again as one begun after the
        deletion (`gone` once the workload went, or is being deleted with no pod left;
        nothing yet while it is there to make more)."""
        try:
            ref = ObjectRef.parse(external_id)
        except ValueError as exc:
            raise BackendError(str(exc), permanent=True) from None
        if stream != "stdout":
            return LogChunk(b"", offset, eof=True)
        for _ in range(LOG_POD_TRIES):
            try:
                workload = self._call(
                    f"get {external_id}",
                    lambda: self.client.get(RESOURCES[ref.kind], ref.name, namespace=ref.namespace),
                    passthrough=(404,),
                ).to_dict()
            except ApiError:  # deleted (a stopped attempt's, or by its TTL): its pods with it
                return LogChunk(b"", offset, eof=True, gone=True)
            labels = workload["metadata"].get("labels") or {}
            selector = {
                JOB_ID_LABEL: labels.get(JOB_ID_LABEL, ""),
                ATTEMPT_LABEL: labels.get(ATTEMPT_LABEL, ""),
            }
            pods = self._call(
                f"list pods of {external_id}", partial(self._list_by, Pod, ref.namespace, selector)
            )
            pod = rank0_pod(pods)
            if pod is None:
                # Being deleted (a stop's foreground deletion, waiting on gpuq's finalizer),
                # it makes no pod again: its log went with the last. Otherwise its pods are
                # still to come (Volcano restarting its gang): nothing yet.
                gone = bool(workload["metadata"].get("deletionTimestamp"))
                return LogChunk(b"", offset, eof=gone, gone=gone)
            finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            try:
                chunk = self._log_chunk(ref.namespace, pod, offset, limit, finished=finished)
            except PodGone:
                # Deleted since the list (a stop, Volcano killing the gang to restart it):
                # answered as a read begun now, which finds the workload or not, and its pods.
                continue
            return LogChunk(
                chunk,
                offset + len(chunk),
                eof=finished and len(chunk) < limit,
                source=log_source(pod),
            )
        return LogChunk(b"", offset, eof=False)  # its pods keep going as they are listed

    def log_size(self, external_id: str, stream: str = "stdout") -> int | None:
        """Unknown: the pod log API tells no length (only a read to the end would)."""
        return None

    def _log_chunk(
        self, namespace: str, pod: Mapping[str, Any], offset: int, limit: int, *, finished: bool
    ) -> bytes:
        meta = pod["metadata"]
        key = (namespace, meta["name"], log_source(pod))
        with self._log_lock:
            known = self._log_cursors.get(key, {})
            base = max((o for o in known if o <= offset), default=0)
            start = known.get(base)
        try:
            streamed = self._stream_log(key, base, start, offset, limit) if finished else None
            if streamed is not None:
                data, cursor = streamed
            else:
                try:
                    data, cursor = self._walk_log(
                        namespace, meta["name"], start, offset - base, limit
                    )
                except LookupError:  # the position is gone (rotated away): walk from the start
                    data, cursor = self._walk_log(namespace, meta["name"], None, offset, limit)
        except LogFormatError:  # not the kubelet's stamps: read offset+limit and slice
            data = self._read_log(namespace, meta["name"], offset + limit)[offset:]
            return data[:limit]
        if cursor is not None:
            with self._log_lock:
                kept = self._log_cursors.setdefault(key, {})
                self._log_cursors.move_to_end(key)
                kept[offset + len(data)] = cursor
                while len(kept) > LOG_CURSORS_KEPT:
                    del kept[min(kept)]
                while len(self._log_cursors) > LOG_PODS_KEPT:
                    self._log_cursors.popitem(last=False)
        return data

    def _stream_log(
        self,
        key: tuple[str, str, str],
        base: int,
        start: LogCursor | None,
        offset: int,
        limit: int,
    ) -> tuple[bytes, LogCursor | None] | None:
        """A read of a finished container's log (it grows no more): from an answer kept open
        where an earlier read of this process left it, else from a new answer begun at the
        nearest position known below `offset` (the log's start at worst) and asked to run to
        the log's end, read only as far as this read needs, then kept open for the next.

        A download in pieces so reads the log once, plus the stamps, however its lines run:
        resumed with sinceTime instead, each piece would re-read the line it starts in from
        that line's start (a progress bar's \r line: quadratic), and the kubelet reads its
        file from the start for every answer. The position each read ends at is still
        learned (a kept answer may be cut: an idle connection closed, LOG_STREAMS_KEPT)."""
        stream = self._take_stream(key, base, start, offset)
        if stream is not None:
            try:
                return self._read_stream(stream, offset, limit)
            except (httpx2.TransportError, httpx2.StreamError):
                pass  # cut while it was kept: a new answer, as below
        with self._log_lock:
            if self._closed or len(self._log_streams) >= LOG_STREAMS_KEPT:
                # Every place is taken: a new answer would push out another download's,
                # which would then open one again (each runs to the log's end). None: read
                # this piece as a running log's (sinceTime), at that cost.
                return None
        namespace, pod, _ = key
        return self._call(
            f"logs of pod {namespace}/{pod}",
            lambda: self._open_and_read(key, base, start, offset, limit),
        )

    def _take_stream(
        self, key: tuple[str, str, str], base: int, start: LogCursor | None, offset: int
    ) -> _LogStream | None:
        """The kept answer of this log that gets to `offset` at least as cheaply as a new one
        from the position known at `base` (which sends what lies before it in its seconds)."""
        fresh = (start.resent() if start is not None else 0) + offset - base
        with self._log_lock:
            idle = self._idle_streams()
            usable = [
                s
                for s in self._log_streams
                if s.key == key and s.offset <= offset and offset - s.offset <= fresh
            ]
            best = max(usable, key=lambda s: s.offset, default=None)
            self._log_streams = [s for s in self._log_streams if s is not best]
        for s in idle:
            s.close()
        return best

    def _keep_stream(self, stream: _LogStream) -> None:
        stream.used = self._clock()
        with self._log_lock:
            if self._closed:
                dropped = [stream]
            else:
                self._log_streams.append(stream)
                dropped = self._log_streams[:-LOG_STREAMS_KEPT]
                self._log_streams = self._log_streams[-LOG_STREAMS_KEPT:]
                self._reap_later()
        for s in dropped:
            s.close()

    def _idle_streams(self) -> list[_LogStream]:
        """Takes out the kept answers not read for LOG_STREAM_IDLE_S (under _log_lock)."""
        now = self._clock()
        idle = [s for s in self._log_streams if now - s.used > LOG_STREAM_IDLE_S]
        self._log_streams = [s for s in self._log_streams if s not in idle]
        return idle

    def _reap_later(self) -> None:
        """Have the kept answers still being sent closed once idle, even when no read comes
        again (a download given up): each holds a connection, and the API server's and the
        kubelet's answers wait on it (under _log_lock)."""
        if self._log_reaper is None and any(not s.reader.ended for s in self._log_streams):
            self._log_reaper = threading.Timer(LOG_STREAM_IDLE_S, self._reap)
            self._log_reaper.daemon = True
            self._log_reaper.start()

    def _reap(self) -> None:
        with self._log_lock:
            self._log_reaper = None
            idle = self._idle_streams()
            self._reap_later()
        for s in idle:
            s.close()

    def _open_and_read(
        self,
        key: tuple[str, str, str],
        base: int,
        start: LogCursor | None,
        offset: int,
        limit: int,
    ) -> tuple[bytes, LogCursor | None]:
        try:
            stream = self._open_stream(key, base, start)
        except LookupError:  # the position is gone (rotated away): from the log's start
            stream = self._open_stream(key, 0, None)
        if stream is None:  # no log yet (the container never started)
            return b"", None
        return self._read_stream(stream, offset, limit)

    def _open_stream(
        self, key: tuple[str, str, str], base: int, start: LogCursor | None
    ) -> _LogStream | None:
        """An answer from `start` (at offset `base`) to the log's end, positioned at `base`."""
        namespace, pod, _ = key
        params = {"container": CONTAINER, "timestamps": "true"}
        if start is not None:
            params["sinceTime"] = start.since_time()
        request = self._raw.build_request(
            "GET", f"api/v1/namespaces/{namespace}/pods/{pod}/log", params=params
        )
        response = self._raw.send(request, stream=True)
        try:
            if response.status_code == 400:  # container not started
                response.close()
                return None
            if response.status_code == 404:  # deleted since it was listed
                response.close()
                raise PodGone(pod)
            if response.is_error:
                response.read()
                raise ApiError(request=response.request, response=response)
            reader = StampedReader(response.iter_bytes(LOG_STREAM_CHUNK), start)
        except BaseException:
            response.close()
            raise
        return _LogStream(key, response, reader, base, self._clock())

    def _read_stream(
        self, stream: _LogStream, offset: int, limit: int
    ) -> tuple[bytes, LogCursor | None]:
        try:
            data, left = stream.reader.read(offset - stream.offset, limit)
        except BaseException:
            stream.close()
            raise
        stream.offset = offset - left + len(data)
        self._keep_stream(stream)
        # A position is only where the bytes handed out end: not past the log's end.
        return data, None if left else stream.reader.cursor

    def _walk_log(
        self, namespace: str, pod: str, start: LogCursor | None, skip: int, want: int
    ) -> tuple[bytes, LogCursor | None]:
        """From `start` (the log's start when None), pass `skip` bytes, then take up to
        `want`: the bytes and the position after them. LookupError when `start` is not in
        the log any more.

        A reader that keeps up with a line still being written (a progress bar's \r, which
        the kubelet stamps only where the line starts) would re-read the line from its start
        on every read. So such a read is bracketed by two answers from a recent second: when
        they are the same, the log did not grow in between, and where that second's entries
        begin in the line is the line's length less theirs (_anchored)."""
        probe = self._probe(namespace, pod, start) if skip == 0 else None
        data, cursor = self._walk(namespace, pod, start, skip, want)
        if (
            probe is not None
            and start is not None
            and cursor is not None
            and cursor.open
            and (cursor.stamp, cursor.run) == (start.stamp, start.run)
        ):
            cursor = self._anchored(namespace, pod, cursor, *probe)
        return data, cursor

    def _probe_params(self, second: int) -> dict[str, str]:
        return {
            "container": CONTAINER,
            "timestamps": "true",
            "sinceTime": _rfc3339(second),
            "limitBytes": str(LOG_PROBE_MAX),
        }

    def _probe(self, namespace: str, pod: str, start: LogCursor | None) -> tuple[int, bytes] | None:
        """The entries from a recent second (LOG_RESUME_MARGIN_S before now, by this host's
        clock), when `start` is where the log ended inside an unfinished line, one that
        began before that second; None when there is nothing to learn."""
        if start is None or not start.open:
            return None
        second = int(self._clock()) - LOG_RESUME_MARGIN_S
        if second <= max(start.anchor, int(start.line_second().timestamp())):
            return None
        body = self._read_log_with(namespace, pod, self._probe_params(second))
        if not body or len(body) >= LOG_PROBE_MAX:
            return None  # none yet (or a clock ahead of the node's), or too many to bracket
        return second, body

    def _anchored(
        self, namespace: str, pod: str, cursor: LogCursor, second: int, first: bytes
    ) -> LogCursor:
        """`cursor` (the end of an unfinished line, as the walk just read it) with where
        `second`'s entries begin in that line, if the log did not grow between the probe
        before the walk and this one: the line was then as long as the walk found it, and
        the probe's answer is its tail, all of it stamped from `second` on."""
        again = self._read_log_with(namespace, pod, self._probe_params(second))
        if again != first:
            return cursor  # the log grew meanwhile: the walk may have read more than the probe
        try:
            lines = split_stamped_log(again, resumed=True, cut=False)
        except LogFormatError:
            return cursor
        if len(lines) != 1 or lines[0].stamp is not None or lines[0].data.endswith(b"\n"):
            return cursor
        at = cursor.into - len(lines[0].data)
        if at <= cursor.at:
            return cursor
        return dataclasses.replace(cursor, anchor=second, at=at, lead=0)

    def _walk(
        self, namespace: str, pod: str, start: LogCursor | None, skip: int, want: int
    ) -> tuple[bytes, LogCursor | None]:
        """_walk_log's reads. Each answer is bounded by limitBytes; a read that stopped short
        goes on from where it got to."""
        out = bytearray()
        cursor = start
        budget = 0
        while True:
            need = skip + want - len(out)
            # A resumed read starts at its line's second (less the margin), or at the anchor
            # learned inside an unfinished line, and re-reads what lies before the position.
            lead = cursor.resent() if cursor is not None else 0
            # What is to be passed or taken comes in answers of at most LOG_MAX_ANSWER: a
            # read far into a large log walks it, never holding all of it at once.
            budget = max(budget, lead + min(LOG_MAX_ANSWER, need + need // 4 + LOG_MIN_READ))
            params = {"container": CONTAINER, "timestamps": "true", "limitBytes": str(budget)}
            if cursor is not None:
                params["sinceTime"] = cursor.since_time()
            body = self._read_log_with(namespace, pod, params)
            cut = len(body) >= budget
            lines = split_stamped_log(body, resumed=cursor is not None, cut=cut)
            first, into, base = 0, 0, 0
            if cursor is not None and cursor.anchor:
                # The answer starts inside the cursor's line, `at` bytes into it.
                if not lines or lines[0].stamp is not None:
                    raise LookupError(cursor)
                into, base = cursor.into - cursor.at, cursor.at
            elif cursor is not None:
                found = _find_line(lines, cursor)
                if found is None:
                    if not cut:
                        raise LookupError(cursor)
                    budget *= 2  # the same second holds more than this answer
                    continue
                first, into = found, cursor.into
            before = (cursor, skip, len(out))
            run = cursor.run if cursor is not None else 0
            for i in range(first, len(lines)):
                stamp, data, lead = lines[i]
                if i > first:
                    run = run + 1 if stamp == lines[i - 1].stamp else 0
                    into, base = 0, 0
                elif base:
                    assert cursor is not None
                    stamp = cursor.stamp
                if stamp is None:
                    raise LogFormatError("an unstamped line after the resumed one")
                passed = min(skip, len(data) - into)
                skip, into = skip - passed, into + passed
                taken = data[into : into + want - len(out)]
                out += taken
                into += len(taken)
                if base:
                    assert cursor is not None
                    cursor = dataclasses.replace(cursor, into=base + into, open=False)
                else:
                    cursor = LogCursor(stamp, run, into, lead)
                if len(out) >= want:
                    return bytes(out), cursor
            if not cut:
                # A position is only where the bytes handed out end: not past the log's end.
                if skip or cursor is None:
                    return bytes(out), None
                if lines and not lines[-1].data.endswith(b"\n"):  # the cursor is at its end
                    cursor = dataclasses.replace(cursor, open=True)
                return bytes(out), cursor
            if (cursor, skip, len(out)) == before:
                budget *= 2  # nothing new in this answer: ask for more

    def _read_log(self, namespace: str, pod: str, limit_bytes: int) -> bytes:
        return self._read_log_with(
            namespace, pod, {"container": CONTAINER, "limitBytes": str(limit_bytes)}
        )

    def _read_log_with(self, namespace: str, pod: str, params: dict[str, str]) -> bytes:
        def get() -> bytes:
            response = self._raw.get(f"api/v1/namespaces/{namespace}/pods/{pod}/log", params=params)
            if response.status_code == 400:  # container not started yet
                return b""
            if response.status_code == 404:  # deleted since it was listed
                raise PodGone(pod)
            if response.is_error:
                raise ApiError(request=response.request, response=response)
            return response.content

        return self._call(f"logs of pod {namespace}/{pod}", get)

    # --- inventory and MIG ----------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        nodes = self._list_nodes()
        # Every pod not ended, gpuq's or not: kube-scheduler counts the GPUs and MIG slices
        # of the cluster's other workloads as taken, so gpuq must too (inventory._usage).
        pods = self._call(
            "list pods",
            lambda: [
                p.to_dict()
                for p in self.client.list(
                    Pod, namespace="*", fields={"status.phase": ops.not_in(["Succeeded", "Failed"])}
                )
            ],
        )
        return inventory(nodes, pods, self.settings)

    def apply_mig_layout(self, node: str, config_name: str) -> None:
        """Ask the GPU Operator's MIG manager to re-lay out a node's GPUs; follow it with
        mig_layout_state()."""
        if self.settings.mig_configs and config_name not in self.settings.mig_configs:
            raise BackendError(f"unknown MIG config {config_name!r}", permanent=True)
        if label_value(config_name) != config_name:
            raise BackendError(f"not a valid MIG config name: {config_name!r}", permanent=True)
        patch = {"metadata": {"labels": {MIG_CONFIG_LABEL: config_name}}}
        self._call(
            f"label node {node}",
            lambda: self.client.patch(Node, node, patch, patch_type=PatchType.MERGE),
        )

    def mig_layout_state(self, node: str) -> str:
        """pending | rebooting | success | failed, or "unknown" before the MIG manager
        reports anything."""
        obj = self._call(f"get node {node}", lambda: self.client.get(Node, node)).to_dict()
        state = (obj["metadata"].get("labels") or {}).get(MIG_STATE_LABEL, "")
        return state if state in MIG_LAYOUT_STATES else "unknown"


def selector_pieces(job_ids: Sequence[str]) -> list[list[str]]:
    """`job_ids` in order, cut so that each piece's `gpuq.io/job-id in (...)` is at most
    SELECTOR_MAX_BYTES as sent (URL-encoded); none for none."""
    pieces: list[list[str]] = []
    empty = len(quote_plus(f"{JOB_ID_LABEL} in ()"))
    size = empty
    for job_id in job_ids:
        cost = len(quote_plus(job_id))
        if pieces and size + len(quote_plus(",")) + cost <= SELECTOR_MAX_BYTES:
            pieces[-1].append(job_id)
            size += len(quote_plus(",")) + cost
        else:
            pieces.append([job_id])
            size = empty + cost
    return pieces


def log_source(pod: Mapping[str, Any]) -> str:
    """Which log of the attempt a pod's main container writes: a gang that Volcano recreates
    (the same pod names, a new uid) and a container the kubelet restarts in its pod each
    write a log that starts over."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    restarts = next((c.get("restartCount", 0) for c in statuses if c.get("name") == CONTAINER), 0)
    return f"{(pod.get('metadata') or {}).get('uid', '')}/{restarts}"


def _find_line(lines: Sequence[LogLine], cursor: LogCursor) -> int | None:
    """The index of the cursor's line: the `run`-th of consecutive lines stamped alike."""
    run = 0
    for i, line in enumerate(lines):
        run = run + 1 if i and line.stamp == lines[i - 1].stamp else 0
        if line.stamp == cursor.stamp and run == cursor.run:
            return i
    return None


def rank0_pod(pods: Sequence[Mapping[str, Any]]) -> Obj | None:
    """The pod whose log the UI shows: Volcano's master task or Indexed Job index 0 (the
    newest such pod, after restarts), else the first pod by name."""

    def rank0(p: Mapping[str, Any]) -> bool:
        meta = p.get("metadata") or {}
        return (meta.get("labels") or {}).get(ROLE_LABEL) == "master" or (
            meta.get("annotations") or {}
        ).get(COMPLETION_INDEX) == "0"

    candidates = [p for p in pods if rank0(p)] or sorted(pods, key=lambda p: p["metadata"]["name"])[
        :1
    ]
    if not candidates:
        return None
    newest = max(
        candidates,
        key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]),
    )
    return dict(newest)
