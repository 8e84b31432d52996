"""An honest fake Kubernetes API server on 127.0.0.1, spoken to over real HTTP.

What it does like a real API server (see docs/kubernetes.md for what it does not):
- one global increasing revision; every write sets metadata.resourceVersion; create sets
  uid, creationTimestamp and generation, and the defaults the real server adds (Job selector
  and pod-template labels, CRD schema defaults);
- 409 AlreadyExists on create, 409 Conflict on a stale resourceVersion (in an update, or
  carried by a patch: a precondition, as for a real server), 404 NotFound for a missing
  object or namespace, 400/422 per k8s_rules (schemas + semantic rules + the Volcano
  admission webhooks), an immutable Job pod template and selector;
- merge, strategic merge (applied as merge) and JSON patches (RFC 6902; a failed `test` or
  a missing path is the real server's bare 422);
- list with labelSelector (parsed as labels.Parse: set-based `in`/`notin`, label keys and
  values checked) / fieldSelector / limit+continue and the list resourceVersion; a request
  line of at most 1 MiB (the API server's MaxHeaderBytes; 431 past it); each request's JSON
  answer counted (`Request.sent` bytes, `Request.items` listed objects);
  watch from a resourceVersion in revision order, ADDED/MODIFIED/DELETED (a label change
  crossing a selector is ADDED/DELETED, as the watch cache does), ERROR 410 Expired for a
  resourceVersion older than the kept history;
- delete with propagationPolicy (Foreground / Background / Orphan; batch/v1 Jobs default to
  Orphan), finalizers holding an object with deletionTimestamp; a pod's grace as the pod
  strategy sets it (gracePeriodSeconds, else its terminationGracePeriodSeconds, default 30;
  0 for a pod not bound or already ended; a second delete only shortens it); with
  `store.pods_stop_at_once = False`, a bound pod deleted with a grace stays, terminating,
  until its kubelet (k8s_sim) confirms it stopped, and so does one on a node whose kubelet
  cannot be reached (`store.unreachable_nodes`) whatever that setting; the
  DefaultTolerationSeconds admission plugin's not-ready/unreachable tolerations on pods;
- pod logs with container, limitBytes, tailLines, sinceSeconds, timestamps; sinceTime in
  whole seconds (the API server forwards it to the kubelet as RFC3339 without a fraction),
  kept per CRI entry; timestamps with nanoseconds, written only where a line starts (the
  kubelet since kubernetes#113481, 1.26), streamed (chunked) as the API server relays them;
  `log_bytes_sent` counts the log bytes answered, as written, `log_bytes_scanned` those the
  kubelet read from the log file to answer (from the file's start, every time);
- size limits: 413 for a request body over 3 MiB, 500 "etcdserver: request is too large"
  for an object over etcd's 1.5 MiB;
- faults: a Status error (429 with Retry-After, 500...), a dropped connection before or
  after the write happened, a slow answer, another writer's change just before a request;
- authorization denials (`deny`): the 403 Forbidden the API server writes when its
  authorizer refuses a request (responsewriters.Forbidden: the verb, resource, API group
  and namespace, and the account the token stands for, `user`).

It has no controllers: the helpers in k8s_sim play kube-scheduler, the Job controller,
Volcano, the kubelet and the MIG manager, writing the status shapes they write."""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import re
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import k8s_rules as rules


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    crd: Path | None = None  # the CRD file whose schema validates it
    default_propagation: str = "Background"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


def resource_types(crd_dir: Path | None) -> dict[tuple[str, str, str], ResourceType]:
    types = [
        ResourceType("", "v1", "namespaces", "Namespace", False),
        ResourceType("", "v1", "nodes", "Node", False),
        ResourceType("", "v1", "pods", "Pod", True),
        ResourceType("", "v1", "services", "Service", True),
        # batch/v1 Jobs orphan their pods unless told otherwise (kept for compatibility).
        ResourceType("batch", "v1", "jobs", "Job", True, default_propagation="Orphan"),
    ]
    if crd_dir is not None:
        types += [
            ResourceType(
                "batch.volcano.sh",
                "v1alpha1",
                "jobs",
                "Job",
                True,
                crd=crd_dir / "batch.volcano.sh_jobs.yaml",
            ),
            ResourceType(
                "scheduling.volcano.sh",
                "v1beta1",
                "queues",
                "Queue",
                False,
                crd=crd_dir / "scheduling.volcano.sh_queues.yaml",
            ),
        ]
    return {(t.group, t.version, t.plural): t for t in types}


@dataclass
class Fault:
    """One injected failure for requests matching method/path; `times` requests get it.
    kind: "status" (answer `code`), "drop" (close before doing anything), "drop_after"
    (do the request, then close without answering: the client times out although the
    write happened), "slow" (wait `delay` seconds, then answer normally), "race" (run
    `action`, another writer's change, just before serving the request)."""

    kind: str
    code: int = 500
    retry_after: float | None = None
    delay: float = 0.0
    action: Callable[[], None] | None = None
    method: str | None = None
    path_contains: str | None = None
    times: int = 1

    def matches(self, method: str, path: str) -> bool:
        return (
            self.times > 0
            and (self.method is None or self.method == method)
            and (self.path_contains is None or self.path_contains in path)
        )


@dataclass(frozen=True)
class Denial:
    """A request the authorizer refuses: `verb` (or "*") on `resource` (a plural, with
    "/<subresource>" for one) of API `group`, in `namespace` (None: in any, or at the
    cluster scope). `reason` is the authorizer's own words, appended as it appends them."""

    verb: str
    resource: str
    group: str = ""
    namespace: str | None = None
    reason: str = ""


def request_verb(method: str, name: str | None, q: dict[str, str]) -> str:
    """The authorizer's verb for a request (RequestInfoFactory)."""
    if method == "GET":
        if name is not None:
            return "get"
        return "watch" if q.get("watch") in ("true", "1") else "list"
    if method == "DELETE":
        return "delete" if name is not None else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}


def status_body(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "code": code,
    }
    if reason:  # errors passed through from etcd carry none
        body["reason"] = reason
    if details:
        body["details"] = details
    return body


# The API server reads at most 3 MiB of request body (413 beyond); etcd stores at most
# 1.5 MiB per object (--max-request-bytes), refused as a 500 "etcdserver: request is too
# large" (kubernetes#112152). etcd's limit applies to the stored encoding (protobuf, strings
# as UTF-8), a little smaller than the UTF-8 JSON measured here.
MAX_BODY_BYTES = 3 * 1024 * 1024
# The API server's http.Server takes 1 MiB of request line and headers (MaxHeaderBytes in
# apiserver's secure_serving.go; Go's net/http reads 4 KiB past it before refusing) and
# answers a longer one 431. Bounded here on the request line, where a selector travels.
MAX_REQUEST_LINE = (1 << 20) + 4096
MAX_STORED_BYTES = 1536 * 1024
LOG_WRITE = 64 * 1024  # the pieces a log answer is written (and counted) in


def check_stored_size(obj: dict[str, Any]) -> None:
    stored = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    if len(stored) > MAX_STORED_BYTES:
        raise ApiError(500, "", "etcdserver: request is too large")


def log_timestamp(t: float) -> str:
    """The kubelet's log timestamp: RFC3339 with nanoseconds, fixed width."""
    whole = int(t // 1)
    nanos = round((t - whole) * 1e9)
    if nanos >= 1_000_000_000:
        whole, nanos = whole + 1, nanos - 1_000_000_000
    return datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"


def _parse_rfc3339(text: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ApiError(400, "BadRequest", f'parsing time "{text}" as RFC3339 failed') from None


def now_rfc3339(t: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if t is None else t, UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )


# --- selectors -------------------------------------------------------------------------------

# labels.Parse (k8s.io/apimachinery/pkg/labels/selector.go): a lexer of identifiers and the
# symbols below, whitespace between tokens; keys are qualified names and values label values.
_SELECTOR_SYMBOLS = {"=", "==", "!=", "!", "(", ")", ",", ">", "<"}
_LABEL_VALUE = re.compile(r"(?:(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_LABEL_NAME = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(
    r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
)


def _selector_tokens(text: str) -> list[tuple[str, str]]:
    """(kind, literal) pairs, kind "id", "sym" or "end"; a symbol is the longest run of
    special characters that is one (`!=`, `==`), as the Go lexer scans it."""
    out: list[tuple[str, str]] = []
    i = 0
    while True:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        if i == len(text):
            return [*out, ("end", "")]
        if text[i] in "=!(),<>":
            j, found = i, ""
            while j < len(text) and text[j] in "=!(),<>":
                if text[i : j + 1] in _SELECTOR_SYMBOLS:
                    found = text[i : j + 1]
                elif found:
                    break
                j += 1
            if not found:
                raise _selector_error(f"error expected: keyword found '{text[i:j]}'")
            out.append(("sym", found))
            i += len(found)
            continue
        j = i
        while j < len(text) and text[j] not in "=!(),<> \t\r\n":
            j += 1
        out.append(("id", text[i:j]))
        i = j


def _selector_error(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def _check_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if (
        not _LABEL_NAME.fullmatch(name)
        or len(name) > 63
        or ("/" in key and (not _DNS_SUBDOMAIN.fullmatch(prefix) or len(prefix) > 253))
    ):
        raise _selector_error(
            f"unable to parse requirement: {key}: Invalid value: {key!r}: name part must"
            " consist of alphanumeric characters, '-', '_' or '.', and must start and end with"
            " an alphanumeric character (at most 63), with an optional DNS subdomain prefix"
            " and '/'"
        )


def _check_value(key: str, value: str) -> None:
    if len(value) > 63:
        raise _selector_error(
            f"unable to parse requirement: values[0][{key}]: Invalid value: {value!r}:"
            " must be no more than 63 characters"
        )
    if not _LABEL_VALUE.fullmatch(value):
        raise _selector_error(
            f"unable to parse requirement: values[0][{key}]: Invalid value: {value!r}:"
            " a valid label must be an empty string or consist of alphanumeric characters,"
            " '-', '_' or '.', and must start and end with an alphanumeric character"
        )


def parse_label_selector(text: str) -> Callable[[dict[str, str]], bool]:
    """A label selector as the API server parses it (labels.Parse): `k`, `!k`, `k=v`, `k==v`,
    `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k>1`, `k<1`, comma-separated (all must hold).
    `in ()` is the set of the empty value, and an empty value between commas counts; a key
    or value that is not a valid label key or value is a 400, as are tokens out of place."""
    tokens = _selector_tokens(text)
    checks: list[Callable[[dict[str, str]], bool]] = []
    pos = 0

    def take() -> tuple[str, str]:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def value_set() -> set[str]:
        """`(a,b)`; an empty place ("()", "(,", ",,", ",)") holds the empty value."""
        if take() != ("sym", "("):
            raise _selector_error(
                f"unable to parse requirement: found '{tokens[pos - 1][1]}' expected: '('"
            )
        values: set[str] = set()
        want_value = True
        while True:
            kind, lit = take()
            if kind == "id" and want_value:
                values.add(lit)
                want_value = False
            elif (kind, lit) in (("sym", ","), ("sym", ")")):
                if want_value:
                    values.add("")
                if lit == ")":
                    return values
                want_value = True
            elif kind == "id":
                raise _selector_error(
                    f"unable to parse requirement: found '{lit}', expected: ',' or ')'"
                )
            else:
                raise _selector_error(
                    f"unable to parse requirement: found '{lit}', expected: ',', ')' or identifier"
                )

    while tokens[pos][0] != "end":
        kind, lit = take()
        absent = (kind, lit) == ("sym", "!")
        if absent:
            kind, lit = take()
        if kind != "id":
            raise _selector_error(
                f"unable to parse requirement: found '{lit}', expected: identifier"
            )
        key = lit
        _check_key(key)
        if tokens[pos][0] == "end" or tokens[pos] == ("sym", ","):
            checks.append(
                (lambda lab, k=key: k not in lab) if absent else (lambda lab, k=key: k in lab)
            )
        elif absent:
            raise _selector_error(f"found '{tokens[pos][1]}', expected: ',' or 'end of string'")
        else:
            _, op = take()
            if op in ("in", "notin"):
                values = value_set()
                for v in sorted(values):
                    _check_value(key, v)
                if op == "in":
                    checks.append(lambda lab, k=key, vs=values: k in lab and lab[k] in vs)
                else:
                    checks.append(lambda lab, k=key, vs=values: lab.get(k) not in vs)
            elif op in ("=", "==", "!=", ">", "<"):
                value = "" if tokens[pos][0] == "end" or tokens[pos] == ("sym", ",") else None
                if value is None:
                    kind, value = take()
                    if kind != "id":
                        raise _selector_error(
                            f"unable to parse requirement: found '{value}', expected: identifier"
                        )
                _check_value(key, value)
                if op in ("=", "=="):
                    checks.append(lambda lab, k=key, v=value: k in lab and lab[k] == v)
                elif op == "!=":
                    checks.append(lambda lab, k=key, v=value: lab.get(k) != v)
                else:
                    if not re.fullmatch(r"[-+]?[0-9]+", value):
                        raise _selector_error(
                            f"unable to parse requirement: values[0][{key}]: Invalid value:"
                            f" {value!r}: for 'Gt', 'Lt' operators, the value must be an integer"
                        )
                    checks.append(
                        lambda lab, k=key, v=int(value), gt=op == ">": (
                            bool(re.fullmatch(r"[-+]?[0-9]+", lab.get(k, "x")))
                            and (int(lab[k]) > v if gt else int(lab[k]) < v)
                        )
                    )
            else:
                raise _selector_error(
                    f"unable to parse requirement: found '{op}', expected: in, notin, =, ==,"
                    " !=, gt, lt"
                )
        if tokens[pos] == ("sym", ","):
            take()
            if tokens[pos][0] != "id" and tokens[pos] != ("sym", "!"):
                raise _selector_error(f"found '{tokens[pos][1]}', expected: identifier after ','")
        elif tokens[pos][0] != "end":
            raise _selector_error(f"found '{tokens[pos][1]}', expected: ',' or 'end of string'")
    return lambda labels: all(c(labels) for c in checks)


def _split_selector(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p for p in parts if p.strip()]


FIELD_LABELS = {
    "metadata.name": lambda o: o["metadata"]["name"],
    "metadata.namespace": lambda o: o["metadata"].get("namespace", ""),
    "spec.nodeName": lambda o: (o.get("spec") or {}).get("nodeName", ""),
    "status.phase": lambda o: (o.get("status") or {}).get("phase", ""),
}


def parse_field_selector(text: str) -> Callable[[dict[str, Any]], bool]:
    checks = []
    for part in _split_selector(text):
        m = re.fullmatch(r"\s*([\w.]+)\s*(==|=|!=)\s*(.*?)\s*", part)
        if not m:
            raise ApiError(400, "BadRequest", f"invalid selector: {part!r}")
        if m[1] not in FIELD_LABELS:
            raise ApiError(400, "BadRequest", f"field label not supported: {m[1]}")
        get, value, neg = FIELD_LABELS[m[1]], m[3], m[2] == "!="
        checks.append(lambda o, g=get, v=value, n=neg: (g(o) == v) != n)
    return lambda obj: all(c(obj) for c in checks)


# --- patches -----------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (the fake also applies strategic merge patches this way:
    they differ only for lists with patch strategies, which gpuq never patches)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError(f"JSON pointer {path!r} does not start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(parent: list[Any], token: str, *, adding: bool) -> int:
    if adding and token == "-":
        return len(parent)
    if not re.fullmatch(r"0|[1-9][0-9]*", token):
        raise ValueError(f"bad array index {token!r}")
    i = int(token)
    if i > len(parent) or (i == len(parent) and not adding):
        raise ValueError(f"array index {i} out of bounds")
    return i


def _locate(doc: Any, path: str) -> tuple[Any, str]:
    tokens = _pointer(path)
    if not tokens:
        raise ValueError("the whole document cannot be patched here")
    parent = doc
    for token in tokens[:-1]:
        if isinstance(parent, dict) and token in parent:
            parent = parent[token]
        elif isinstance(parent, list):
            parent = parent[_index(parent, token, adding=False)]
        else:
            raise ValueError(f"missing value at {path!r}")
    return parent, tokens[-1]


def _get_at(doc: Any, path: str) -> Any:
    parent, token = _locate(doc, path)
    if isinstance(parent, dict):
        if token not in parent:
            raise ValueError(f"missing value at {path!r}")
        return parent[token]
    if isinstance(parent, list):
        return parent[_index(parent, token, adding=False)]
    raise ValueError(f"missing value at {path!r}")


def _remove_at(doc: Any, path: str) -> Any:
    parent, token = _locate(doc, path)
    if isinstance(parent, dict):
        if token not in parent:
            raise ValueError(f"missing value at {path!r}")
        return parent.pop(token)
    if isinstance(parent, list):
        return parent.pop(_index(parent, token, adding=False))
    raise ValueError(f"missing value at {path!r}")


def _add_at(doc: Any, path: str, value: Any, *, replace: bool = False) -> None:
    parent, token = _locate(doc, path)
    if isinstance(parent, dict):
        if replace and token not in parent:
            raise ValueError(f"missing value at {path!r}")
        parent[token] = value
    elif isinstance(parent, list):
        i = _index(parent, token, adding=not replace)
        if replace:
            parent[i] = value
        else:
            parent.insert(i, value)
    else:
        raise ValueError(f"missing value at {path!r}")


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch, all or nothing. Raises ValueError where the real server (evanphx
    json-patch) fails to apply it."""
    if not isinstance(ops, list):
        raise ValueError("a JSON patch is a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "add":
            _add_at(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove_at(doc, path)
        elif kind == "replace":
            _add_at(doc, path, copy.deepcopy(op.get("value")), replace=True)
        elif kind == "test":
            if _get_at(doc, path) != op.get("value"):
                raise ValueError(f"testing value {path} failed")
        elif kind in ("move", "copy"):
            value = _get_at(doc, op.get("from", ""))
            if kind == "move":
                _remove_at(doc, op.get("from", ""))
            _add_at(doc, path, copy.deepcopy(value))
        else:
            raise ValueError(f"unexpected op {kind!r}")
    return doc


# --- the store ---------------------------------------------------------------------------------


@dataclass
class Event:
    rev: int
    rtype: ResourceType
    type: str
    obj: dict[str, Any]
    old: dict[str, Any] | None


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    sent: int = 0  # the bytes of its JSON answer's body (a log's: log_bytes_sent)
    items: int = 0  # the objects a list answer held


@dataclass
class LogLine:
    at: float
    data: bytes


class Store:
    """Objects, revisions and the event history, under one lock."""

    def __init__(self, types: dict[tuple[str, str, str], ResourceType], history: int, version: str):
        self.types = types
        self.version = version
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rev = 0
        self.compacted = 0  # highest revision no longer in the history
        self.events: deque[Event] = deque()
        self.history = history
        self.objects: dict[ResourceType, dict[tuple[str, str], dict[str, Any]]] = {
            t: {} for t in types.values()
        }
        self.logs: dict[tuple[str, str, str], list[LogLine]] = {}
        self.volcano_queues: dict[str, str] = {}
        self.clock: Callable[[], float] = time.time
        # True: a deleted pod's kubelet confirms at once that its containers stopped (pods go
        # when deleted). False: a bound pod deleted with a grace stays terminating until the
        # test's kubelet (Sim.kubelet_confirms_stops) says so, as on a real node.
        self.pods_stop_at_once = True
        # Nodes whose kubelet the control plane cannot reach (Sim.node_unreachable): nothing
        # confirms there that a deleted pod's containers stopped, so a pod deleted with a
        # grace stays terminating (phase unchanged) until its node comes back, the node is
        # deleted (PodGC force-deletes it), or someone deletes it with grace 0.
        self.unreachable_nodes: set[str] = set()

    def rtype(self, api_version: str, plural: str) -> ResourceType:
        group, _, version = api_version.rpartition("/")
        return self.types[(group, version, plural)]

    def by_kind(self, api_version: str, kind: str) -> ResourceType:
        for t in self.types.values():
            if t.api_version == api_version and t.kind == kind:
                return t
        raise KeyError((api_version, kind))

    def _record(
        self, rtype: ResourceType, type_: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        self.events.append(Event(self.rev, rtype, type_, copy.deepcopy(obj), old))
        while len(self.events) > self.history:
            self.compacted = self.events.popleft().rev
        self.changed.notify_all()

    def _bump(self, obj: dict[str, Any]) -> None:
        self.rev += 1
        obj["metadata"]["resourceVersion"] = str(self.rev)

    def get(self, rtype: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        obj = self.objects[rtype].get((namespace, name))
        if obj is None:
            raise ApiError(
                404,
                "NotFound",
                f'{rtype.qualified} "{name}" not found',
                {"name": name, "group": rtype.group, "kind": rtype.plural},
            )
        return obj

    def require_namespace(self, namespace: str) -> None:
        ns_type = self.types[("", "v1", "namespaces")]
        if ("", namespace) not in self.objects[ns_type]:
            raise ApiError(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                {"name": namespace, "kind": "namespaces"},
            )

    def insert(self, rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        if key in self.objects[rtype]:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{rtype.qualified} "{meta["name"]}" already exists',
                {"name": meta["name"], "group": rtype.group, "kind": rtype.plural},
            )
        check_stored_size(obj)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339(self.clock())
        meta["generation"] = 1
        self._bump(obj)
        self.objects[rtype][key] = obj
        self._record(rtype, "ADDED", obj, None)
        return obj

    def replace(
        self, rtype: ResourceType, obj: dict[str, Any], *, spec_changed: bool = True
    ) -> dict[str, Any]:
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        old = self.objects[rtype][key]
        check_stored_size(obj)
        if spec_changed and obj.get("spec") != old.get("spec"):
            meta["generation"] = old["metadata"].get("generation", 1) + 1
        self._bump(obj)
        self.objects[rtype][key] = obj
        self._record(rtype, "MODIFIED", obj, copy.deepcopy(old))
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not self.kubelet_holds(rtype, obj)
        ):
            self.remove(rtype, obj)
        return obj

    def kubelet_holds(self, rtype: ResourceType, obj: dict[str, Any]) -> bool:
        """A deleted pod whose kubelet has not confirmed yet that its containers stopped."""
        return (
            rtype.kind == "Pod"
            and self.kubelet_confirms_later(obj)
            and bool(obj["metadata"].get("deletionGracePeriodSeconds"))
        )

    def kubelet_confirms_later(self, pod: dict[str, Any]) -> bool:
        """Whether a graceful deletion of this pod waits for its kubelet: always on a real node
        (pods_stop_at_once = False), and here too on a node whose kubelet cannot be reached."""
        return not self.pods_stop_at_once or (
            (pod.get("spec") or {}).get("nodeName") in self.unreachable_nodes
        )

    def remove(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        old = self.objects[rtype].pop(key)
        self._bump(old)
        self._record(rtype, "DELETED", old, None)
        if rtype.kind == "Pod":
            for log_key in [k for k in self.logs if k[:2] == key]:
                del self.logs[log_key]
        self._collect()

    def dependents(self, uid: str) -> list[tuple[ResourceType, dict[str, Any]]]:
        return [
            (t, o)
            for t, objs in self.objects.items()
            for o in list(objs.values())
            if any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or [])
        ]

    def _collect(self) -> None:
        """The garbage collector: an owner waiting in foreground deletion goes once its
        last dependent is gone; dependents of a deleted owner are deleted."""
        for t, objs in self.objects.items():
            for o in list(objs.values()):
                meta = o["metadata"]
                held = "foregroundDeletion" in (meta.get("finalizers") or [])
                if meta.get("uid") and held and not self.dependents(meta["uid"]):
                    updated = copy.deepcopy(o)
                    updated["metadata"]["finalizers"].remove("foregroundDeletion")
                    self.replace(t, updated, spec_changed=False)

    def delete(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        propagation: str | None,
        grace: int | None,
    ) -> dict[str, Any]:
        obj = copy.deepcopy(self.get(rtype, namespace, name))
        policy = propagation or rtype.default_propagation
        if policy not in ("Foreground", "Background", "Orphan"):
            raise ApiError(400, "BadRequest", f"invalid propagationPolicy {policy!r}")
        uid = obj["metadata"]["uid"]
        if rtype.kind == "Namespace":  # the namespace controller empties it first
            for t, objs in self.objects.items():
                for ns, n in [k for k in objs if k[0] == name and t.namespaced]:
                    if (ns, n) in objs:
                        self.delete(t, ns, n, "Background", None)
        if policy == "Orphan":
            for t, dep in self.dependents(uid):
                freed = copy.deepcopy(dep)
                refs = [r for r in freed["metadata"]["ownerReferences"] if r.get("uid") != uid]
                freed["metadata"]["ownerReferences"] = refs
                self.replace(t, freed, spec_changed=False)
        meta = obj["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if (
            policy == "Foreground"
            and self.dependents(uid)
            and "foregroundDeletion" not in finalizers
        ):
            finalizers.append("foregroundDeletion")
        terminating = False  # a pod its kubelet has yet to stop
        if rtype.kind == "Pod":
            grace = pod_grace(obj, grace)
            terminating = grace > 0 and self.kubelet_confirms_later(obj)
        if finalizers or terminating:
            now = self.clock()
            was = (meta.get("deletionTimestamp"), meta.get("deletionGracePeriodSeconds"))
            had = list(meta.get("finalizers") or [])
            if not meta.get("deletionTimestamp"):
                if rtype.kind == "Pod":  # the time by which the kubelet kills it
                    meta["deletionTimestamp"] = now_rfc3339(now + (grace or 0))
                else:
                    meta["deletionTimestamp"] = now_rfc3339(now)
                meta["deletionGracePeriodSeconds"] = 0 if grace is None else grace
            elif (
                rtype.kind == "Pod"
                and grace is not None
                and grace < meta.get("deletionGracePeriodSeconds", 0)
            ):
                # rest.BeforeDelete: a grace already running may only be shortened.
                meta["deletionTimestamp"] = now_rfc3339(now + grace)
                meta["deletionGracePeriodSeconds"] = grace
            meta["finalizers"] = finalizers
            if (meta.get("deletionTimestamp"), meta.get("deletionGracePeriodSeconds")) != was or (
                finalizers != had
            ):  # a deletion already pending changes nothing, and writes nothing
                self.replace(rtype, obj, spec_changed=False)
            for t, dep in self.dependents(uid) if policy == "Foreground" else []:
                self.delete(
                    t,
                    dep["metadata"].get("namespace", ""),
                    dep["metadata"]["name"],
                    "Background",
                    None,
                )
            current = self.objects[rtype].get((namespace, name))
            return copy.deepcopy(current) if current else obj
        self.remove(rtype, self.objects[rtype][(namespace, name)])
        for t, dep in self.dependents(uid):
            self.delete(
                t, dep["metadata"].get("namespace", ""), dep["metadata"]["name"], "Background", None
            )
        return obj


# The DefaultTolerationSeconds admission plugin (on by default): a pod that does not tolerate
# these NoExecute taints of the node lifecycle controller tolerates them for 300 s
# (--default-not-ready-toleration-seconds, --default-unreachable-toleration-seconds), after
# which the taint eviction controller deletes it.
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
DEFAULT_TOLERATION_SECONDS = 300


def _default_toleration_seconds(spec: dict[str, Any]) -> None:
    tolerations = spec.setdefault("tolerations", [])
    for key in (NOT_READY_TAINT, UNREACHABLE_TAINT):
        if not any(
            t.get("effect") in (None, "", "NoExecute")
            and (t.get("key") == key or (not t.get("key") and t.get("operator") == "Exists"))
            for t in tolerations
        ):
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
                }
            )


def pod_grace(pod: dict[str, Any], grace: int | None) -> int:
    """The grace a pod's deletion gets, as the pod strategy's CheckGracefulDelete sets it:
    the DELETE's gracePeriodSeconds, else the pod's terminationGracePeriodSeconds (defaulted
    to 30 on create); 0 (at once) for a pod no node has taken, or one that has ended. For a
    pod already terminating, rest.BeforeDelete keeps the running grace unless a shorter one
    is given (the caller compares)."""
    meta = pod["metadata"]
    if meta.get("deletionTimestamp") and grace is None:
        return int(meta.get("deletionGracePeriodSeconds") or 0)
    if grace is None:
        grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
    if not pod["spec"].get("nodeName"):
        return 0
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return 0
    return grace


# --- HTTP ----------------------------------------------------------------------------------------


class FakeApiServer:
    """`with FakeApiServer(crd_dir=...) as api:` then `KubeConfig.from_server(api.url)`."""

    def __init__(
        self,
        *,
        crd_dir: Path | None,
        version: str = "1.33",
        history: int = 1000,
        token: str | None = None,
    ) -> None:
        self.store = Store(resource_types(crd_dir), history, version)
        self.faults: list[Fault] = []
        self.requests: list[Request] = []
        self.token = token
        # Who the token authenticates as: the name a 403 from the authorizer quotes.
        self.user = "system:serviceaccount:gpuq:gpuq-dispatcher"
        self.denials: list[Denial] = []
        self.watch_timeout_s = 30.0
        self.log_bytes_sent = 0  # the bodies of pod log answers, as sent
        self.log_answer_max = 0  # the largest of them
        # The log bytes the kubelet read from log files to answer (ReadLogs reads a file from
        # its start, whatever sinceTime says, up to where limitBytes stops it).
        self.log_bytes_scanned = 0
        self._log_answers: set[socket.socket] = set()  # log answers being written
        self._stopping = threading.Event()
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        self._server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)

    def __enter__(self) -> FakeApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        with self.store.lock:
            self.store.changed.notify_all()
        self._server.shutdown()
        self._server.server_close()

    def log_answers_open(self) -> int:
        """How many log answers are being written (not all sent, their client still there)."""
        with self.store.lock:
            return len(self._log_answers)

    def cut_log_answers(self) -> int:
        """Close the connections of the log answers still being written (what a proxy's or
        load balancer's idle timeout does to an answer its client stopped reading); the
        client reads what its socket had, then an answer cut short. Returns how many."""
        with self.store.lock:
            answers = list(self._log_answers)
        for conn in answers:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        return len(answers)

    def inject(self, fault: Fault) -> Fault:
        with self.store.lock:
            self.faults.append(fault)
        return fault

    def calls(self, method: str | None = None, contains: str = "") -> list[Request]:
        with self.store.lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method) and contains in r.path
            ]

    def deny(self, denial: Denial) -> Denial:
        with self.store.lock:
            self.denials.append(denial)
        return denial

    def authorize(
        self,
        method: str,
        rtype: ResourceType,
        namespace: str | None,
        name: str | None,
        sub: str | None,
        q: dict[str, str],
    ) -> None:
        """403 Forbidden for a denied request, in the API server's words
        (responsewriters.Forbidden's forbiddenMessage, then errors.NewForbidden)."""
        verb = request_verb(method, name, q)
        resource = f"{rtype.plural}/{sub}" if sub else rtype.plural
        if rtype.plural == "namespaces" and name is not None:
            namespace = name  # RequestInfo: a namespace is its own namespace
        with self.store.lock:
            denial = next(
                (
                    d
                    for d in self.denials
                    if d.verb in (verb, "*")
                    and d.resource == resource
                    and d.group == rtype.group
                    and d.namespace in (None, namespace)
                ),
                None,
            )
        if denial is None:
            return
        where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        message = (
            f'User "{self.user}" cannot {verb} resource "{resource}" in API group '
            f'"{rtype.group}" {where}'
        )
        if denial.reason:
            message += f": {denial.reason}"
        named = f' "{name}"' if name else ""
        details = {"group": rtype.group, "kind": rtype.plural, **({"name": name} if name else {})}
        raise ApiError(
            403, "Forbidden", f"{rtype.qualified}{named} is forbidden: {message}", details
        )

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self.store.lock:
            for f in self.faults:
                if f.matches(method, path):
                    f.times -= 1
                    return f
        return None

    # --- request handling (called by the handler threads) ---

    def route(self, path: str) -> tuple[ResourceType, str | None, str | None, str | None]:
        """(type, namespace, name, subresource) from an API path."""
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        elif len(rest) == 2 and rest[0] == "namespaces":
            return self._type(group, version, "namespaces"), None, rest[1], None
        if not rest:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        rtype = self._type(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if rtype.namespaced != (namespace is not None) and name is not None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return rtype, namespace, name, sub

    def _type(self, group: str, version: str, plural: str) -> ResourceType:
        try:
            return self.store.types[(group, version, plural)]
        except KeyError:
            raise ApiError(
                404, "NotFound", "the server could not find the requested resource"
            ) from None

    def admit(self, rtype: ResourceType, obj: dict[str, Any], field_validation: str) -> list[str]:
        """Schema, semantic and admission checks; returns warnings."""
        if obj.get("apiVersion") != rtype.api_version or obj.get("kind") != rtype.kind:
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({obj.get('apiVersion')}) does not match the "
                f"expected API version ({rtype.api_version})",
            )
        try:
            if rtype.crd is not None:
                warnings = rules.check_custom(
                    obj, rules.crd_schema(rtype.crd, rtype.version), field_validation
                )
            else:
                warnings = rules.check_builtin(obj, self.store.version, field_validation)
            causes = rules.semantic_causes(obj)
            if causes:
                raise rules.Rejection(
                    422,
                    "Invalid",
                    rules.invalid_message(
                        rtype.kind, rtype.group, obj["metadata"].get("name", ""), causes
                    ),
                    tuple(causes),
                )
        except rules.Rejection as r:
            details = {
                "name": obj.get("metadata", {}).get("name", ""),
                "group": rtype.group,
                "kind": rtype.kind,
                "causes": [c.as_dict() for c in r.causes],
            }
            raise ApiError(r.code, r.reason, r.message, details if r.causes else None) from None
        if rtype.group == "batch.volcano.sh":
            denial = rules.volcano_webhook_denial(obj, self.store.volcano_queues)
            if denial:
                raise ApiError(
                    400,
                    "BadRequest",
                    f'admission webhook "validatejob.volcano.sh" denied the request: {denial}',
                )
        return warnings

    def create(
        self,
        rtype: ResourceType,
        namespace: str | None,
        body: dict[str, Any],
        field_validation: str,
        dry_run: bool,
    ) -> tuple[dict[str, Any], list[str]]:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if rtype.namespaced:
            if meta.get("namespace") not in (None, namespace):
                raise ApiError(
                    400,
                    "BadRequest",
                    (
                        "the namespace of the provided object does not match the namespace sent "
                        "on the request"
                    ),
                )
            meta["namespace"] = namespace
        with self.store.lock:
            if rtype.namespaced:
                self.store.require_namespace(namespace or "")
            obj.pop("status", None)  # the status subresource is written separately
            for key in (
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "deletionTimestamp",
                "generation",
            ):
                meta.pop(key, None)
            warnings = self.admit(rtype, obj, field_validation)
            self._default(rtype, obj)
            if dry_run:
                return obj, warnings
            return copy.deepcopy(self.store.insert(rtype, obj)), warnings

    def _default(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        """What the real API server fills in on create."""
        if rtype.kind == "Job" and rtype.group == "batch":
            spec = obj["spec"]
            controller_uid = str(uuid.uuid4())
            labels = {
                "batch.kubernetes.io/controller-uid": controller_uid,
                "controller-uid": controller_uid,
                "batch.kubernetes.io/job-name": obj["metadata"]["name"],
                "job-name": obj["metadata"]["name"],
            }
            spec.setdefault(
                "selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": controller_uid}}
            )
            template_meta = spec["template"].setdefault("metadata", {})
            template_meta["labels"] = {**(template_meta.get("labels") or {}), **labels}
            spec.setdefault("completionMode", "NonIndexed")
            spec.setdefault("backoffLimit", 6)
            spec.setdefault("parallelism", 1)
            spec.setdefault("completions", spec["parallelism"])
            spec.setdefault("suspend", False)
            obj["status"] = {}
        elif rtype.kind == "Job" and rtype.group == "batch.volcano.sh":
            # Volcano's mutating webhook (mutatejob.volcano.sh, patchDefaultMaxRetry): an int32
            # maxRetry of 0 is unset, and becomes 3.
            obj["spec"]["maxRetry"] = obj["spec"].get("maxRetry") or 3
        elif rtype.kind == "Pod":
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
            obj["spec"].setdefault("restartPolicy", "Always")
            _default_toleration_seconds(obj["spec"])
        elif rtype.kind == "Service":
            spec = obj.setdefault("spec", {})
            spec.setdefault("type", "ClusterIP")
            for port in spec.get("ports") or []:
                port.setdefault("protocol", "TCP")
                port.setdefault("targetPort", port.get("port"))
        elif rtype.kind == "Namespace":
            obj["status"] = {"phase": "Active"}

    def update(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: dict[str, Any],
        sub: str | None,
        field_validation: str,
    ) -> tuple[dict[str, Any], list[str]]:
        with self.store.lock:
            current = self.store.get(rtype, namespace or "", name)
            sent_rv = (body.get("metadata") or {}).get("resourceVersion")
            if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {rtype.qualified} "{name}": '
                    "the object has been modified; please apply your changes to the latest "
                    "version and try again",
                    {"name": name, "group": rtype.group, "kind": rtype.plural},
                )
            new = copy.deepcopy(body)
            new_meta = new.setdefault("metadata", {})
            for key in (
                "uid",
                "creationTimestamp",
                "namespace",
                "name",
                "deletionTimestamp",
                "generation",
            ):
                if key in current["metadata"]:
                    new_meta[key] = current["metadata"][key]
            if sub == "status":
                merged = copy.deepcopy(current)
                merged["status"] = new.get("status", {})
                return copy.deepcopy(self.store.replace(rtype, merged, spec_changed=False)), []
            new["status"] = copy.deepcopy(current.get("status"))
            warnings = self.admit(rtype, new, field_validation)
            self._immutable(rtype, current, new)
            return copy.deepcopy(self.store.replace(rtype, new)), warnings

    def _immutable(self, rtype: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> None:
        if rtype.kind == "Job" and rtype.group == "batch":
            causes = []
            for key in ("template", "selector", "completionMode"):
                if old["spec"].get(key) != new["spec"].get(key) and key in new["spec"]:
                    causes.append(rules.invalid(f"spec.{key}", "...", "field is immutable"))
            if "template" not in new["spec"]:
                causes.append(rules.required("spec.template"))
            if causes:
                name = new["metadata"]["name"]
                raise ApiError(
                    422,
                    "Invalid",
                    rules.invalid_message("Job", "batch", name, causes),
                    {
                        "name": name,
                        "group": "batch",
                        "kind": "Job",
                        "causes": [c.as_dict() for c in causes],
                    },
                )

    def patch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        patch: Any,
        content_type: str,
        sub: str | None,
        field_validation: str,
    ) -> tuple[dict[str, Any], list[str]]:
        if content_type not in (
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/json-patch+json",
        ):
            raise ApiError(
                415,
                "UnsupportedMediaType",
                (
                    f"the body of the request was in an unknown format - accepted media "
                    f"types include: application/json-patch+json, application/merge-patch+json, "
                    f"application/strategic-merge-patch+json (got {content_type})"
                ),
            )
        with self.store.lock:
            current = self.store.get(rtype, namespace or "", name)
            if content_type == "application/json-patch+json":
                try:
                    patched = json_patch(current, patch)
                except ValueError:
                    raise ApiError(
                        422,
                        "Invalid",
                        "the server rejected our request due to an error in our request",
                        {},
                    ) from None
            else:
                patched = merge_patch(current, patch)
            # A resourceVersion the patch carries is a precondition (update() answers 409 when
            # it is stale); one it does not carry is the current one.
            return self.update(rtype, namespace, name, patched, sub, field_validation)

    def list(self, rtype: ResourceType, namespace: str | None, q: dict[str, str]) -> dict[str, Any]:
        labels = parse_label_selector(q.get("labelSelector", ""))
        fields = parse_field_selector(q.get("fieldSelector", ""))
        with self.store.lock:
            items = [
                copy.deepcopy(o)
                for (ns, _), o in sorted(self.store.objects[rtype].items())
                if (namespace is None or ns == namespace)
                and labels(o["metadata"].get("labels") or {})
                and fields(o)
            ]
            rev = self.store.rev
        start = 0
        if q.get("continue"):
            try:
                start = json.loads(base64.b64decode(q["continue"]))["start"]
            except (ValueError, KeyError):
                raise ApiError(400, "BadRequest", "continue key is not valid") from None
        meta: dict[str, Any] = {"resourceVersion": str(rev)}
        if q.get("limit") and int(q["limit"]) > 0:
            end = start + int(q["limit"])
            if end < len(items):
                meta["continue"] = base64.b64encode(json.dumps({"start": end}).encode()).decode()
                meta["remainingItemCount"] = len(items) - end
            items = items[start:end]
        else:
            items = items[start:]
        return {
            "kind": f"{rtype.kind}List",
            "apiVersion": rtype.api_version,
            "metadata": meta,
            "items": items,
        }

    def watch(
        self, rtype: ResourceType, namespace: str | None, q: dict[str, str]
    ) -> Iterator[dict[str, Any]]:
        labels = parse_label_selector(q.get("labelSelector", ""))
        fields = parse_field_selector(q.get("fieldSelector", ""))
        timeout = float(q.get("timeoutSeconds") or self.watch_timeout_s)
        deadline = time.monotonic() + timeout

        def visible(o: dict[str, Any] | None) -> bool:
            return (
                o is not None
                and (namespace is None or o["metadata"].get("namespace") == namespace)
                and labels(o["metadata"].get("labels") or {})
                and fields(o)
            )

        rv_text = q.get("resourceVersion", "")
        with self.store.lock:
            if rv_text in ("", "0"):
                since = self.store.rev
                initial = [
                    copy.deepcopy(o)
                    for _, o in sorted(self.store.objects[rtype].items())
                    if visible(o)
                ]
            else:
                since = int(rv_text)
                initial = []
                if since < self.store.compacted:
                    yield {
                        "type": "ERROR",
                        "object": status_body(
                            410,
                            "Expired",
                            f"too old resource version: {since} ({self.store.compacted + 1})",
                        ),
                    }
                    return
        for obj in initial:
            yield {"type": "ADDED", "object": obj}
        while not self._stopping.is_set():
            with self.store.lock:
                pending = [e for e in self.store.events if e.rev > since and e.rtype == rtype]
                if not pending:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self.store.changed.wait(min(left, 0.5))
                    continue
            for e in pending:
                since = e.rev
                now_in, was_in = visible(e.obj), visible(e.old)
                if e.type == "MODIFIED" and now_in != was_in:
                    yield {"type": "ADDED" if now_in else "DELETED", "object": e.obj}
                elif now_in:
                    yield {"type": e.type, "object": e.obj}

    def pod_log(self, namespace: str, name: str, q: dict[str, str]) -> bytes:
        return b"".join(piece for _, piece in self.pod_log_pieces(namespace, name, q))

    def pod_log_pieces(
        self, namespace: str, name: str, q: dict[str, str]
    ) -> list[tuple[int, bytes]]:
        """A pod log answer as the kubelet writes it, entry by entry: (the log bytes it read
        from the container's log file to come to this piece, the piece). It reads the file
        from its start (from the tail's start with tailLines) whatever sinceTime says, and
        stops once limitBytes are written; the last piece may be empty (entries read, then
        skipped as older than sinceTime)."""
        with self.store.lock:
            pod = self.store.get(self.store.types[("", "v1", "pods")], namespace, name)
            containers = [c["name"] for c in pod["spec"].get("containers") or []]
            container = q.get("container") or (containers[0] if len(containers) == 1 else None)
            if container is None:
                raise ApiError(
                    400,
                    "BadRequest",
                    (
                        f"a container name must be specified for pod {name}, choose one of: "
                        f"{containers}"
                    ),
                )
            if container not in containers:
                raise ApiError(
                    400, "BadRequest", f"container {container} is not valid for pod {name}"
                )
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            state = next((s.get("state") or {} for s in statuses if s.get("name") == container), {})
            if not state or "waiting" in state:
                why = (state.get("waiting") or {}).get("reason", "ContainerCreating")
                raise ApiError(
                    400,
                    "BadRequest",
                    f'container "{container}" in pod "{name}" is waiting to start: {why}',
                )
            lines = list(self.store.logs.get((namespace, name, container), []))
            now = self.store.clock()
        since = float("-inf")
        if q.get("sinceSeconds"):
            since = now - int(q["sinceSeconds"])
        if q.get("sinceTime"):
            # The API server hands sinceTime to the kubelet as time.RFC3339: whole seconds.
            since = max(since, float(int(_parse_rfc3339(q["sinceTime"]))))
        if q.get("tailLines"):
            lines = lines[-int(q["tailLines"]) :] if int(q["tailLines"]) > 0 else []
        # As the kubelet's ReadLogs: an entry older than `since` is skipped, and the
        # timestamp goes only where a line starts (an entry after one that did not end its
        # line carries none, even when that one was skipped); limitBytes counts the stamps.
        out: list[tuple[int, bytes]] = []
        left = int(q["limitBytes"]) if q.get("limitBytes") else None
        read = 0
        at_line_start = True
        for ln in lines:
            read += len(ln.data)
            if ln.at >= since:
                piece = ln.data
                if q.get("timestamps") == "true" and at_line_start:
                    piece = log_timestamp(ln.at).encode() + b" " + piece
                if left is not None:
                    piece = piece[:left]
                    left -= len(piece)
                out.append((read, piece))
                read = 0
                if left == 0:
                    return out
            at_line_start = not ln.data or ln.data.endswith(b"\n")
        if read:
            out.append((read, b""))
        return out


def _handler(api: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        _request: Request | None = None  # the one being answered

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def handle_one_request(self) -> None:
            try:
                self._handle_one_request()
            except OSError:  # the client closed (a log answer it read no further), or a cut
                self.close_connection = True

        def _handle_one_request(self) -> None:
            """BaseHTTPRequestHandler's, with the API server's bound on the request line in
            place of Python's (64 KiB, a 414): a label selector travels in it."""
            line = self.rfile.readline(MAX_REQUEST_LINE + 1)
            if len(line) > MAX_REQUEST_LINE:
                self._refuse_too_large()
                return
            if not line:
                self.close_connection = True
                return
            self.raw_requestline = line
            if not self.parse_request():
                return  # answered
            method = getattr(self, f"do_{self.command}", None)
            if method is None:
                self.send_error(501, f"Unsupported method ({self.command!r})")
                return
            method()
            self.wfile.flush()

        def _refuse_too_large(self) -> None:
            """What Go's net/http writes for a request whose line and headers pass its read
            limit, then closes; the rest of the request is read first (as its
            closeWriteAndWait lets the client finish), so the client reads the answer."""
            self.close_connection = True
            public = "431 Request Header Fields Too Large"
            self.wfile.write(
                f"HTTP/1.0 {public}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Connection: close\r\n\r\n{public}".encode()
            )
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(2.0)
            tail = b""
            with contextlib.suppress(OSError):
                while b"\r\n\r\n" not in tail:
                    piece = self.rfile.read1(1 << 16)
                    if not piece:
                        break
                    tail = tail[-3:] + piece

        def _send_json(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            if self._request is not None:
                listed = body.get("items") if isinstance(body, dict) else None
                with api.store.lock:
                    self._request.sent += len(data)
                    self._request.items += len(listed or [])
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _drop(self) -> None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if length > MAX_BODY_BYTES:
                raise ApiError(
                    413,
                    "RequestEntityTooLarge",
                    f"Request entity too large: limit is {MAX_BODY_BYTES}",
                )
            try:
                return json.loads(raw or b"{}")
            except ValueError:
                raise ApiError(
                    400, "BadRequest", "the body of the request could not be decoded as JSON"
                ) from None

        def _dispatch(self, method: str) -> None:
            url = urlsplit(self.path)
            q = {k: v[-1] for k, v in parse_qs(url.query).items()}
            self._request = Request(method, url.path, q)
            with api.store.lock:
                api.requests.append(self._request)
            fault = api.take_fault(method, url.path)
            body = None
            if method in ("POST", "PUT", "PATCH"):
                try:
                    body = self._body()
                except ApiError as e:
                    self._send_json(e.code, status_body(e.code, e.reason, e.message))
                    return
            if fault is not None:
                if fault.kind == "drop":
                    self._drop()
                    return
                if fault.kind == "slow":
                    time.sleep(fault.delay)
                if fault.kind == "race" and fault.action is not None:
                    fault.action()
                if fault.kind == "status":
                    reason = {
                        400: "BadRequest",
                        429: "TooManyRequests",
                        500: "InternalError",
                        503: "ServiceUnavailable",
                        403: "Forbidden",
                        401: "Unauthorized",
                        504: "Timeout",
                    }.get(fault.code, "InternalError")
                    headers = (
                        {"Retry-After": str(int(fault.retry_after))}
                        if fault.retry_after is not None
                        else {}
                    )
                    self._send_json(
                        fault.code, status_body(fault.code, reason, f"injected {reason}"), headers
                    )
                    return
            if api.token is not None and self.headers.get("Authorization") != f"Bearer {api.token}":
                self._send_json(401, status_body(401, "Unauthorized", "Unauthorized"))
                return
            try:
                self._serve(
                    method,
                    url.path,
                    q,
                    body,
                    drop_after=fault is not None and fault.kind == "drop_after",
                )
            except ApiError as e:
                self._send_json(e.code, status_body(e.code, e.reason, e.message, e.details))
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _serve(
            self, method: str, path: str, q: dict[str, str], body: Any, *, drop_after: bool
        ) -> None:
            rtype, namespace, name, sub = api.route(path)
            api.authorize(method, rtype, namespace, name, sub, q)
            fv = q.get("fieldValidation", "Warn")
            dry = q.get("dryRun") == "All"
            warnings: list[str] = []
            if method == "GET" and sub == "log" and rtype.kind == "Pod":
                pieces = api.pod_log_pieces(namespace or "", name or "", q)
                if drop_after:
                    return self._drop()
                return self._stream_log(pieces)
            if sub not in (None, "status"):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if method == "GET" and name is None and q.get("watch") in ("true", "1"):
                return self._stream(api.watch(rtype, namespace, q))
            code = 200
            if method == "GET":
                result = (
                    api.list(rtype, namespace, q)
                    if name is None
                    else copy.deepcopy(api.store.get(rtype, namespace or "", name))
                )
            elif method == "POST" and name is None:
                result, warnings = api.create(rtype, namespace, body, fv, dry)
                code = 201
            elif method == "PUT" and name is not None:
                result, warnings = api.update(rtype, namespace, name, body, sub, fv)
            elif method == "PATCH" and name is not None:
                result, warnings = api.patch(
                    rtype, namespace, name, body, self.headers.get("Content-Type", ""), sub, fv
                )
            elif method == "DELETE" and name is not None:
                grace = q.get("gracePeriodSeconds")
                with api.store.lock:
                    gone = api.store.delete(
                        rtype,
                        namespace or "",
                        name,
                        q.get("propagationPolicy"),
                        int(grace) if grace is not None else None,
                    )
                    still = api.store.objects[rtype].get((namespace or "", name))
                result = (
                    copy.deepcopy(still)
                    if still
                    else {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": {
                            "name": name,
                            "group": rtype.group,
                            "kind": rtype.plural,
                            "uid": gone["metadata"]["uid"],
                        },
                    }
                )
            else:
                raise ApiError(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                )
            if drop_after:
                return self._drop()
            headers = {"Warning": ", ".join(f'299 - "{w}"' for w in warnings)} if warnings else {}
            self._send_json(code, result, headers)

        def _stream_log(self, pieces: list[tuple[int, bytes]]) -> None:
            """A log answer streamed as the API server relays the kubelet's (chunked, of no
            length known in advance), counted as it is written: a client that stops reading
            and closes stops it (what the kernel's socket buffers took counts as sent)."""
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            sent = 0
            with api.store.lock:
                api._log_answers.add(self.connection)
            try:
                batch: list[bytes] = []
                size = read = 0
                for i, (scanned, piece) in enumerate(pieces):
                    batch.append(piece)
                    size, read = size + len(piece), read + scanned
                    if size < LOG_WRITE and i < len(pieces) - 1:
                        continue
                    if size:
                        data = b"".join(batch)
                        self.wfile.write(f"{size:x}\r\n".encode() + data + b"\r\n")
                    sent += size
                    with api.store.lock:
                        api.log_bytes_sent += size
                        api.log_bytes_scanned += read
                    batch, size, read = [], 0, 0
                self.wfile.write(b"0\r\n\r\n")
            except OSError:  # the client closed, or the answer was cut
                self.close_connection = True
            finally:
                with api.store.lock:
                    api.log_answer_max = max(api.log_answer_max, sent)
                    api._log_answers.discard(self.connection)

        def _stream(self, events: Iterator[dict[str, Any]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event in events:
                    line = json.dumps(event).encode() + b"\n"
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_PUT(self) -> None:
            self._dispatch("PUT")

        def do_PATCH(self) -> None:
            self._dispatch("PATCH")

        def do_DELETE(self) -> None:
            self._dispatch("DELETE")

    return Handler
