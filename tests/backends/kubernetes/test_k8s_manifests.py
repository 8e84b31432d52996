"""The pure manifest builders: every shape validates against the official schemas of every
supported Kubernetes minor, the Volcano CRD and the API server's semantic rules; user
strings are carried literally and never reach a shell unless the user gave a shell string."""

from __future__ import annotations

import string
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from conftest import JOB_ID, request
from hypothesis import given, settings
from hypothesis import strategies as st
from k8s_rules import crd_schema, pod_spec_causes, semantic_causes, volcano_webhook_denial
from k8s_sim import container_argv, expand

from queue_service.backends.base import ArrayTask, BackendError
from queue_service.backends.kubernetes.config import parse_settings
from queue_service.backends.kubernetes.manifests import (
    COMPLETION_INDEX,
    ManifestError,
    ObjectRef,
    build,
    dns_label,
    escape_expansion,
    label_value,
    object_name,
)

MINORS = ("1.29", "1.30", "1.31", "1.32", "1.33")
BASE = {"kubeconfig": "x", "image_default": "busybox:1.36"}


def cfg(**overrides: Any) -> Any:
    return parse_settings({**BASE, **overrides})


SHAPES = [
    ("volcano training, 1 node", cfg(), request(nodes=1)),
    ("volcano training, 2 nodes", cfg(), request(nodes=2)),
    ("volcano training, 16 nodes", cfg(), request(nodes=16)),
    ("indexed training, 2 nodes", cfg(workload="indexed"), request(nodes=2)),
    (
        "indexed training, 16 nodes, kueue",
        cfg(workload="indexed", kueue_queue="team-a-lq"),
        request(nodes=16),
    ),
    ("indexed training, 1 node", cfg(workload="indexed"), request(nodes=1)),
    (
        "MIG inference",
        cfg(),
        request(kind="agent", gpus_per_node=0, mig_profile="1g.10gb", time_limit_s=600),
    ),
    (
        "MIG inference on a media-extension slice",
        cfg(),
        request(kind="agent", gpus_per_node=0, mig_profile="1g.10gb+me"),
    ),
    (
        "whole-GPU agent with checkpoints",
        cfg(priority_class_map={"high": "gpuq-high"}),
        request(
            kind="agent",
            gpus_per_node=1,
            priority="high",
            checkpoint_dir="/ckpt",
            cpus_per_gpu=8,
            memory_mb=65536,
        ),
    ),
]


def builtin_objects(objects: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [o for o in objects if not o["apiVersion"].startswith("batch.volcano.sh")]


def volcano_objects(objects: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [o for o in objects if o["apiVersion"].startswith("batch.volcano.sh")]


@pytest.mark.parametrize("minor", MINORS)
@pytest.mark.parametrize(("title", "settings_", "job"), SHAPES, ids=[s[0] for s in SHAPES])
def test_every_manifest_passes_the_strict_schema_of_every_supported_minor(
    title: str, settings_: Any, job: Any, minor: str
) -> None:
    plan = build(job, settings_)
    for obj in builtin_objects(plan.objects):
        assert kubernetes_validate.validate(obj, minor, strict=True) == minor
    for vc in volcano_objects(plan.objects):
        for task in vc["spec"]["tasks"]:
            template = {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": "t"},
                "template": task["template"],
            }
            assert kubernetes_validate.validate(template, minor, strict=True) == minor


@pytest.mark.parametrize(("title", "settings_", "job"), SHAPES, ids=[s[0] for s in SHAPES])
def test_every_manifest_passes_the_semantic_rules_and_the_volcano_crd(
    title: str, settings_: Any, job: Any, crd_dir: Any
) -> None:
    plan = build(job, settings_)
    for obj in builtin_objects(plan.objects):
        assert semantic_causes(obj) == []
    for vc in volcano_objects(plan.objects):
        schema = crd_schema(crd_dir / "batch.volcano.sh_jobs.yaml", "v1alpha1")
        assert list(jsonschema.Draft7Validator(schema).iter_errors(vc)) == []
        assert volcano_webhook_denial(vc, {"team-a": "Open"}) is None
        assert semantic_causes(vc) == []


@pytest.mark.parametrize("nodes", [1, 2, 16])
def test_volcano_training_is_one_gang_of_all_replicas(nodes: int) -> None:
    plan = build(request(nodes=nodes, retries_max=2), cfg())
    vc = plan.objects[0]
    spec = vc["spec"]
    assert plan.ref.kind == "vcjob"
    assert spec["minAvailable"] == nodes == sum(t["replicas"] for t in spec["tasks"])
    assert spec["schedulerName"] == "volcano"
    assert spec["queue"] == "team-a"
    assert spec["maxRetry"] == 3  # two restarts in place: see the next test
    assert set(spec["plugins"]) == {"pytorch", "svc", "env"}
    # A pod deleted (preemption, a drain) restarts the gang: the job's retries list both.
    assert {"event": "PodEvicted", "action": "RestartJob"} in spec["policies"]
    # A pod that failed by itself ends it, keeping the pod whose end status.py reads.
    assert {"event": "PodFailed", "action": "TerminateJob"} in spec["policies"]
    assert spec["tasks"][0]["name"] == "master"
    assert spec["tasks"][0]["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    assert [t["name"] for t in spec["tasks"]] == (["master", "worker"] if nodes > 1 else ["master"])


def _volcano_in_place_restarts(spec: dict[str, Any], event: str = "PodEvicted") -> int:
    """How many times real Volcano re-creates a gang whose pods keep ending by `event`
    (PodEvicted: a pod deleted; PodFailed: a pod that turned Failed).

    The job's policies decide (applyPolicies: the first whose event is `event` or `*`; the
    workers' task has none; a PodFailed exitCode policy would need the code: gpuq sets none).
    volcano-sh/volcano pkg/webhooks/admission/jobs/mutate/mutate_job.go, patchDefaultMaxRetry:
    a maxRetry of 0 (an int32: absent and 0 are the same) becomes 3. pkg/controllers/job/
    state/running.go (and pending.go): RestartJob -> Restarting with RetryCount++;
    restarting.go: `if status.RetryCount >= maxRetry` the job is Failed, else the gang is
    created again. So a gang restarts maxRetry - 1 times."""
    action = next(
        (
            p.get("action")
            for p in spec.get("policies") or []
            if p.get("event") in (event, "*") or event in (p.get("events") or [])
        ),
        "SyncJob",
    )
    if action != "RestartJob":
        return 0
    max_retry = spec.get("maxRetry") or 3
    retry_count = 0
    restarts = 0
    while True:  # every run of the gang fails
        retry_count += 1
        if retry_count >= max_retry:
            return restarts
        restarts += 1


@pytest.mark.parametrize("retries_max", [0, 1, 3])
def test_a_volcano_job_restarts_in_place_as_often_as_its_retries_allow(retries_max: int) -> None:
    spec = build(request(nodes=2, retries_max=retries_max), cfg()).objects[0]["spec"]
    assert _volcano_in_place_restarts(spec) == retries_max, spec["maxRetry"]


def test_indexed_training_wires_master_addr_and_rank_from_the_completion_index() -> None:
    plan = build(request(nodes=4), cfg(workload="indexed"))
    job, svc = plan.objects
    name = plan.ref.name
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 4, 4)
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == name == svc["metadata"]["name"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["MASTER_ADDR"]["value"] == f"{name}-0.{name}"
    assert env["WORLD_SIZE"]["value"] == "4"
    assert env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True


def test_the_users_own_rendezvous_variables_win_over_the_indexed_jobs_wiring() -> None:
    """As on Slurm, where the user's env is applied after gpuq's: a MASTER_ADDR,
    MASTER_PORT, WORLD_SIZE or RANK the job's env gives is what every pod sees, each name
    once, and torchrun meets at the user's address and port. Its node rank still comes from
    the pod's completion index (as on Slurm from SLURM_NODEID), never from a RANK the user
    set, which would give every pod the same rank."""
    own = {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29500", "WORLD_SIZE": "16", "RANK": "5"}
    plan = build(request(nodes=4, env=own), cfg(workload="indexed"))
    template = plan.objects[0]["spec"]["template"]["spec"]
    names = [e["name"] for e in template["containers"][0]["env"]]
    assert sorted(names) == sorted(set(names))
    for index in range(4):
        pod = {
            "metadata": {"name": "p", "annotations": {COMPLETION_INDEX: str(index)}},
            "spec": template,
        }
        argv, env = container_argv(pod)
        assert {k: env[k] for k in own} == own
        assert argv[:6] == [
            "torchrun",
            "--nnodes=4",
            "--nproc_per_node=8",
            f"--node_rank={index}",
            "--master_addr=10.1.2.3",
            "--master_port=29500",
        ]


@pytest.mark.parametrize("port", [0, 65536, 70000, -1, 23456.5, "23456", True])
def test_a_master_port_no_service_can_carry_is_refused_with_the_settings(port: Any) -> None:
    """It becomes the headless Service's port and Volcano's pytorch `--port`, which the API
    server takes from 1 to 65535 only: refused when the settings are parsed, not by the
    Service of every multi-node job (created, then deleted again) or at rendezvous."""
    with pytest.raises(BackendError) as err:
        cfg(workload="indexed", master_port=port)
    assert err.value.permanent
    assert "'master_port'" in err.value.message and "1 to 65535" in err.value.message


@pytest.mark.parametrize("port", [1, 29500, 65535])
def test_a_master_port_in_range_is_the_services_port_and_the_rendezvous_port(port: int) -> None:
    job, svc = build(request(nodes=2), cfg(workload="indexed", master_port=port)).objects
    assert svc["spec"]["ports"][0]["port"] == port and semantic_causes(svc) == []
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MASTER_PORT"]["value"] == str(port)
    vcjob = build(request(nodes=2), cfg(master_port=port)).objects[0]
    assert f"--port={port}" in vcjob["spec"]["plugins"]["pytorch"]


@pytest.mark.parametrize("workload", ["volcano", "indexed"])
def test_a_time_limit_past_int32_seconds_is_clamped_to_the_longest_deadline_kubernetes_takes(
    workload: str,
) -> None:
    """GPUQ_MAX_TIME_LIMIT_S may be raised past 2^31 - 1 s (68 years): the API server refuses
    such a pod activeDeadlineSeconds (Volcano's pods would never be created) and the Job
    controller's time.Duration overflows not far beyond. No job reaches 68 years."""
    obj = build(request(nodes=2, time_limit_s=10**10), cfg(workload=workload)).objects[0]
    if workload == "indexed":
        pods = [obj["spec"]["template"]["spec"]]
        assert semantic_causes(obj) == []
    else:
        pods = [task["template"]["spec"] for task in obj["spec"]["tasks"]]
    deadlines = [pod["activeDeadlineSeconds"] for pod in pods]
    # The pods the controllers make from these templates pass the API server's rules.
    assert [pod_spec_causes("spec", pod, in_job=False) for pod in pods] == [[]] * len(pods)
    assert deadlines and set(deadlines) == {2**31 - 1}


@pytest.mark.parametrize(
    "job",
    [request(kind="agent", nodes=1), request(nodes=2), request(nodes=1)],
    ids=["job", "indexed-gang", "one-node-training"],
)
def test_a_batch_jobs_time_limit_is_its_pods_deadline_not_the_jobs(job: Any) -> None:
    """A Job's activeDeadlineSeconds runs from the Job's start, its pods' wait for a node
    included; a pod's from when its kubelet accepted it (docs/kubernetes.md)."""
    obj = build(job, cfg(workload="indexed")).objects[0]
    assert obj["kind"] == "Job"
    assert "activeDeadlineSeconds" not in obj["spec"]
    assert obj["spec"]["template"]["spec"]["activeDeadlineSeconds"] == job.time_limit_s


def test_kueue_queue_labels_and_suspends_the_job() -> None:
    job = build(request(nodes=2), cfg(workload="indexed", kueue_queue="lq-a")).objects[0]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "lq-a"
    assert job["spec"]["suspend"] is True


@pytest.mark.parametrize(
    ("strategy", "resource"),
    [("mixed", "nvidia.com/mig-1g.10gb"), ("single", "nvidia.com/gpu")],
)
def test_mig_inference_requests_one_slice_pinned_to_the_chosen_node(
    strategy: str, resource: str
) -> None:
    job = request(kind="agent", gpus_per_node=0, mig_profile="1g.10gb")
    obj = build(job, cfg(mig_strategy=strategy)).objects[0]
    pod = obj["spec"]["template"]["spec"]
    res = pod["containers"][0]["resources"]
    assert res["limits"] == res["requests"] == {resource: "1"}
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "h100-01"}
    assert obj["kind"] == "Job" and obj["apiVersion"] == "batch/v1"


def test_a_media_extension_mig_job_requests_the_resource_the_device_plugin_advertises() -> None:
    """NVIDIA's device plugin (internal/rm/rm.go, AddDefaultResourcesToConfig, mixed strategy)
    advertises `strings.ReplaceAll("mig-"+profile, "+", ".")`: '+' is not allowed in a
    resource name (validateResourceName: a qualified name, else 422 Invalid)."""
    job = request(kind="agent", gpus_per_node=0, mig_profile="1g.10gb+me")
    obj = build(job, cfg(workload="indexed")).objects[0]
    res = obj["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert res["limits"] == res["requests"] == {"nvidia.com/mig-1g.10gb.me": "1"}
    assert semantic_causes(obj) == []


def test_a_gang_is_pinned_to_exactly_the_chosen_nodes_one_pod_each() -> None:
    pod = build(request(nodes=2), cfg()).objects[0]["spec"]["tasks"][1]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["h100-01", "h100-02"]}
    ]
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"


def test_gpus_requests_equal_limits_and_time_limit_checkpoint_priority_are_carried() -> None:
    job = request(
        kind="agent", gpus_per_node=2, checkpoint_dir="/ckpt", priority="high", time_limit_s=900
    )
    obj = build(job, cfg(priority_class_map={"high": "gpuq-high"}, checkpoint_grace_s=90)).objects[
        0
    ]
    pod = obj["spec"]["template"]["spec"]
    res = pod["containers"][0]["resources"]
    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] == "2"
    assert pod["activeDeadlineSeconds"] == 900
    assert pod["terminationGracePeriodSeconds"] == 90
    assert pod["priorityClassName"] == "gpuq-high"
    assert obj["spec"]["backoffLimit"] == 0


@pytest.mark.parametrize("workload", ["volcano", "indexed"])
def test_every_pod_of_an_array_task_knows_its_index(workload: str) -> None:
    array = ArrayTask("0e4c7b5e-2f51-4c8e-9a5e-3c1f0d6b7a21", 7, 16)
    plan = build(request(nodes=2, array=array), cfg(workload=workload))
    envs = [container_argv(pod)[1] for pod in pods_for(plan)]
    assert envs
    for env in envs:
        assert (env["GPUQ_ARRAY_ID"], env["GPUQ_ARRAY_TASK_ID"], env["GPUQ_ARRAY_TASK_COUNT"]) == (
            array.array_id,
            "7",
            "16",
        )
    assert "GPUQ_ARRAY_TASK_ID" not in container_argv(pods_for(build(request(), cfg()))[0])[1]


def test_names_are_dns_labels_derived_from_the_job_and_attempt() -> None:
    assert object_name(JOB_ID, 1) == f"gpuq-{JOB_ID}-1"
    assert object_name(JOB_ID, 2) != object_name(JOB_ID, 1)
    assert ObjectRef.parse("ns/vcjob/n") == ObjectRef("ns", "vcjob", "n")
    with pytest.raises(ValueError, match="not a kubernetes external id"):
        ObjectRef.parse("ns/pod/n")


def test_a_job_without_any_image_is_refused_before_reaching_the_cluster() -> None:
    with pytest.raises(ManifestError, match="no image"):
        build(request(image=None), parse_settings({"kubeconfig": "x"}))


@pytest.mark.parametrize("text", ["Train_42!", "a" * 80, "--", "ÄÖ ü", "x.y"])
def test_dns_label_and_label_value_are_always_valid_and_distinct(text: str) -> None:
    from k8s_rules import DNS1123_LABEL, LABEL_VALUE

    assert DNS1123_LABEL.match(dns_label(text)) and len(dns_label(text)) <= 63
    assert LABEL_VALUE.match(label_value(text)) and len(label_value(text)) <= 63
    assert dns_label(text) != dns_label(text + "!")


# --- hostile input --------------------------------------------------------------------------

FRAGMENTS = [
    *string.printable,
    "é",
    "ß",
    "中",
    "🚀",
    "$(HOME)",
    "$$",
    "$(",
    "`id`",
    "#SBATCH --x",
    "\n",
    "'",
    '"',
    ";",
]
HOSTILE = st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join)
HOSTILE_ARG = st.lists(HOSTILE, min_size=0, max_size=5)
ENV_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True).filter(
    lambda n: (
        not n.startswith(("GPUQ_", "SLURM_"))
        and n not in {"RANK", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE"}
    )
)


def pods_for(plan: Any) -> list[dict[str, Any]]:
    """The pod objects a controller would create from the plan's templates (rank 0)."""
    obj = plan.objects[0]
    templates = (
        [t["template"] for t in obj["spec"]["tasks"]]
        if plan.ref.kind == "vcjob"
        else [obj["spec"]["template"]]
    )
    return [
        {
            "metadata": {
                "name": "p",
                "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
            },
            "spec": t["spec"],
        }
        for t in templates
    ]


@settings(max_examples=150, deadline=None)
@given(
    name=HOSTILE,
    team=HOSTILE.filter(lambda t: t.strip()),
    program=HOSTILE.filter(lambda p: p.strip()),
    args=HOSTILE_ARG,
    env=st.dictionaries(ENV_NAMES, HOSTILE, max_size=4),
    shell=st.booleans(),
    workload=st.sampled_from(["volcano", "indexed"]),
    kind=st.sampled_from(["training", "agent"]),
)
def test_hostile_names_commands_and_env_are_carried_literally(
    name: str,
    team: str,
    program: str,
    args: list[str],
    env: dict[str, str],
    shell: bool,
    workload: str,
    kind: str,
) -> None:
    command: tuple[str, ...] | str = " ".join([program, *args]) if shell else (program, *args)
    job = request(name=name, team=team, command=command, env=env, kind=kind, nodes=1)
    plan = build(job, cfg(workload=workload))
    for obj in builtin_objects(plan.objects):
        kubernetes_validate.validate(obj, "1.33", strict=True)
        assert semantic_causes(obj) == []
    for vc in volcano_objects(plan.objects):
        assert volcano_webhook_denial(vc, {plan.objects[0]["spec"]["queue"]: "Open"}) is None
        assert semantic_causes(vc) == []
    assert plan.objects[0]["metadata"]["annotations"]["gpuq.io/job-name"] == name
    for pod in pods_for(plan):
        argv, pod_env = container_argv(pod)
        # After the kubelet's $(VAR) expansion the process gets exactly what the user wrote;
        # a shell appears only when the user asked for one.
        assert argv == (["/bin/sh", "-c", command] if shell else [program, *args])
        for key, value in env.items():
            assert pod_env[key] == value
        assert pod_env["GPUQ_JOB_NAME"] == name


@settings(max_examples=60, deadline=None)
@given(args=HOSTILE_ARG, nodes=st.integers(2, 16))
def test_a_gang_runs_torchrun_with_the_users_argv_after_it_literally(
    args: list[str], nodes: int
) -> None:
    plan = build(
        request(nodes=nodes, command=("python", "train.py", *args)), cfg(workload="indexed")
    )
    pod = pods_for(plan)[0]
    argv, _ = container_argv(pod)
    assert argv[:7] == [
        "torchrun",
        f"--nnodes={nodes}",
        "--nproc_per_node=8",
        "--node_rank=0",
        f"--master_addr={plan.ref.name}-0.{plan.ref.name}",
        "--master_port=23456",
        "--no_python",
    ]
    assert argv[7:] == ["python", "train.py", *args]


def test_a_gang_runs_a_python_script_directly_and_a_shell_string_without_torchrun() -> None:
    script = pods_for(build(request(nodes=2, command=("train.py", "--lr", "3e-4")), cfg()))[0]
    assert container_argv(script)[0][6:] == ["train.py", "--lr", "3e-4"]
    shell = pods_for(build(request(nodes=2, command="torchrun train.py"), cfg()))[0]
    assert container_argv(shell)[0] == ["/bin/sh", "-c", "torchrun train.py"]


@pytest.mark.parametrize(
    ("text", "env", "expanded"),
    [
        ("$(A)", {"A": "1"}, "1"),
        ("$$(A)", {"A": "1"}, "$(A)"),
        ("$(B)", {}, "$(B)"),
        ("$(", {}, "$("),
        ("a$b", {}, "a$b"),
        ("$", {}, "$"),
    ],
)
def test_the_kubelet_expansion_model_follows_kubernetes(
    text: str, env: dict[str, str], expanded: str
) -> None:
    assert expand(text, env) == expanded
    assert expand(escape_expansion(text), env) == text


@pytest.mark.parametrize(
    ("command", "after_launcher"),
    [
        (("python", "-m", "trainer"), ["--no_python", "python", "-m", "trainer"]),
        # A program named with a leading dash is no option of torchrun's: its `--` (argparse's)
        # ends them, as on Slurm.
        (("-x", "--epochs", "3"), ["--no_python", "--", "-x", "--epochs", "3"]),
        (("-train.py", "--", "a"), ["--", "-train.py", "--", "a"]),
    ],
)
@pytest.mark.parametrize("workload", ["volcano", "indexed"])
def test_a_gang_runs_a_program_named_with_a_dash_as_given(
    command: tuple[str, ...], after_launcher: list[str], workload: str
) -> None:
    for pod in pods_for(build(request(nodes=2, command=command), cfg(workload=workload))):
        argv, _ = container_argv(pod)
        assert argv[0] == "torchrun" and argv[6:] == after_launcher
