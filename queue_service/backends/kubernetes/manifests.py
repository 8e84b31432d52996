"""Pure builders: a DispatchRequest and the cluster settings in, Kubernetes objects out.

Three shapes (docs/kubernetes.md):
- training, workload=volcano: one Volcano Job (gang of `nodes` pods, pytorch/svc/env plugins);
- training, workload=indexed, nodes > 1: an Indexed batch/v1 Job plus a headless Service;
- everything else (agent jobs, MIG slices, one-node training with workload=indexed): one
  batch/v1 Job with a single pod.

No user string is ever given to a shell unless the user chose a shell string, and every `$`
is doubled because the kubelet expands `$(VAR)` in command, args and env values."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from ..base import DispatchRequest, cpus_per_node, job_env
from .config import MIG_STRATEGIES, K8sSettings

JOB_ID_LABEL = "gpuq.io/job-id"
TEAM_LABEL = "gpuq.io/team"
ATTEMPT_LABEL = "gpuq.io/attempt"
ROLE_LABEL = "gpuq.io/role"
NAME_ANNOTATION = "gpuq.io/job-name"
JOB_ID_ANNOTATION = "gpuq.io/job-id"
USER_ANNOTATION = "gpuq.io/user"
FINALIZER = "gpuq.io/report-end"
KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
HOSTNAME_LABEL = "kubernetes.io/hostname"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE = "nvidia.com/mig-"
VOLCANO_API = "batch.volcano.sh/v1alpha1"
CONTAINER = "main"
# torchrun's node rank in an Indexed Job's pods: a name the job's env cannot take (GPUQ_ is
# reserved), so that a RANK of the user's, which wins, cannot give every pod the same rank.
NODE_RANK_ENV = "GPUQ_NODE_RANK"
# Pod names add "-worker-<i>" (Volcano) or "-<i>-<5 chars>" (Indexed Job) and must stay <= 63.
NAME_MAX = 47
KINDS = {"vcjob": (VOLCANO_API, "Job"), "job": ("batch/v1", "Job")}
# etcd's default --max-request-bytes (1.5 MiB) bounds an object, and the API server answers a
# bigger write with a 500 that looks transient (kubernetes#112152). gpuq's own bound is that
# limit less room for the managedFields and status added after the create; it must hold the
# spec's MAX_COMMAND_ENV_BYTES (1 MiB) in a one-node Job, or a job the API accepted fails here.
ETCD_MAX_REQUEST_BYTES = 1536 * 1024
MAX_OBJECT_BYTES = ETCD_MAX_REQUEST_BYTES - 64 * 1024

_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_NOT_LABEL = re.compile(r"[^A-Za-z0-9._-]+")


class ManifestError(ValueError):
    """The job cannot be expressed on this cluster (no image, bad MIG profile...)."""


@dataclass(frozen=True)
class ObjectRef:
    """Where a dispatched job lives; `external_id` is `<namespace>/<kind>/<name>`."""

    namespace: str
    kind: str  # "vcjob" | "job"
    name: str

    @property
    def external_id(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"

    @property
    def api_version(self) -> str:
        return KINDS[self.kind][0]

    @classmethod
    def parse(cls, external_id: str) -> ObjectRef:
        parts = external_id.split("/")
        if len(parts) != 3 or parts[1] not in KINDS or not all(parts):
            raise ValueError(f"not a kubernetes external id: {external_id!r}")
        return cls(parts[0], parts[1], parts[2])


@dataclass(frozen=True)
class Plan:
    """Objects to create, in order; objects[0] is the workload the ref names. Later objects
    are owned by it (the backend adds the ownerReference once the workload has a uid)."""

    ref: ObjectRef
    objects: tuple[dict[str, Any], ...]


# Kubernetes' terminationGracePeriodSeconds when a pod gives none.
POD_DEFAULT_GRACE_S = 30
# The API server refuses a pod whose activeDeadlineSeconds is over int32 (ValidatePodSpec:
# Volcano's pods would never be created), and the Job controller's time.Duration overflows
# not far beyond; 68 years is no limit a job reaches, so a longer time limit is clamped.
MAX_DEADLINE_S = 2**31 - 1


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def dns_label(text: str, max_len: int = 63) -> str:
    """A DNS-1123 label for `text`: itself when already valid, else a readable prefix plus a
    hash of the original so that two different inputs never collide."""
    clean = _NOT_DNS.sub("-", text.lower()).strip("-")
    if clean == text and 0 < len(clean) <= max_len:
        return clean
    prefix = clean[: max_len - 11].strip("-")
    return f"{prefix}-{_digest(text)}" if prefix else f"x-{_digest(text)}"


def label_value(text: str) -> str:
    """A valid label value (<= 63, alphanumeric at both ends) for `text`, hashed if altered."""
    clean = _NOT_LABEL.sub("-", text).strip("-_.")
    if clean == text and len(clean) <= 63:
        return clean
    prefix = clean[:52].strip("-_.")
    return f"{prefix}-{_digest(text)}" if prefix else _digest(text)


def object_name(job_id: str, attempt: int) -> str:
    """One name per job attempt, so a requeued job never collides with its earlier attempt."""
    return dns_label(f"gpuq-{job_id}-{attempt}", NAME_MAX)


_OBJECT_NAME = re.compile(r"gpuq-(.+)-([0-9]+)")


def job_label_of(name: str) -> str | None:
    """The `gpuq.io/job-id` label of the workload named `name` by object_name, read back from
    the name; None when the name does not give it (an id made valid and hashed)."""
    m = _OBJECT_NAME.fullmatch(name)
    if m is None:
        return None
    job_id = m[1]
    if object_name(job_id, int(m[2])) != name or label_value(job_id) != job_id:
        return None
    return job_id


def namespace_for(team: str, settings: K8sSettings) -> str:
    return dns_label(settings.namespace.replace("{team}", team))


def escape_expansion(text: str) -> str:
    """Kubernetes expands `$(VAR)` in command, args and env values; `$$` is a literal `$`."""
    return text.replace("$", "$$")


def user_argv(command: tuple[str, ...] | str) -> list[str]:
    if isinstance(command, str):
        return ["/bin/sh", "-c", command]
    if not command:
        raise ManifestError("the command is empty")
    return list(command)


def mig_resource(profile: str) -> str:
    """The resource NVIDIA's device plugin advertises for a MIG profile (mixed strategy): '+'
    is not allowed in a resource name, so `1g.10gb+me` is `nvidia.com/mig-1g.10gb.me`."""
    return MIG_RESOURCE + profile.replace("+", ".")


def mig_profile(resource: str) -> str | None:
    """The profile behind an advertised MIG resource (mig_resource reversed): the first '.'
    after the memory size was the '+' of an attribute such as `+me`."""
    if not resource.startswith(MIG_RESOURCE):
        return None
    return re.sub(r"^(\d+g\.\d+gb)\.", r"\1+", resource[len(MIG_RESOURCE) :])


def _is_gang(job: DispatchRequest) -> bool:
    return job.kind == "training" and job.nodes > 1


def container_command(job: DispatchRequest, node_rank: str = "RANK") -> list[str]:
    """The container's command. A multi-node training job given as argv runs under torchrun,
    one launcher per pod, as on Slurm (a `.py` script directly, any other program with
    --no_python; a shell string is run as is). `$(<node_rank>)`, `$(MASTER_ADDR)` and
    `$(MASTER_PORT)` are expanded by the kubelet from the pod's environment (Volcano's
    pytorch plugin, or the Indexed Job wiring)."""
    argv = [escape_expansion(a) for a in user_argv(job.command)]
    if not _is_gang(job) or isinstance(job.command, str):
        return argv
    launcher = [
        "torchrun",
        f"--nnodes={job.nodes}",
        f"--nproc_per_node={max(job.gpus_per_node, 1)}",
        f"--node_rank=$({node_rank})",
        "--master_addr=$(MASTER_ADDR)",
        "--master_port=$(MASTER_PORT)",
    ]
    # A program named `-x` is no option of torchrun's: its `--` (argparse's) ends them.
    program = ["--", *argv] if argv[0].startswith("-") else argv
    return [*launcher, *([] if argv[0].endswith(".py") else ["--no_python"]), *program]


def _env(job: DispatchRequest, wiring: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """gpuq's variables, the job's own, then the gang's wiring less the names the job's env
    gives: its own values win, as on Slurm, and each name comes once."""
    values = job_env(job)
    values.update(job.env)
    if job.nccl_debug:
        values["NCCL_DEBUG"] = "INFO"
    if job.gpus_per_node <= 0 and not job.mig_profile:
        # The device plugin hands such a container nothing, and the NVIDIA runtime would
        # then expose what the image says (`all` in CUDA images): the node's every GPU.
        values["NVIDIA_VISIBLE_DEVICES"] = "void"
    env = [{"name": k, "value": escape_expansion(v)} for k, v in values.items()]
    return env + [e for e in wiring if e["name"] not in job.env]


def _resources(job: DispatchRequest, settings: K8sSettings) -> dict[str, Any]:
    gpus: dict[str, str] = {}
    if job.mig_profile:
        if not re.fullmatch(r"[1-8]g\.\d+gb(\+me)?", job.mig_profile):
            raise ManifestError(f"not a MIG profile: {job.mig_profile!r}")
        if settings.mig_strategy == "mixed":
            gpus[mig_resource(job.mig_profile)] = "1"
        else:
            gpus[GPU_RESOURCE] = "1"
    elif job.gpus_per_node > 0:
        gpus[GPU_RESOURCE] = str(job.gpus_per_node)
    requests: dict[str, str] = dict(gpus)
    limits: dict[str, str] = dict(gpus)
    if job.cpus_per_gpu:
        requests["cpu"] = str(cpus_per_node(job.cpus_per_gpu, job.gpus_per_node))
    if job.memory_mb:
        requests["memory"] = limits["memory"] = f"{job.memory_mb}Mi"
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _gpu_tolerations(resources: dict[str, Any]) -> list[dict[str, str]]:
    """What the ExtendedResourceToleration admission plugin adds when enabled (it is off by
    default): a node tainted `<resource>:NoSchedule` is reserved for pods requesting that
    resource. Every gpuq pod tolerates nvidia.com/gpu, whatever it requests: gpuq places
    every job on a GPU node (inventory lists no other), one of no GPUs too, and GKE-style
    pools taint every GPU node with it, whatever its MIG layout. A MIG pod also tolerates its
    own resource. inventory.py counts on these tolerations."""
    limits = resources.get("limits", {})
    mig = {k for k in limits if k.startswith(MIG_RESOURCE)}
    return [
        {"key": k, "operator": "Exists", "effect": "NoSchedule"}
        for k in sorted({GPU_RESOURCE} | mig)
    ]


def _deadline(time_limit_s: int) -> int:
    return min(int(time_limit_s), MAX_DEADLINE_S)


def _labels(job: DispatchRequest, role: str | None = None) -> dict[str, str]:
    labels = {
        JOB_ID_LABEL: label_value(job.job_id),
        TEAM_LABEL: label_value(job.team),
        ATTEMPT_LABEL: str(job.attempt),
    }
    if role:
        labels[ROLE_LABEL] = role
    return labels


def _metadata(job: DispatchRequest, name: str, namespace: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": _labels(job),
        "annotations": {
            NAME_ANNOTATION: job.name,
            JOB_ID_ANNOTATION: job.job_id,
            USER_ANNOTATION: job.user,
        },
        # Holds a deleted workload until gpuq has seen its end (see backend.poll).
        "finalizers": [FINALIZER],
    }


def _pinning(job: DispatchRequest) -> dict[str, Any]:
    """Run where gpuq's scheduler placed the job: one node by hostname, or a gang spread
    one pod per node over exactly the chosen node set."""
    nodes = sorted({a.node for a in job.placement})
    if not nodes:
        return {}
    if not _is_gang(job):
        return {"nodeSelector": {HOSTNAME_LABEL: nodes[0]}}
    match = {JOB_ID_LABEL: label_value(job.job_id), ATTEMPT_LABEL: str(job.attempt)}
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": HOSTNAME_LABEL, "operator": "In", "values": nodes}
                            ]
                        }
                    ]
                }
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": match}, "topologyKey": HOSTNAME_LABEL}
                ]
            },
        }
    }


def _pod_spec(
    job: DispatchRequest,
    settings: K8sSettings,
    extra_env: list[dict[str, Any]],
    node_rank: str = "RANK",
    **fields: Any,
) -> dict[str, Any]:
    image = job.image or settings.image_default
    if not image:
        raise ManifestError("the job has no image and the cluster sets no image_default")
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "command": container_command(job, node_rank),
        "env": _env(job, extra_env),
    }
    resources = _resources(job, settings)
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # Service links would flood the environment and could shadow the job's variables.
        "enableServiceLinks": False,
        "containers": [container],
        **_pinning(job),
        **fields,
        "tolerations": _gpu_tolerations(resources),
    }
    # The pod's own grace (Kubernetes' default 30 s; checkpoint_grace_s for a job that
    # checkpoints) bounds what gpuq's stop may give it: at least gpuq's stop grace.
    grace = settings.checkpoint_grace_s if job.checkpoint_dir else POD_DEFAULT_GRACE_S
    if job.stop_grace_s is not None and math.ceil(job.stop_grace_s) > grace:
        grace = math.ceil(job.stop_grace_s)
    if grace != POD_DEFAULT_GRACE_S:
        spec["terminationGracePeriodSeconds"] = grace
    priority_class = settings.priority_class_map.get(job.priority)
    if priority_class:
        spec["priorityClassName"] = priority_class
    return spec


def _batch_job(
    job: DispatchRequest,
    settings: K8sSettings,
    ref: ObjectRef,
    *,
    indexed: bool,
) -> dict[str, Any]:
    metadata = _metadata(job, ref.name, ref.namespace)
    extra_env: list[dict[str, Any]] = []
    pod_fields: dict[str, Any] = {}
    if job.time_limit_s:
        # On the pods, not the Job: a Job's deadline runs from the Job's start, so the time
        # its pods wait for a node would count; a pod's runs from when its kubelet took it.
        pod_fields["activeDeadlineSeconds"] = _deadline(job.time_limit_s)
    spec: dict[str, Any] = {
        "completions": job.nodes if indexed else 1,
        "parallelism": job.nodes if indexed else 1,
        # gpuq retries itself (a new attempt placed by its scheduler), never in place.
        "backoffLimit": 0,
        # Names the disruption in the Job's Failed condition even after its pod is deleted.
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "FailJob",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                }
            ]
        },
        "ttlSecondsAfterFinished": settings.ttl_after_finished_s,
    }
    if indexed:
        spec["completionMode"] = "Indexed"
        pod_fields["subdomain"] = ref.name
        index = f"metadata.annotations['{COMPLETION_INDEX}']"
        extra_env = [
            {"name": "MASTER_ADDR", "value": f"{ref.name}-0.{ref.name}"},
            {"name": "MASTER_PORT", "value": str(settings.master_port)},
            {"name": "WORLD_SIZE", "value": str(job.nodes)},
            *(
                {"name": name, "valueFrom": {"fieldRef": {"fieldPath": index}}}
                for name in ("RANK", NODE_RANK_ENV)
            ),
        ]
    if settings.kueue_queue:
        metadata["labels"][KUEUE_LABEL] = settings.kueue_queue
        spec["suspend"] = True
    spec["template"] = {
        "metadata": {"labels": _labels(job, "master" if not indexed else None)},
        "spec": _pod_spec(
            job, settings, extra_env, NODE_RANK_ENV if indexed else "RANK", **pod_fields
        ),
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}


def _headless_service(
    job: DispatchRequest, settings: K8sSettings, ref: ObjectRef
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": ref.name, "namespace": ref.namespace, "labels": _labels(job)},
        "spec": {
            "clusterIP": "None",
            # Rendezvous needs the master's DNS name before any pod is Ready.
            "publishNotReadyAddresses": True,
            "selector": {
                JOB_ID_LABEL: label_value(job.job_id),
                ATTEMPT_LABEL: str(job.attempt),
            },
            "ports": [{"name": "torch", "port": settings.master_port, "protocol": "TCP"}],
        },
    }


def _volcano_job(job: DispatchRequest, settings: K8sSettings, ref: ObjectRef) -> dict[str, Any]:
    pod_fields: dict[str, Any] = {}
    if job.time_limit_s:
        pod_fields["activeDeadlineSeconds"] = _deadline(job.time_limit_s)

    def task(role: str, replicas: int) -> dict[str, Any]:
        return {
            "name": role,
            "replicas": replicas,
            "template": {
                "metadata": {"labels": _labels(job, role)},
                "spec": _pod_spec(job, settings, [], **pod_fields),
            },
        }

    master = task("master", 1)
    master["policies"] = [{"event": "TaskCompleted", "action": "CompleteJob"}]
    tasks = [master] + ([task("worker", job.nodes - 1)] if job.nodes > 1 else [])
    # Volcano's events do not tell causes apart. PodEvicted is a pod deleted (preemption, a
    # drain, the taint manager): restarted in place only for a job whose retries list either
    # cause and have some left. PodFailed is a pod that ended Failed (the user's exit code,
    # the time limit, a kubelet's eviction or refusal, PodGC's mark): never restarted in
    # place, as a batch Job (backoffLimit 0). TerminateJob keeps the failed pod, whose end
    # status.py reads (exit code, timeout, node failure), and the service retries by cause.
    in_place = job.retries_max > 0 and bool(set(job.retry_on) & {"node_failure", "preemption"})
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "queue": dns_label(settings.volcano_queue.replace("{team}", job.team)),
        "minAvailable": job.nodes,
        # Volcano counts the failed run that ends the job as a retry (RetryCount >= maxRetry
        # fails it), and its webhook turns 0 into 3: N restarts in place need N + 1.
        "maxRetry": (job.retries_max if in_place else 0) + 1,
        "ttlSecondsAfterFinished": settings.ttl_after_finished_s,
        "plugins": {
            "pytorch": ["--master=master", "--worker=worker", f"--port={settings.master_port}"],
            "svc": [],
            "env": [],
        },
        "policies": [
            {"event": "PodEvicted", "action": "RestartJob" if in_place else "TerminateJob"},
            {"event": "PodFailed", "action": "TerminateJob"},
        ],
        "tasks": tasks,
    }
    priority_class = settings.priority_class_map.get(job.priority)
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": VOLCANO_API,
        "kind": "Job",
        "metadata": _metadata(job, ref.name, ref.namespace),
        "spec": spec,
    }


def _check_size(plan: Plan) -> Plan:
    for obj in plan.objects:
        # As sent (lightkube's JSON is UTF-8, not \u escapes) and as etcd stores strings.
        size = len(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode())
        if size > MAX_OBJECT_BYTES:
            raise ManifestError(
                f"the {obj['kind']} for this job would be {size} bytes of JSON; Kubernetes "
                f"cannot store an object that large (gpuq's limit is {MAX_OBJECT_BYTES} bytes, "
                f"etcd's {ETCD_MAX_REQUEST_BYTES}): make the command and environment smaller, "
                "e.g. pass large values in a file"
            )
    return plan


def build(
    job: DispatchRequest, settings: K8sSettings, node_mig_strategy: str | None = None
) -> Plan:
    """`node_mig_strategy`: the `nvidia.com/mig.strategy` label of the node a MIG job is
    placed on, which wins over the cluster's `mig_strategy` (the default for nodes
    without it): the resource a pod requests must be the one its node offers."""
    if job.mig_profile and node_mig_strategy in MIG_STRATEGIES:
        settings = dataclasses.replace(settings, mig_strategy=node_mig_strategy)
    return _check_size(_build(job, settings))


def _build(job: DispatchRequest, settings: K8sSettings) -> Plan:
    if job.nodes < 1:
        raise ManifestError("a job needs at least one node")
    if job.mig_profile and job.nodes != 1:
        raise ManifestError("a MIG job runs on one slice of one node")
    namespace = namespace_for(job.team, settings)
    name = object_name(job.job_id, job.attempt)
    if job.kind == "training" and settings.workload == "volcano" and not job.mig_profile:
        ref = ObjectRef(namespace, "vcjob", name)
        return Plan(ref, (_volcano_job(job, settings, ref),))
    ref = ObjectRef(namespace, "job", name)
    if _is_gang(job):
        return Plan(
            ref,
            (
                _batch_job(job, settings, ref, indexed=True),
                _headless_service(job, settings, ref),
            ),
        )
    return Plan(ref, (_batch_job(job, settings, ref, indexed=False),))
