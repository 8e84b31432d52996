"""The cluster's actors, played in-process against a FakeApiServer: kube-scheduler, the Job
controller, Volcano's controller and plugins, the kubelet and the GPU Operator's MIG manager.

They write objects through the same store paths as the API (so watches and resourceVersions
see them) and use the status shapes in data/status_shapes.json. Pods are created through the
API server's admission, so every pod template gpuq emits is also checked as a Pod."""

from __future__ import annotations

import copy
import json
import math
import random
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from k8s_fakeapi import UNREACHABLE_TAINT, FakeApiServer, LogLine, ResourceType, now_rfc3339

SHAPES: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "status_shapes.json").read_text()
)
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
VOLCANO = ("batch.volcano.sh", "v1alpha1", "jobs")
BATCH = ("batch", "v1", "jobs")


def mig_resource(profile: str) -> str:
    """The device plugin's name for a MIG profile, mixed strategy (k8s-device-plugin
    internal/rm/rm.go: strings.ReplaceAll("mig-"+profile, "+", "."))."""
    return "nvidia.com/mig-" + profile.replace("+", ".")


def fill(template: Any, **values: Any) -> Any:
    """A shape with its {placeholders} filled; a whole-string placeholder keeps the value's type."""
    if isinstance(template, dict):
        return {k: fill(v, **values) for k, v in template.items()}
    if isinstance(template, list):
        return [fill(v, **values) for v in template]
    if isinstance(template, str):
        whole = _PLACEHOLDER.fullmatch(template)
        if whole and whole[1] in values:
            return values[whole[1]]
        return _PLACEHOLDER.sub(lambda m: str(values.get(m[1], m[0])), template)
    return template


def expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's $(VAR) expansion (k8s.io/kubernetes third_party/forked/golang/expansion):
    `$$` is `$`, `$(NAME)` is NAME's value when defined and left as written otherwise."""
    out, checkpoint, cursor = [], 0, 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            rest = text[cursor + 1 :]
            if rest[0] == "$":
                read, advance = "$", 1
            elif rest[0] == "(":
                close = rest.find(")", 1)
                if close == -1:
                    read, advance = "$(", 1
                else:
                    name = rest[1:close]
                    read, advance = env.get(name, f"$({name})"), close + 1
            else:
                read, advance = "$" + rest[0], 1
            out.append(read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


def container_argv(pod: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """What the kubelet would exec for the pod's first container, and its environment."""
    container = pod["spec"]["containers"][0]
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = expand(var["value"], env)
        elif ref := (var.get("valueFrom") or {}).get("fieldRef"):
            env[var["name"]] = _field(pod, ref["fieldPath"])
    argv = [
        expand(a, env) for a in [*(container.get("command") or []), *(container.get("args") or [])]
    ]
    return argv, env


def _eviction_due(taints: list[dict[str, Any]], tolerations: Any) -> float | None:
    """When the taint eviction controller deletes a pod on a node with these NoExecute taints
    (Unix time; None: never): at once if one is not tolerated, else the shortest
    tolerationSeconds of the tolerations used after the taint was added."""
    due: float | None = None
    for taint in taints:
        used = [t for t in tolerations or [] if _tolerates(t, taint)]
        if not used:
            return float("-inf")
        seconds = [t["tolerationSeconds"] for t in used if t.get("tolerationSeconds") is not None]
        if not seconds:
            continue
        added = taint.get("timeAdded")
        start = (
            datetime.fromisoformat(added.replace("Z", "+00:00")).timestamp()
            if added
            else float("-inf")
        )
        at = start + max(min(seconds), 0)
        due = at if due is None else min(due, at)
    return due


def _tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """v1.Toleration.ToleratesTaint: an empty effect matches any, an empty key with Exists
    matches every key; Equal compares values."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and toleration.get("value", "") == taint.get("value", "")


def _ts(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _field(pod: dict[str, Any], path: str) -> str:
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        return str((pod["metadata"].get(m[1]) or {}).get(m[2], ""))
    if path == "metadata.name":
        return str(pod["metadata"]["name"])
    if path == "spec.nodeName":
        return str(pod["spec"].get("nodeName", ""))
    return ""


def volcano_action(obj: dict[str, Any], event: str, pod: dict[str, Any]) -> str:
    """Volcano's applyPolicies (job_controller_util.go) for a pod's event: the policies of
    the pod's task, then the job's; the first whose event (or events) names it or `*`, or
    whose exitCode is the pod's main container's (PodFailed only); SyncJob when none does."""
    task = (pod["metadata"].get("annotations") or {}).get("volcano.sh/task-spec")
    code = None
    if event == "PodFailed":
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        terminated = (statuses[0].get("state") or {}).get("terminated") if statuses else None
        code = (terminated or {}).get("exitCode")
    policies = [
        *next((t.get("policies") or [] for t in obj["spec"]["tasks"] if t["name"] == task), []),
        *(obj["spec"].get("policies") or []),
    ]
    for policy in policies:
        events = [*([policy["event"]] if policy.get("event") else []), *policy.get("events", [])]
        if event in events or "*" in events:
            return str(policy["action"])
        if policy.get("exitCode") is not None and policy["exitCode"] == code:
            return str(policy["action"])
    return "SyncJob"


class Sim:
    def __init__(self, api: FakeApiServer, seed: int = 7) -> None:
        self.api = api
        self.store = api.store
        self.rng = random.Random(seed)

    # --- setup ---------------------------------------------------------------------------

    def _t(self, key: tuple[str, str, str]) -> ResourceType:
        return self.store.types[key]

    def namespace(self, name: str) -> None:
        self.api.create(
            self._t(("", "v1", "namespaces")),
            None,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
            "Strict",
            False,
        )

    def queue(self, name: str, state: str = "Open") -> None:
        with self.store.lock:
            self.store.volcano_queues[name] = state

    def node(
        self,
        name: str,
        *,
        product: str = "NVIDIA-H100-80GB-HBM3",
        gpus: int = 8,
        mig: dict[str, int] | None = None,
        memory_mb: int = 81559,
        labels: dict[str, str] | None = None,
        ready: bool = True,
        unschedulable: bool = False,
    ) -> dict[str, Any]:
        node_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/gpu.memory": str(memory_mb),
            "nvidia.com/mig.capable": "true" if mig is not None else "false",
            **({"nvidia.com/mig.strategy": "mixed"} if mig is not None else {}),
            **(labels or {}),
        }
        allocatable = {
            "cpu": "128",
            "memory": "1056374068Ki",
            "pods": "110",
            "ephemeral-storage": "1797466362078",
        }
        if mig is None:
            allocatable["nvidia.com/gpu"] = str(gpus)
        else:
            allocatable["nvidia.com/gpu"] = "0"
            allocatable.update({mig_resource(p): str(n) for p, n in mig.items()})
        obj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": node_labels},
            "spec": {"unschedulable": True} if unschedulable else {},
        }
        t = self._t(("", "v1", "nodes"))
        self.api.create(t, None, obj, "Strict", False)
        status = fill(SHAPES["node_ready" if ready else "node_not_ready"], time=now_rfc3339())
        status["allocatable"] = allocatable
        status["capacity"] = dict(allocatable)
        return self._set_status(t, "", name, status)

    # --- object access -------------------------------------------------------------------

    def workload(self, eid: str) -> tuple[ResourceType, dict[str, Any]]:
        namespace, kind, name = eid.split("/")
        t = self._t(VOLCANO if kind == "vcjob" else BATCH)
        with self.store.lock:
            return t, copy.deepcopy(self.store.get(t, namespace, name))

    def pods(self, eid: str) -> list[dict[str, Any]]:
        _, obj = self.workload(eid)
        uid = obj["metadata"]["uid"]
        with self.store.lock:
            return [
                copy.deepcopy(o)
                for _, o in sorted(self.store.objects[self._t(("", "v1", "pods"))].items())
                if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])
            ]

    def _set_status(
        self, t: ResourceType, namespace: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        with self.store.lock:
            obj = copy.deepcopy(self.store.get(t, namespace, name))
            obj["status"] = status
            return self.store.replace(t, obj, spec_changed=False)

    def _pod_status(self, pod: dict[str, Any], shape: str, **values: Any) -> None:
        image = pod["spec"]["containers"][0]["image"]
        status = fill(
            SHAPES[shape],
            time=now_rfc3339(self.store.clock()),
            image=image,
            pod=pod["metadata"]["name"],
            namespace=pod["metadata"]["namespace"],
            **values,
        )
        # The kubelet sets a pod's startTime once, when it accepts the pod (before pulling its
        # image); the pod's activeDeadlineSeconds runs from it.
        with self.store.lock:
            current = self.store.objects[self._t(("", "v1", "pods"))].get(
                (pod["metadata"]["namespace"], pod["metadata"]["name"])
            )
        started = ((current or {}).get("status") or {}).get("startTime")
        if started and "startTime" in status:
            status["startTime"] = started
        self._set_status(
            self._t(("", "v1", "pods")),
            pod["metadata"]["namespace"],
            pod["metadata"]["name"],
            status,
        )

    # --- the controllers -----------------------------------------------------------------

    def create_pods(self, eid: str) -> list[dict[str, Any]]:
        """The Job controller / Volcano controller creating the workload's pods (once)."""
        t, obj = self.workload(eid)
        existing = self.pods(eid)
        if existing:
            return existing
        owner = {
            "apiVersion": t.api_version,
            "kind": t.kind,
            "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        name = obj["metadata"]["name"]
        specs: list[
            tuple[str, dict[str, Any], dict[str, str], list[dict[str, str]], dict[str, Any]]
        ] = []
        if t.group == "batch.volcano.sh":
            total = sum(task["replicas"] for task in obj["spec"]["tasks"])
            port = next(
                (
                    a.split("=")[1]
                    for a in obj["spec"].get("plugins", {}).get("pytorch", [])
                    if a.startswith("--port=")
                ),
                "23456",
            )
            for task in obj["spec"]["tasks"]:
                for i in range(task["replicas"]):
                    rank = 0 if task["name"] == "master" else i + 1
                    env = [
                        {"name": "MASTER_ADDR", "value": f"{name}-master-0.{name}"},
                        {"name": "MASTER_PORT", "value": port},
                        {"name": "WORLD_SIZE", "value": str(total)},
                        {"name": "RANK", "value": str(rank)},
                    ]
                    annotations = {
                        "volcano.sh/job-name": name,
                        "volcano.sh/task-spec": task["name"],
                        "volcano.sh/task-index": str(i),
                    }
                    extra = {
                        "hostname": f"{name}-{task['name']}-{i}",
                        "subdomain": name,
                        "schedulerName": "volcano",
                    }
                    specs.append(
                        (f"{name}-{task['name']}-{i}", task["template"], annotations, env, extra)
                    )
        else:
            indexed = obj["spec"].get("completionMode") == "Indexed"
            for i in range(obj["spec"].get("parallelism", 1)):
                suffix = "".join(self.rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
                if indexed:
                    annotations = {"batch.kubernetes.io/job-completion-index": str(i)}
                    specs.append(
                        (
                            f"{name}-{i}-{suffix}",
                            obj["spec"]["template"],
                            annotations,
                            [],
                            {"hostname": f"{name}-{i}"},
                        )
                    )
                else:
                    specs.append((f"{name}-{suffix}", obj["spec"]["template"], {}, [], {}))
        if t.group == "batch" and not (obj.get("status") or {}).get("startTime"):
            # The Job controller starts a Job (not suspended) as it creates its pods.
            self._workload_status(eid, "job_pods_created", None, n=len(specs))
        made = []
        for pod_name, template, annotations, env, extra in specs:
            spec = copy.deepcopy(template["spec"])
            spec.update(extra)
            for c in spec["containers"]:
                c["env"] = [*(c.get("env") or []), *env]
            labels = dict((template.get("metadata") or {}).get("labels") or {})
            if annotations.get("batch.kubernetes.io/job-completion-index"):
                labels["batch.kubernetes.io/job-completion-index"] = annotations[
                    "batch.kubernetes.io/job-completion-index"
                ]
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "namespace": obj["metadata"]["namespace"],
                    "labels": labels,
                    "annotations": annotations,
                    "ownerReferences": [owner],
                },
                "spec": spec,
            }
            made.append(
                self.api.create(
                    self._t(("", "v1", "pods")), obj["metadata"]["namespace"], pod, "Strict", False
                )[0]
            )
        return made

    def _bind(self, pod: dict[str, Any], nodes: list[str], index: int) -> str:
        """kube-scheduler honouring the pod's nodeSelector / node affinity."""
        spec = pod["spec"]
        allowed = nodes
        selector = (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")
        if selector:
            allowed = [selector]
        terms = (
            ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or {}
        ).get("nodeSelectorTerms") or []
        for term in terms:
            for expr in term.get("matchExpressions") or []:
                if expr["key"] == "kubernetes.io/hostname" and expr["operator"] == "In":
                    allowed = expr["values"]
        node = allowed[index % len(allowed)] if allowed else f"node-{index}"
        with self.store.lock:
            t = self._t(("", "v1", "pods"))
            current = copy.deepcopy(
                self.store.get(t, pod["metadata"]["namespace"], pod["metadata"]["name"])
            )
            current["spec"]["nodeName"] = node
            self.store.replace(t, current)
            return node

    def run(self, eid: str, nodes: list[str] | None = None) -> list[dict[str, Any]]:
        """Schedule and start every pod; the workload reports Running."""
        pods = self.create_pods(eid)
        for i, pod in enumerate(pods):
            self._bind(pod, nodes or [], i)
            self._pod_status(pod, "pod_running")
        self._workload_status(eid, "job_running", "vcjob_running", n=len(pods))
        return self.pods(eid)

    def unschedulable(self, eid: str, shape: str = "pod_pending_unschedulable") -> None:
        """kube-scheduler (or Volcano's) finding no node for the pods; `pod_pending_node_gone`
        when the node they are pinned to no longer exists."""
        for pod in self.create_pods(eid):
            self._pod_status(pod, shape)
        self._workload_status(eid, None, "vcjob_pending", n=len(self.pods(eid)))

    def held_by_kueue(self, eid: str) -> None:
        """A batch/v1 Job created suspended that Kueue has not admitted: no pods, and no
        status.startTime until the Job controller first starts it."""
        self._workload_status(eid, "job_suspended", None)

    def delete_node(self, name: str) -> None:
        """A node removed from the cluster (a failure its provider cleans up, a scale-down,
        `kubectl delete node`): the Node object goes; pods bound to it stay until PodGC."""
        with self.store.lock:
            self.store.delete(self._t(("", "v1", "nodes")), "", name, None, None)

    def pod_gc(self, *, delete: bool = True) -> list[dict[str, Any]]:
        """The pod garbage collector's gcOrphaned (gc_controller.go): a pod bound to a node
        that no longer exists is marked Failed with DisruptionTarget DeletionByPodGC (unless
        it had ended), then force-deleted (grace 0). `delete=False`: a look between the two
        (a Job's pod waits there until the Job controller drops its tracking finalizer).
        Returns the pods as marked."""
        pt = self._t(("", "v1", "pods"))
        nt = self._t(("", "v1", "nodes"))
        marked = []
        with self.store.lock:
            nodes = {n for _, n in self.store.objects[nt]}
            orphans = [
                copy.deepcopy(p)
                for p in self.store.objects[pt].values()
                if p["spec"].get("nodeName") and p["spec"]["nodeName"] not in nodes
            ]
        for pod in orphans:
            status = copy.deepcopy(pod.get("status") or {})
            if status.get("phase") not in ("Succeeded", "Failed"):
                status["phase"] = "Failed"
                condition = fill(
                    SHAPES["pod_gc_orphaned_condition"], time=now_rfc3339(self.store.clock())
                )
                status["conditions"] = [
                    c for c in status.get("conditions") or [] if c["type"] != "DisruptionTarget"
                ] + [condition]
                pod = self._set_status(
                    pt, pod["metadata"]["namespace"], pod["metadata"]["name"], status
                )
            marked.append(pod)
            if delete:
                with self.store.lock:
                    self.store.delete(
                        pt, pod["metadata"]["namespace"], pod["metadata"]["name"], None, 0
                    )
        return marked

    def pod_lost(self, eid: str, pod: dict[str, Any]) -> None:
        """The workload's controller after PodGC failed and deleted one of its pods: a batch
        Job fails by its podFailurePolicy (DisruptionTarget -> FailJob); Volcano sees the
        pod turn Failed first (PodFailed: PodGC marks it, then deletes it) and acts by the
        job's policy for that event; the deletion after it is an older version's."""
        self._end(eid, pod, "job_failed_pod_failure_policy", n=1, evicted=True)

    def kubelet_confirms_stops(self) -> None:
        """Every kubelet the control plane can reach reporting that its deleted pods'
        containers have stopped: the pods go (a kubelet's last delete, grace 0)."""
        pt = self._t(("", "v1", "pods"))
        with self.store.lock:
            for pod in list(self.store.objects[pt].values()):
                if (
                    pod["metadata"].get("deletionTimestamp")
                    and pod["spec"].get("nodeName") not in self.store.unreachable_nodes
                ):
                    meta = pod["metadata"]
                    self.store.delete(pt, meta["namespace"], meta["name"], None, 0)

    # --- a node that stops answering (the node lifecycle and taint eviction controllers) ----

    def node_unreachable(self, name: str) -> None:
        """A node whose kubelet stopped posting status (a network partition, a hung or
        powered-off machine) for node-monitor-grace-period, as the node lifecycle controller
        then marks it (node_lifecycle_controller.go): every condition Unknown
        (NodeStatusUnknown), the taints node.kubernetes.io/unreachable NoSchedule and NoExecute
        (with timeAdded), and its pods' Ready condition False (MarkPodsNotReady). Their phase
        stays as it was: nothing reports it. From now on nothing confirms a deletion there."""
        now = now_rfc3339(self.store.clock())
        nt = self._t(("", "v1", "nodes"))
        pt = self._t(("", "v1", "pods"))
        with self.store.lock:
            self.store.unreachable_nodes.add(name)
            node = copy.deepcopy(self.store.get(nt, "", name))
            for cond in node["status"].get("conditions") or []:
                if cond.get("status") != "Unknown":
                    cond["lastTransitionTime"] = now
                cond.update(
                    status="Unknown",
                    reason="NodeStatusUnknown",
                    message="Kubelet stopped posting node status.",
                )
            taints = [
                t for t in node["spec"].get("taints") or [] if t.get("key") != UNREACHABLE_TAINT
            ]
            node["spec"]["taints"] = [
                *taints,
                {"key": UNREACHABLE_TAINT, "effect": "NoSchedule"},
                {"key": UNREACHABLE_TAINT, "effect": "NoExecute", "timeAdded": now},
            ]
            self.store.replace(nt, node)
            for pod in [
                copy.deepcopy(p)
                for p in self.store.objects[pt].values()
                if p["spec"].get("nodeName") == name
            ]:
                for cond in (pod.get("status") or {}).get("conditions") or []:
                    if cond.get("type") == "Ready" and cond.get("status") != "False":
                        cond.update(status="False", lastTransitionTime=now)
                        self.store.replace(pt, pod, spec_changed=False)
                        break

    def node_reachable(self, name: str) -> None:
        """The node's kubelet posting status again: its conditions as a healthy node's, the
        lifecycle controller's taints gone. The kubelet stops the pods deleted meanwhile and
        confirms it (they go), and reports the others Ready again."""
        nt = self._t(("", "v1", "nodes"))
        pt = self._t(("", "v1", "pods"))
        now = now_rfc3339(self.store.clock())
        with self.store.lock:
            self.store.unreachable_nodes.discard(name)
            node = copy.deepcopy(self.store.get(nt, "", name))
            fresh = fill(SHAPES["node_ready"], time=now)
            node["status"]["conditions"] = fresh["conditions"]
            node["spec"]["taints"] = [
                t for t in node["spec"].get("taints") or [] if t.get("key") != UNREACHABLE_TAINT
            ]
            if not node["spec"]["taints"]:
                del node["spec"]["taints"]
            self.store.replace(nt, node)
            for pod in [
                copy.deepcopy(p)
                for p in self.store.objects[pt].values()
                if p["spec"].get("nodeName") == name
            ]:
                meta = pod["metadata"]
                if meta.get("deletionTimestamp"):
                    if self.store.pods_stop_at_once:
                        self.store.delete(pt, meta["namespace"], meta["name"], None, 0)
                    continue
                for cond in (pod.get("status") or {}).get("conditions") or []:
                    if cond.get("type") == "Ready" and cond.get("status") == "False":
                        cond.update(status="True", lastTransitionTime=now)
                        self.store.replace(pt, pod, spec_changed=False)
                        break

    def taint_eviction(self) -> list[dict[str, Any]]:
        """The taint eviction controller (taint_eviction.go), at the store's clock: a pod on a
        node with NoExecute taints is deleted at once when one of them is not tolerated, else
        when the shortest tolerationSeconds of the tolerations used has passed since the
        taint's timeAdded (never, when none has tolerationSeconds). First its status gets
        DisruptionTarget DeletionByTaintManager, then it is deleted with its own grace (a
        DELETE without options). Returns the pods it deleted, as they are now."""
        nt = self._t(("", "v1", "nodes"))
        pt = self._t(("", "v1", "pods"))
        now = self.store.clock()
        evicted = []
        with self.store.lock:
            taints = {
                n["metadata"]["name"]: [
                    t for t in n["spec"].get("taints") or [] if t.get("effect") == "NoExecute"
                ]
                for n in self.store.objects[nt].values()
            }
            pods = [
                copy.deepcopy(p)
                for p in self.store.objects[pt].values()
                if taints.get(p["spec"].get("nodeName") or "")
                and not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            ]
        for pod in pods:
            due = _eviction_due(taints[pod["spec"]["nodeName"]], pod["spec"].get("tolerations"))
            if due is None or due > now:
                continue
            status = copy.deepcopy(pod.get("status") or {})
            status["conditions"] = [
                c for c in status.get("conditions") or [] if c["type"] != "DisruptionTarget"
            ] + [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": now_rfc3339(now),
                    "reason": "DeletionByTaintManager",
                    "message": "Taint manager: deleting due to NoExecute taint",
                }
            ]
            meta = pod["metadata"]
            self._set_status(pt, meta["namespace"], meta["name"], status)
            with self.store.lock:
                self.store.delete(pt, meta["namespace"], meta["name"], None, None)
                still = self.store.objects[pt].get((meta["namespace"], meta["name"]))
            evicted.append(copy.deepcopy(still) if still else pod)
        return evicted

    def volcano_sees_deletions(self, eid: str) -> None:
        """Volcano's job controller after one of the gang's pods got a deletionTimestamp: it
        takes that for a deleted pod (updatePod -> deletePod: PodEvicted) and acts by the
        job's policy. RestartJob kills the gang: RetryCount+1, phase Restarting (Failed at
        maxRetry), every other pod deleted with its own grace (killJob skips the ones already
        terminating). Restarting leaves that phase only once no pod is terminating
        (state/restarting.go; gpuq's gangs need all their pods, minAvailable = replicas), so a
        pod stuck terminating holds it there. The job's retryCount counts the restart.
        TerminateJob deletes the pods not ended alike, and Terminating waits the same way
        (state/terminating.go) before Terminated."""
        t, obj = self.workload(eid)
        assert t.group == "batch.volcano.sh"
        pods = self.pods(eid)
        deleted = [p for p in pods if p["metadata"].get("deletionTimestamp")]
        if not deleted:
            return
        action = volcano_action(obj, "PodEvicted", deleted[0])
        if action not in ("RestartJob", "TerminateJob"):
            return
        restart = action == "RestartJob"
        retries = int((obj.get("status") or {}).get("retryCount", 0)) + restart
        total = sum(task["replicas"] for task in obj["spec"]["tasks"])
        pt = self._t(("", "v1", "pods"))
        for p in pods:
            ended = (p.get("status") or {}).get("phase") in ("Failed", "Succeeded")
            if not p["metadata"].get("deletionTimestamp") and (restart or not ended):
                with self.store.lock:
                    self.store.delete(
                        pt, p["metadata"]["namespace"], p["metadata"]["name"], None, None
                    )
        if restart:
            failed = retries >= (obj["spec"].get("maxRetry") or 3)
            shape = "vcjob_failed" if failed else "vcjob_restarting"
        else:
            alive = any(
                p["metadata"].get("deletionTimestamp")
                or (p.get("status") or {}).get("phase") in ("Pending", "Running")
                for p in self.pods(eid)
            )
            shape = "vcjob_terminating" if alive else "vcjob_terminated"
        self._workload_status(eid, None, shape, n=total, retries=retries)
        terminating = sum(1 for p in self.pods(eid) if p["metadata"].get("deletionTimestamp"))
        if terminating:
            _, obj = self.workload(eid)
            status = copy.deepcopy(obj["status"])
            status["terminating"] = terminating
            self._set_status(t, obj["metadata"]["namespace"], obj["metadata"]["name"], status)

    def image_pull_backoff(self, eid: str) -> None:
        for i, pod in enumerate(self.create_pods(eid)):
            self._bind(pod, [], i)
            self._pod_status(pod, "pod_image_pull_backoff")
        self._workload_status(eid, None, "vcjob_pending", n=len(self.pods(eid)))

    def succeed(self, eid: str) -> None:
        for pod in self.pods(eid):
            self._pod_status(pod, "pod_succeeded")
        self._workload_status(eid, "job_complete", "vcjob_completed", n=len(self.pods(eid)))

    def fail(self, eid: str, *, exit_code: int = 1, reason: str = "Error", index: int = 0) -> None:
        pods = self.pods(eid)
        self._pod_status(pods[index], "pod_failed_error", exit_code=exit_code, reason=reason)
        self._end(eid, self.pods(eid)[index], "job_failed_backoff", n=1)

    def failing_by_itself(self, eid: str, *, now: float, exit_code: int = 3) -> None:
        """A 2-pod batch Job failing on its own, before its controller has caught up (Kubernetes
        >= 1.31, kubernetes#123775): pod 1 failed, the Job is marked `FailureTarget` (set at
        once for a backoffLimit-0 Job; `Failed` only once the other pods are gone), and pod 0
        is being deleted, its kubelet not having confirmed the stop yet."""
        p0, p1 = self.pods(eid)
        self.store.pods_stop_at_once = False
        self._pod_status(p1, "pod_failed_error", exit_code=exit_code, reason="Error")
        namespace = p0["metadata"]["namespace"]
        with self.store.lock:
            self.store.delete(
                self._t(("", "v1", "pods")), namespace, p0["metadata"]["name"], None, None
            )
        t, obj = self.workload(eid)
        at = now_rfc3339(now)
        status = copy.deepcopy(obj["status"])
        status["conditions"] = [
            {
                "type": "FailureTarget",
                "status": "True",
                "lastProbeTime": at,
                "lastTransitionTime": at,
                "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit",
            }
        ]
        status["failed"], status["terminating"], status["ready"] = 1, 1, 0
        self._set_status(t, namespace, obj["metadata"]["name"], status)

    def evict(self, eid: str, *, index: int = 0, cause: str = "kubelet") -> None:
        """cause: "kubelet" (node-pressure eviction; the pod stays, Failed/Evicted) or
        "preemption" (kube-scheduler; the pod is marked, then deleted)."""
        pods = self.pods(eid)
        pod = pods[index]
        self._pod_status(pod, "pod_evicted_kubelet" if cause == "kubelet" else "pod_preempted")
        _, obj = self.workload(eid)
        policy = bool(obj["spec"].get("podFailurePolicy"))
        if cause == "preemption":
            with self.store.lock:
                pt = self._t(("", "v1", "pods"))
                self.store.remove(
                    pt, self.store.get(pt, pod["metadata"]["namespace"], pod["metadata"]["name"])
                )
        self._end(
            eid,
            pod,
            "job_failed_pod_failure_policy" if policy else "job_failed_backoff",
            n=1,
            evicted=True,
            # The scheduler deletes the pod it preempts (Volcano's PodEvicted); the kubelet's
            # eviction leaves it Failed (PodFailed).
            event="PodEvicted" if cause == "preemption" else "PodFailed",
        )

    def deadline(self, eid: str) -> None:
        """The workload's time limit running out, whatever the clock says (expire_deadlines)."""
        self.expire_deadlines(eid, now=math.inf)

    def expire_deadlines(self, eid: str, now: float | None = None) -> bool:
        """The deadlines of the workload passed at `now` (the store's clock), enforced where
        the objects declare them: a Job's spec.activeDeadlineSeconds by the Job controller,
        from the Job's status.startTime (its pods deleted, the Job Failed DeadlineExceeded);
        a pod's by its kubelet, from the pod's status.startTime, which the kubelet sets when
        it accepts the pod, before pulling its image (a pod not bound yet has none): the pod
        Failed DeadlineExceeded, which its controller then treats as any pod failure.
        Returns whether one had passed."""
        at = self.store.clock() if now is None else now
        t, obj = self.workload(eid)
        status = obj.get("status") or {}
        ended = {"Failed", "Complete"} & {c.get("type") for c in status.get("conditions") or []}
        limit, started = obj["spec"].get("activeDeadlineSeconds"), _ts(status.get("startTime"))
        if (
            t.group == "batch"
            and limit
            and started is not None
            and not ended
            and at - started >= limit
        ):
            for pod in self.pods(eid):
                with self.store.lock:
                    pt = self._t(("", "v1", "pods"))
                    self.store.remove(
                        pt,
                        self.store.get(pt, pod["metadata"]["namespace"], pod["metadata"]["name"]),
                    )
            self._workload_status(eid, "job_failed_deadline", None, n=1)
            return True
        expired = []
        for pod in self.pods(eid):
            limit = pod["spec"].get("activeDeadlineSeconds")
            started = _ts((pod.get("status") or {}).get("startTime"))
            phase = (pod.get("status") or {}).get("phase")
            if (
                limit
                and started is not None
                and phase not in ("Succeeded", "Failed")
                and at - started >= limit
            ):
                self._pod_status(pod, "pod_deadline_exceeded")
                expired.append(pod)
        if expired:
            failed = {p["metadata"]["name"]: p for p in self.pods(eid)}
            self._end(eid, failed[expired[0]["metadata"]["name"]], "job_failed_backoff", n=1)
        return bool(expired)

    def _remove_pods(
        self,
        eid: str,
        *,
        keep_ended: bool = False,
        only: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        """A controller's deletion of the workload's pods, gone at once (no grace): all of
        them, those not ended (`keep_ended`: Failed and Succeeded pods kept, as
        PodRetainPhaseSoft), or those `only` selects."""
        pt = self._t(("", "v1", "pods"))
        for p in self.pods(eid):
            if keep_ended and p["status"].get("phase") in ("Failed", "Succeeded"):
                continue
            if only is not None and not only(p):
                continue
            with self.store.lock:
                self.store.remove(
                    pt, self.store.get(pt, p["metadata"]["namespace"], p["metadata"]["name"])
                )

    def _end(
        self,
        eid: str,
        pod: dict[str, Any],
        job_shape: str,
        *,
        n: int,
        evicted: bool = False,
        event: str = "PodFailed",
    ) -> None:
        """After a pod failure: a batch Job with backoffLimit 0 fails and its other pods are
        deleted; a Volcano Job acts by its policy for the event (volcano_action: PodFailed,
        a pod turned Failed; PodEvicted, one deleted). As Volcano's controller: RestartJob
        counts the failure (state/running.go, pending.go: RetryCount++), then Restarting
        fails the job once RetryCount >= maxRetry (0 is 3) (state/restarting.go), else the
        gang is created again: maxRetry - 1 restarts. TerminateJob deletes the pods that
        have not ended, keeps the Failed and Succeeded ones (PodRetainPhaseSoft), and the
        job is Terminated once none is left alive (state/terminating.go). With no policy
        (SyncJob) the job runs on until every pod has ended."""
        t, obj = self.workload(eid)
        if t.group == "batch.volcano.sh":
            action = volcano_action(obj, event, pod)
            retries = int((obj.get("status") or {}).get("retryCount", 0)) + 1
            total = sum(task["replicas"] for task in obj["spec"]["tasks"])
            if action == "TerminateJob":
                self._remove_pods(eid, keep_ended=True)
                self._workload_status(eid, None, "vcjob_terminated", n=total)
                return
            if action != "RestartJob":
                return
            if retries < (obj["spec"].get("maxRetry") or 3):
                self._workload_status(eid, None, "vcjob_restarting", n=total, retries=retries)
                self._remove_pods(eid)  # Volcano kills the whole gang and recreates it
            else:
                # At the last retry killJob keeps only Failed and Succeeded pods
                # (job_controller_actions.go); the rest are deleted (at once here).
                self._remove_pods(eid, keep_ended=True)
                self._workload_status(eid, None, "vcjob_failed", n=total, retries=retries)
            return
        self._remove_pods(
            eid,
            only=lambda p: (
                p["metadata"]["name"] != pod["metadata"]["name"]
                and p["status"].get("phase") == "Running"
            ),
        )
        self._workload_status(
            eid,
            job_shape,
            None,
            n=n,
            pod=pod["metadata"]["name"],
            namespace=pod["metadata"]["namespace"],
        )

    def _workload_status(
        self, eid: str, job_shape: str | None, vc_shape: str | None, **values: Any
    ) -> None:
        t, obj = self.workload(eid)
        shape = vc_shape if t.group == "batch.volcano.sh" else job_shape
        if shape is None:
            return
        status = fill(SHAPES[shape], time=now_rfc3339(self.store.clock()), **values)
        if (
            t.group == "batch"
            and "startTime" in status
            and (obj.get("status") or {}).get("startTime")
        ):
            # The Job controller sets startTime once (again only on a resume after a
            # suspension, which clears it); the Job's activeDeadlineSeconds runs from it.
            status["startTime"] = obj["status"]["startTime"]
        if (
            t.group == "batch.volcano.sh"
            and "retryCount" not in status
            and (obj.get("status") or {}).get("retryCount")
        ):
            status["retryCount"] = obj["status"]["retryCount"]
        self._set_status(t, obj["metadata"]["namespace"], obj["metadata"]["name"], status)

    # --- kubelet logs --------------------------------------------------------------------

    def log(self, pod: dict[str, Any], data: bytes, at: float | None = None) -> None:
        key = (
            pod["metadata"]["namespace"],
            pod["metadata"]["name"],
            pod["spec"]["containers"][0]["name"],
        )
        with self.store.lock:
            self.store.logs.setdefault(key, []).append(
                LogLine(self.store.clock() if at is None else at, data)
            )

    # --- the GPU Operator's MIG manager --------------------------------------------------

    def mig_manager_step(
        self, node: str, *, layouts: dict[str, dict[str, int]], fail: bool = False
    ) -> str:
        """One reconcile of the MIG manager: a new nvidia.com/mig.config is first marked
        pending; the next step applies it (allocatable changes) and reports success, or
        reports failed. Returns the state it wrote (or "" when there was nothing to do)."""
        t = self._t(("", "v1", "nodes"))
        with self.store.lock:
            obj = copy.deepcopy(self.store.get(t, "", node))
            labels = obj["metadata"]["labels"]
            wanted = labels.get("nvidia.com/mig.config")
            state = labels.get("nvidia.com/mig.config.state")
            if wanted is None or (
                state in ("success", "failed") and labels.get("gpuq.test/applied") == wanted
            ):
                return ""
            if state != "pending":
                labels["nvidia.com/mig.config.state"] = "pending"
                self.store.replace(t, obj, spec_changed=False)
                return "pending"
            labels["nvidia.com/mig.config.state"] = "failed" if fail else "success"
            labels["gpuq.test/applied"] = wanted
            self.store.replace(t, obj, spec_changed=False)
            if not fail:
                status = copy.deepcopy(obj["status"])
                alloc = {
                    k: v
                    for k, v in status["allocatable"].items()
                    if not k.startswith("nvidia.com/mig-")
                }
                alloc.update({mig_resource(p): str(n) for p, n in layouts[wanted].items()})
                status["allocatable"] = status["capacity"] = alloc
                self._set_status(t, "", node, status)
            return labels["nvidia.com/mig.config.state"]
