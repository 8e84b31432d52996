"""What the fake API server checks before it stores an object, as a real one would.

Three layers, each answering the way the real component does:
- the official OpenAPI schemas (kubernetes-validate, one pinned minor) for built-in kinds:
  a wrong type is a decode error (400 BadRequest); a missing required field or a value
  outside an enum is 422 Invalid; unknown fields are dropped with a Warning header, or 400
  with `?fieldValidation=Strict`;
- the Volcano CRD's openAPIV3Schema (jsonschema Draft 7): 422 Invalid with causes; unknown
  fields pruned (400 when Strict); schema defaults applied;
- the semantic rules a real API server enforces in Go beyond the schema (names, labels,
  quantities, restart policies, counts, extended resources...), as 422 causes, and the
  Volcano admission webhook's rules as a 400 denial.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import referencing
import referencing.jsonschema
import yaml

SCHEMA_ROOT = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# The grammar of resource.Quantity (k8s.io/apimachinery/pkg/api/resource).
QUANTITY = re.compile(
    r"^[+-]?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?(\d+(\.\d*)?|\.\d+))?$"
)
# The env-name rule every supported minor accepts (1.34 relaxes it further).
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
FIELD_PATHS = re.compile(
    r"^(metadata\.(name|namespace|uid|labels|annotations)"
    r"|metadata\.(labels|annotations)\['[^']+'\]"
    r"|spec\.(nodeName|serviceAccountName)|status\.(hostIP|hostIPs|podIP|podIPs))$"
)
NATIVE_RESOURCES = {"cpu", "memory", "ephemeral-storage", "pods"}
VOLCANO_EVENTS = {
    "*",
    "PodPending",
    "PodRunning",
    "PodFailed",
    "PodEvicted",
    "Unknown",
    "TaskCompleted",
    "OutOfSync",
    "CommandIssued",
    "JobUpdated",
    "TaskFailed",
}
VOLCANO_ACTIONS = {
    "AbortJob",
    "RestartJob",
    "RestartTask",
    "RestartPod",
    "RestartPartition",
    "TerminateJob",
    "CompleteJob",
    "ResumeJob",
    "SyncJob",
    "EnqueueJob",
    "SyncQueue",
    "OpenQueue",
    "CloseQueue",
}


@dataclass(frozen=True)
class Cause:
    field: str
    reason: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "reason": self.reason, "message": self.message}


class Rejection(Exception):
    """The API server's answer to an unacceptable object."""

    def __init__(
        self, code: int, reason: str, message: str, causes: tuple[Cause, ...] = ()
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.causes = causes


def required(field: str) -> Cause:
    return Cause(field, "FieldValueRequired", "Required value")


def invalid(field: str, value: Any, why: str) -> Cause:
    return Cause(field, "FieldValueInvalid", f"Invalid value: {json.dumps(value)}: {why}")


def not_supported(field: str, value: Any, supported: list[str]) -> Cause:
    listed = ", ".join(json.dumps(s) for s in supported)
    return Cause(
        field,
        "FieldValueNotSupported",
        f"Unsupported value: {json.dumps(value)}: supported values: {listed}",
    )


def invalid_message(kind: str, group: str, name: str, causes: list[Cause]) -> str:
    """`Job.batch "x" is invalid: <field>: <message>` (bracketed when there are several)."""
    parts = [f"{c.field}: {c.message}" for c in causes]
    body = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    qualified = f"{kind}.{group}" if group else kind
    return f'{qualified} "{name}" is invalid: {body}'


# --- schemas ---------------------------------------------------------------------------------


# The integer formats the schemas declare, which jsonschema leaves unchecked: a real API server
# decodes built-in kinds into Go int32/int64 fields (an overflow is a decode error, 400) and
# checks a CRD's `format: int32` in its structural schema validation (422).
INT_FORMATS = jsonschema.FormatChecker(formats=())


@INT_FORMATS.checks("int32")
def _int32(value: Any) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


@INT_FORMATS.checks("int64")
def _int64(value: Any) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def _path(parts: Iterator[Any] | Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


@cache
def _builtin_validator(version: str, strict: bool, filename: str) -> jsonschema.Validator:
    folder = SCHEMA_ROOT / f"v{version}.0-local{'-strict' if strict else ''}"
    schema = json.loads((folder / filename).read_text())
    definitions = json.loads((folder / "_definitions.json").read_text())
    registry: referencing.Registry[Any] = referencing.Registry().with_resources(
        [
            (
                "https://kubernetes.io/api/_definitions.json",
                referencing.Resource.from_contents(definitions),
            ),
        ]
    )
    registry = referencing.Resource.from_contents(schema) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry, format_checker=INT_FORMATS)


def _schema_file(api_version: str, kind: str) -> str:
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return f"{kind.lower()}-{group_version}.json"


def _unknown_fields(error: jsonschema.ValidationError) -> list[tuple[list[Any], str]]:
    known = set((error.schema or {}).get("properties", {}))
    instance = error.instance if isinstance(error.instance, dict) else {}
    return [(list(error.absolute_path), key) for key in instance if key not in known]


def _drop(obj: Any, path: list[Any], key: str) -> None:
    for p in path:
        obj = obj[p]
    obj.pop(key, None)


def check_builtin(obj: dict[str, Any], version: str, field_validation: str) -> list[str]:
    """Schema-check a built-in object in place; returns warnings for dropped unknown fields."""
    filename = _schema_file(obj["apiVersion"], obj["kind"])
    lax = _builtin_validator(version, False, filename)
    type_errors = []
    causes = []
    for err in sorted(lax.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
        field = _path(err.absolute_path)
        if err.validator == "required":
            missing = re.findall(r"'([^']+)' is a required property", err.message)
            causes += [required(f"{field}.{m}" if field else m) for m in missing]
        elif err.validator == "enum":
            causes.append(not_supported(field, err.instance, list(err.validator_value)))
        else:
            type_errors.append((field, err))
    if type_errors:
        field, err = type_errors[0]
        raise Rejection(
            400,
            "BadRequest",
            f'{obj["kind"]} in version "{obj["apiVersion"].split("/")[-1]}" cannot be handled as a '
            f"{obj['kind']}: json: cannot unmarshal {json.dumps(err.instance)} into field {field}: "
            f"{err.message}",
        )
    if causes:
        raise Rejection(
            422,
            "Invalid",
            invalid_message(obj["kind"], _group(obj), obj["metadata"].get("name", ""), causes),
            tuple(causes),
        )
    strict = _builtin_validator(version, True, filename)
    unknown = [
        u
        for err in strict.iter_errors(obj)
        if err.validator == "additionalProperties"
        for u in _unknown_fields(err)
    ]
    return _handle_unknown(obj, unknown, field_validation)


def _handle_unknown(
    obj: dict[str, Any], unknown: list[tuple[list[Any], str]], field_validation: str
) -> list[str]:
    names = [_path([*path, key]) for path, key in unknown]
    if unknown and field_validation == "Strict":
        detail = ", ".join(f'unknown field "{n}"' for n in names)
        raise Rejection(400, "BadRequest", f"strict decoding error: {detail}")
    for path, key in sorted(unknown, key=lambda u: -len(u[0])):
        _drop(obj, path, key)
    return [] if field_validation == "Ignore" else [f'unknown field "{n}"' for n in names]


def _group(obj: dict[str, Any]) -> str:
    api = obj.get("apiVersion", "")
    return api.split("/")[0] if "/" in api else ""


@cache
def crd_schema(path: Path, version: str) -> dict[str, Any]:
    crd = yaml.safe_load(path.read_text())
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            schema: dict[str, Any] = v["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(version)


def _prune_and_default(
    schema: dict[str, Any], value: Any, path: list[Any], unknown: list[tuple[list[Any], str]]
) -> None:
    if isinstance(value, dict) and schema.get("type") == "object":
        props = schema.get("properties")
        if props is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
            unknown += [(path, k) for k in value if k not in props]
            for key, sub in props.items():
                if key not in value and "default" in sub:
                    value[key] = copy.deepcopy(sub["default"])
                if key in value and not (path == [] and key == "metadata"):
                    _prune_and_default(sub, value[key], [*path, key], unknown)
        elif isinstance(schema.get("additionalProperties"), dict):
            for key, item in value.items():
                _prune_and_default(schema["additionalProperties"], item, [*path, key], unknown)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _prune_and_default(schema["items"], item, [*path, i], unknown)


def check_custom(obj: dict[str, Any], schema: dict[str, Any], field_validation: str) -> list[str]:
    """A CRD object as the API server treats it: prune unknown fields, apply defaults, then
    validate against the structural schema."""
    unknown: list[tuple[list[Any], str]] = []
    _prune_and_default(schema, obj, [], unknown)
    warnings = _handle_unknown(obj, unknown, field_validation)
    validator = jsonschema.Draft7Validator(schema, format_checker=INT_FORMATS)
    causes = []
    for err in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
        field = _path(err.absolute_path)
        if err.validator == "required":
            missing = re.findall(r"'([^']+)' is a required property", err.message)
            causes += [required(f"{field}.{m}" if field else m) for m in missing]
        elif err.validator == "enum":
            causes.append(not_supported(field, err.instance, list(err.validator_value)))
        else:
            causes.append(invalid(field, err.instance, err.message))
    if causes:
        raise Rejection(
            422,
            "Invalid",
            invalid_message(obj["kind"], _group(obj), obj["metadata"].get("name", ""), causes),
            tuple(causes),
        )
    return warnings


# --- semantic rules (Go validation the schema does not carry) ----------------------------------


def _name_rule(kind: str) -> tuple[re.Pattern[str], int, str]:
    if kind == "Service":
        return (
            DNS1035_LABEL,
            63,
            (
                "a DNS-1035 label must consist of lower case alphanumeric characters or "
                "'-', start with an alphabetic character, and end with an alphanumeric "
                "character"
            ),
        )
    if kind in ("Pod", "Node"):
        return (
            DNS1123_SUBDOMAIN,
            253,
            (
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric "
                "character"
            ),
        )
    return (
        DNS1123_LABEL,
        63,
        (
            "a lowercase RFC 1123 label must consist of lower case alphanumeric "
            "characters or '-', and must start and end with an alphanumeric "
            "character"
        ),
    )


def _qualified_key(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return "prefix part must be a DNS-1123 subdomain"
    if not name or len(name) > 63 or not QUALIFIED_NAME.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character (max 63)"
        )
    return None


def labels_causes(field: str, labels: Any) -> list[Cause]:
    causes = []
    for key, value in (labels or {}).items():
        why = _qualified_key(key)
        if why:
            causes.append(invalid(field, key, why))
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            causes.append(
                invalid(
                    f"{field}",
                    value,
                    (
                        "a valid label must be an empty string or consist of alphanumeric "
                        "characters, '-', '_' or '.', and must start and end with an "
                        "alphanumeric character (max 63)"
                    ),
                )
            )
    return causes


def metadata_causes(kind: str, meta: dict[str, Any]) -> list[Cause]:
    causes = []
    name = meta.get("name")
    pattern, max_len, why = _name_rule(kind)
    if not name:
        causes.append(required("metadata.name"))
    elif len(name) > max_len:
        causes.append(invalid("metadata.name", name, f"must be no more than {max_len} characters"))
    elif not pattern.match(name):
        causes.append(invalid("metadata.name", name, why))
    causes += labels_causes("metadata.labels", meta.get("labels"))
    annotations = meta.get("annotations") or {}
    for key in annotations:
        if _qualified_key(key):
            causes.append(invalid("metadata.annotations", key, _qualified_key(key)))
    if sum(len(k) + len(v) for k, v in annotations.items()) > 256 * 1024:
        causes.append(
            Cause(
                "metadata.annotations",
                "FieldValueTooLong",
                "Too long: must have at most 262144 bytes",
            )
        )
    return causes


def _quantity_causes(field: str, resources: dict[str, Any]) -> list[Cause]:
    causes = []
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    for section, values in (("limits", limits), ("requests", requests)):
        for res, qty in values.items():
            f = f"{field}.{section}[{res}]"
            text = str(qty)
            # validateResourceName: every key is a qualified name (no '+', at most 63).
            why = _qualified_key(res)
            if why:
                causes.append(invalid(f, res, why))
                continue
            if not QUANTITY.match(text):
                causes.append(
                    invalid(
                        f, qty, "must match the regex ^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
                    )
                )
                continue
            if res not in NATIVE_RESOURCES and "/" in res and not res.startswith("kubernetes.io/"):
                if not re.fullmatch(r"\d+", text):
                    causes.append(invalid(f, qty, "must be an integer"))
                if section == "requests" and res not in limits:
                    causes.append(
                        Cause(
                            f,
                            "FieldValueForbidden",
                            "Forbidden: Limit must be set for non overcommitable resources",
                        )
                    )
                elif section == "requests" and str(limits[res]) != text:
                    causes.append(invalid(f, qty, f"must be equal to {res} limit of {limits[res]}"))
    return causes


def _env_causes(field: str, env: list[dict[str, Any]]) -> list[Cause]:
    causes = []
    for i, var in enumerate(env or []):
        f = f"{field}[{i}]"
        name = var.get("name", "")
        if not name:
            causes.append(required(f"{f}.name"))
        elif not ENV_NAME.match(name):
            causes.append(
                invalid(
                    f"{f}.name",
                    name,
                    (
                        "a valid environment variable name must consist of alphabetic "
                        "characters, digits, '_', '-', or '.', and must not start with a digit"
                    ),
                )
            )
        if "value" in var and var.get("valueFrom"):
            causes.append(
                invalid(f"{f}.valueFrom", "", "may not be specified when `value` is not empty")
            )
        ref = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if ref is not None and not FIELD_PATHS.match(ref):
            causes.append(
                not_supported(
                    f"{f}.valueFrom.fieldRef.fieldPath",
                    ref,
                    [
                        "metadata.name",
                        "metadata.namespace",
                        "metadata.uid",
                        "spec.nodeName",
                        "status.podIP",
                    ],
                )
            )
    return causes


def _affinity_causes(field: str, affinity: dict[str, Any]) -> list[Cause]:
    causes = []
    node = (
        (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    ) or {}
    for t, term in enumerate(node.get("nodeSelectorTerms") or []):
        for e, expr in enumerate(term.get("matchExpressions") or []):
            required_terms = f"{field}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            f = f"{required_terms}.nodeSelectorTerms[{t}].matchExpressions[{e}]"
            op = expr.get("operator")
            values = expr.get("values") or []
            if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
                causes.append(
                    not_supported(
                        f"{f}.operator", op, ["DoesNotExist", "Exists", "Gt", "In", "Lt", "NotIn"]
                    )
                )
            if op in ("In", "NotIn") and not values:
                causes.append(required(f"{f}.values"))
            if _qualified_key(expr.get("key", "")):
                causes.append(invalid(f"{f}.key", expr.get("key"), "must be a qualified name"))
            for v in values:
                if len(v) > 63 or not LABEL_VALUE.match(v):
                    causes.append(invalid(f"{f}.values", v, "a valid label value"))
    pod_anti = (
        (affinity.get("podAntiAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    ) or []
    for t, term in enumerate(pod_anti):
        if not term.get("topologyKey"):
            causes.append(
                required(
                    f"{field}.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[{t}].topologyKey"
                )
            )
        causes += labels_causes(
            f"{field}.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[{t}].labelSelector.matchLabels",
            (term.get("labelSelector") or {}).get("matchLabels"),
        )
    return causes


def pod_spec_causes(field: str, spec: dict[str, Any], *, in_job: bool) -> list[Cause]:
    causes = []
    containers = spec.get("containers") or []
    if not containers:
        causes.append(required(f"{field}.containers"))
    seen = set()
    for i, c in enumerate(containers):
        f = f"{field}.containers[{i}]"
        name = c.get("name", "")
        if not DNS1123_LABEL.match(name) or len(name) > 63:
            causes.append(invalid(f"{f}.name", name, "a lowercase RFC 1123 label"))
        elif name in seen:
            causes.append(
                Cause(f"{f}.name", "FieldValueDuplicate", f"Duplicate value: {json.dumps(name)}")
            )
        seen.add(name)
        if not c.get("image"):
            causes.append(required(f"{f}.image"))
        causes += _env_causes(f"{f}.env", c.get("env") or [])
        causes += _quantity_causes(f"{f}.resources", c.get("resources") or {})
    policy = spec.get("restartPolicy", "Always")
    allowed = ["OnFailure", "Never"] if in_job else ["Always", "OnFailure", "Never"]
    if policy not in allowed:
        causes.append(not_supported(f"{field}.restartPolicy", policy, allowed))
    if spec.get("activeDeadlineSeconds") is not None and not (
        1 <= spec["activeDeadlineSeconds"] <= 2**31 - 1
    ):
        causes.append(
            invalid(
                f"{field}.activeDeadlineSeconds",
                spec["activeDeadlineSeconds"],
                "must be between 1 and 2147483647, inclusive",
            )
        )
    if (
        spec.get("terminationGracePeriodSeconds") is not None
        and spec["terminationGracePeriodSeconds"] < 0
    ):
        causes.append(
            invalid(
                f"{field}.terminationGracePeriodSeconds",
                spec["terminationGracePeriodSeconds"],
                "must be greater than or equal to 0",
            )
        )
    causes += labels_causes(f"{field}.nodeSelector", spec.get("nodeSelector"))
    causes += _affinity_causes(f"{field}.affinity", spec.get("affinity") or {})
    for key in ("subdomain",):
        value = spec.get(key)
        if value is not None and (len(value) > 63 or not DNS1123_LABEL.match(value)):
            causes.append(invalid(f"{field}.{key}", value, "a lowercase RFC 1123 label"))
    pc = spec.get("priorityClassName")
    if pc is not None and not DNS1123_SUBDOMAIN.match(pc):
        causes.append(invalid(f"{field}.priorityClassName", pc, "a lowercase RFC 1123 subdomain"))
    return causes


def _non_negative(spec: dict[str, Any], field: str, keys: tuple[str, ...]) -> list[Cause]:
    return [
        invalid(f"{field}.{k}", spec[k], "must be greater than or equal to 0")
        for k in keys
        if isinstance(spec.get(k), int) and spec[k] < 0
    ]


def job_causes(obj: dict[str, Any]) -> list[Cause]:
    spec = obj.get("spec") or {}
    causes = _non_negative(
        spec, "spec", ("parallelism", "completions", "backoffLimit", "ttlSecondsAfterFinished")
    )
    if spec.get("activeDeadlineSeconds") is not None and spec["activeDeadlineSeconds"] <= 0:
        causes.append(
            invalid(
                "spec.activeDeadlineSeconds",
                spec["activeDeadlineSeconds"],
                "must be greater than 0",
            )
        )
    mode = spec.get("completionMode", "NonIndexed")
    if mode not in ("NonIndexed", "Indexed"):
        causes.append(not_supported("spec.completionMode", mode, ["NonIndexed", "Indexed"]))
    if mode == "Indexed" and spec.get("completions") is None:
        causes.append(required("spec.completions"))
    template = spec.get("template") or {}
    causes += labels_causes(
        "spec.template.metadata.labels", (template.get("metadata") or {}).get("labels")
    )
    pod = template.get("spec") or {}
    causes += pod_spec_causes("spec.template.spec", pod, in_job=True)
    if spec.get("podFailurePolicy") and pod.get("restartPolicy") != "Never":
        causes.append(
            invalid(
                "spec.template.spec.restartPolicy",
                pod.get("restartPolicy"),
                'only "Never" is supported when podFailurePolicy is specified',
            )
        )
    return causes


def service_causes(obj: dict[str, Any]) -> list[Cause]:
    spec = obj.get("spec") or {}
    causes = labels_causes("spec.selector", spec.get("selector"))
    for i, port in enumerate(spec.get("ports") or []):
        p = port.get("port")
        if not isinstance(p, int) or not 1 <= p <= 65535:
            causes.append(
                invalid(f"spec.ports[{i}].port", p, "must be between 1 and 65535, inclusive")
            )
    if spec.get("clusterIP") not in (None, "", "None") and not re.fullmatch(
        r"[0-9.:a-f]+", spec["clusterIP"]
    ):
        causes.append(
            invalid("spec.clusterIP", spec["clusterIP"], 'must be a valid IP address or "None"')
        )
    if not spec.get("ports") and spec.get("clusterIP") != "None":
        causes.append(required("spec.ports"))
    return causes


def semantic_causes(obj: dict[str, Any]) -> list[Cause]:
    kind = obj["kind"]
    causes = metadata_causes(kind, obj.get("metadata") or {})
    if kind == "Job" and obj["apiVersion"] == "batch/v1":
        causes += job_causes(obj)
    elif kind == "Pod":
        causes += pod_spec_causes("spec", obj.get("spec") or {}, in_job=False)
    elif kind == "Service":
        causes += service_causes(obj)
    return causes


def volcano_webhook_denial(obj: dict[str, Any], queues: dict[str, str]) -> str | None:
    """The checks of Volcano's validating admission webhook (validatejob.volcano.sh)."""
    spec = obj.get("spec") or {}
    tasks = spec.get("tasks") or []
    if not tasks:
        return "No task specified in job spec"
    problems = []
    names = [t.get("name", "") for t in tasks]
    if len(set(names)) != len(names):
        problems.append(f"duplicated task name {names}")
    total = sum(int(t.get("replicas") or 0) for t in tasks)
    if int(spec.get("minAvailable") or 0) > total:
        problems.append("job 'minAvailable' should not be greater than total replicas in tasks")
    for i, task in enumerate(tasks):
        for p in task.get("policies") or []:
            if p.get("event") and p["event"] not in VOLCANO_EVENTS:
                problems.append(f"invalid policy event {p['event']}")
            if p.get("action") and p["action"] not in VOLCANO_ACTIONS:
                problems.append(f"invalid policy action {p['action']}")
        pod = (task.get("template") or {}).get("spec") or {}
        for cause in pod_spec_causes(f"spec.tasks[{i}].template.spec", pod, in_job=True):
            problems.append(f"{cause.field}: {cause.message}")
        problems += [
            f"{c.field}: {c.message}"
            for c in labels_causes(
                f"spec.tasks[{i}].template.metadata.labels",
                ((task.get("template") or {}).get("metadata") or {}).get("labels"),
            )
        ]
    for p in spec.get("policies") or []:
        if p.get("action") and p["action"] not in VOLCANO_ACTIONS:
            problems.append(f"invalid policy action {p['action']}")
    queue = spec.get("queue", "default")
    if queue not in queues:
        problems.append(
            f'unable to find job queue: queues.scheduling.volcano.sh "{queue}" not found'
        )
    elif queues[queue] != "Open":
        problems.append(
            f"can only submit job to queue with state `Open`, queue `{queue}` status "
            f"is `{queues[queue]}`"
        )
    return "; ".join(problems) or None
