"""The fake API server itself, driven through lightkube's real HTTP path: it must answer the
way a real API server does, or the backend's tests prove nothing."""

from __future__ import annotations

import copy
import json
import socket
import threading
from typing import Any
from urllib.parse import urlencode

import httpx2
import pytest
import yaml
from conftest import kubeconfig
from k8s_fakeapi import FakeApiServer, Fault
from k8s_sim import Sim
from lightkube import ApiError, Client, KubeConfig
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod
from lightkube.types import CascadeType, PatchType

NS = "gpuq-team-a"


def config_for(url: str) -> KubeConfig:
    return KubeConfig.from_dict(yaml.safe_load(kubeconfig(url)))


VolcanoJob = create_namespaced_resource("batch.volcano.sh", "v1alpha1", "Job", "jobs")


@pytest.fixture
def client(api: FakeApiServer, sim: Sim) -> Client:
    return Client(
        config=config_for(api.url), namespace=NS, timeout=httpx2.Timeout(3), trust_env=False
    )


def job(name: str = "train", **spec: Any) -> Job:
    body: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"gpuq.io/job-id": name, "team": "a"}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
                }
            },
            **spec,
        },
    }
    return Job.from_dict(body)


def raw(
    api: FakeApiServer, method: str, path: str, body: Any = None, **params: str
) -> httpx2.Response:
    with httpx2.Client(base_url=api.url, trust_env=False) as c:
        return c.request(method, path, json=body, params=params)


def test_every_write_gets_a_new_global_resource_version_and_create_sets_identity(
    client: Client,
) -> None:
    a = client.create(job("a"))
    b = client.create(job("b"))
    assert int(b.metadata.resourceVersion) > int(a.metadata.resourceVersion)
    assert a.metadata.uid and a.metadata.uid != b.metadata.uid and a.metadata.creationTimestamp
    patched = client.patch(
        Job, "a", {"metadata": {"labels": {"x": "y"}}}, patch_type=PatchType.MERGE
    )
    assert int(patched.metadata.resourceVersion) > int(b.metadata.resourceVersion)
    listed = client.list(Job)
    assert [j.metadata.name for j in listed] == ["a", "b"]
    assert int(listed.resourceVersion) == int(patched.metadata.resourceVersion)


def test_create_defaults_the_job_selector_and_pod_template_labels_like_the_real_server(
    client: Client,
) -> None:
    made = client.create(job("a"))
    uid = made.spec.selector.matchLabels["batch.kubernetes.io/controller-uid"]
    assert made.spec.template.metadata.labels["batch.kubernetes.io/job-name"] == "a"
    assert made.spec.template.metadata.labels["controller-uid"] == uid
    assert made.spec.completionMode == "NonIndexed" and made.spec.suspend is False


def test_conflicts_answer_409_with_the_real_reasons(client: Client) -> None:
    first = client.create(job("a"))
    with pytest.raises(ApiError) as exists:
        client.create(job("a"))
    assert (exists.value.status.code, exists.value.status.reason) == (409, "AlreadyExists")
    assert exists.value.status.message == 'jobs.batch "a" already exists'
    client.patch(Job, "a", {"metadata": {"labels": {"x": "1"}}}, patch_type=PatchType.MERGE)
    stale = first
    stale.metadata.labels = {"x": "2"}
    with pytest.raises(ApiError) as conflict:
        client.replace(stale)
    assert (conflict.value.status.code, conflict.value.status.reason) == (409, "Conflict")


def test_a_resource_version_carried_by_a_patch_is_a_precondition(client: Client) -> None:
    """As a real API server (kubernetes/kubernetes#63104; controller-runtime's
    MergeFromWithOptimisticLock relies on it): stale is 409 Conflict, current or absent
    applies."""
    first = client.create(job("a"))
    rv = first.metadata.resourceVersion
    client.patch(Job, "a", {"metadata": {"labels": {"x": "1"}}}, patch_type=PatchType.MERGE)
    for patch_type in (PatchType.MERGE, PatchType.STRATEGIC):
        stale = {"metadata": {"labels": {"x": "2"}, "resourceVersion": rv}}
        with pytest.raises(ApiError) as conflict:
            client.patch(Job, "a", stale, patch_type=patch_type)
        assert (conflict.value.status.code, conflict.value.status.reason) == (409, "Conflict")
    with pytest.raises(ApiError) as json_conflict:
        client.patch(
            Job,
            "a",
            [{"op": "replace", "path": "/metadata/resourceVersion", "value": rv}],
            patch_type=PatchType.JSON,
        )
    assert json_conflict.value.status.code == 409
    current = client.get(Job, "a").metadata.resourceVersion
    fresh = {"metadata": {"labels": {"x": "3"}, "resourceVersion": current}}
    assert client.patch(Job, "a", fresh, patch_type=PatchType.MERGE).metadata.labels["x"] == "3"
    assert client.get(Job, "a").metadata.labels["x"] == "3"


def test_a_json_patch_applies_all_or_nothing_and_a_failed_test_is_a_bare_422(
    client: Client,
) -> None:
    client.create(job("a"))
    client.patch(
        Job,
        "a",
        [
            {"op": "add", "path": "/metadata/finalizers", "value": ["x.io/a", "x.io/b"]},
            {"op": "add", "path": "/metadata/labels/x~1y", "value": "1"},
        ],
        patch_type=PatchType.JSON,
    )
    made = client.get(Job, "a").metadata
    assert made.finalizers == ["x.io/a", "x.io/b"] and made.labels["x/y"] == "1"
    remove_b = [
        {"op": "test", "path": "/metadata/finalizers/1", "value": "x.io/b"},
        {"op": "remove", "path": "/metadata/finalizers/1"},
    ]
    for wrong in (
        [{"op": "test", "path": "/metadata/finalizers/0", "value": "x.io/b"}, remove_b[1]],
        [{"op": "remove", "path": "/metadata/finalizers/5"}],
        [{"op": "remove", "path": "/metadata/annotations/none"}],
    ):
        with pytest.raises(ApiError) as refused:
            client.patch(Job, "a", wrong, patch_type=PatchType.JSON)
        status = refused.value.status
        assert (status.code, status.reason) == (422, "Invalid")
        assert status.message == "the server rejected our request due to an error in our request"
    assert client.get(Job, "a").metadata.finalizers == ["x.io/a", "x.io/b"]  # nothing applied
    client.patch(Job, "a", remove_b, patch_type=PatchType.JSON)
    assert client.get(Job, "a").metadata.finalizers == ["x.io/a"]


def test_missing_objects_and_namespaces_are_404(client: Client) -> None:
    with pytest.raises(ApiError) as missing:
        client.get(Job, "nope")
    assert (missing.value.status.code, missing.value.status.reason) == (404, "NotFound")
    with pytest.raises(ApiError) as no_ns:
        client.create(job("a"), namespace="no-such-team")
    assert (
        no_ns.value.status.code == 404
        and no_ns.value.status.message == 'namespaces "no-such-team" not found'
    )


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda j: j["metadata"].update(name="Train_42!"), "metadata.name"),
        (
            lambda j: j["spec"]["template"]["spec"].update(restartPolicy="Always"),
            "spec.template.spec.restartPolicy",
        ),
        (
            lambda j: j["spec"]["template"]["spec"]["containers"][0].pop("image"),
            "spec.template.spec.containers[0].image",
        ),
        (
            lambda j: j["spec"]["template"]["spec"].update(containers=[]),
            "spec.template.spec.containers",
        ),
        (
            lambda j: j["spec"]["template"]["spec"]["containers"][0].update(
                resources={"limits": {"nvidia.com/gpu": "one"}}
            ),
            "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
        ),
        (lambda j: j["spec"].update(parallelism=-1), "spec.parallelism"),
        (
            lambda j: j["spec"]["template"]["spec"]["containers"][0].update(
                resources={"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "1"}}
            ),
            "spec.template.spec.containers[0].resources.requests[nvidia.com/gpu]",
        ),
        (lambda j: j["metadata"].update(labels={"gpuq.io/team": "a b"}), "metadata.labels"),
        (  # '+' is not allowed in a resource name (validateResourceName: a qualified name)
            lambda j: j["spec"]["template"]["spec"]["containers"][0].update(
                resources={"limits": {"nvidia.com/mig-1g.10gb+me": "1"}}
            ),
            "spec.template.spec.containers[0].resources.limits[nvidia.com/mig-1g.10gb+me]",
        ),
        (
            lambda j: j["spec"]["template"]["spec"]["containers"].append({"name": "main"}),
            "spec.template.spec.containers[1].name",
        ),
    ],
)
def test_what_a_real_server_rejects_beyond_the_schema_is_422_with_causes(
    api: FakeApiServer, sim: Sim, mutate: Any, field: str
) -> None:
    body = job("a").to_dict()
    mutate(body)
    response = raw(api, "POST", f"/apis/batch/v1/namespaces/{NS}/jobs", body)
    status = response.json()
    assert (response.status_code, status["reason"]) == (422, "Invalid")
    assert field in [c["field"] for c in status["details"]["causes"]]
    assert status["message"].startswith('Job.batch "')


def test_a_wrong_type_is_a_400_decode_error_and_unknown_fields_are_dropped_or_refused(
    api: FakeApiServer, sim: Sim
) -> None:
    body = job("a").to_dict()
    body["spec"]["parallelism"] = "two"
    assert raw(api, "POST", f"/apis/batch/v1/namespaces/{NS}/jobs", body).status_code == 400
    body = job("b").to_dict()
    body["spec"]["bogus"] = 1
    strict = raw(
        api, "POST", f"/apis/batch/v1/namespaces/{NS}/jobs", body, fieldValidation="Strict"
    )
    assert strict.status_code == 400 and 'unknown field "spec.bogus"' in strict.json()["message"]
    lax = raw(api, "POST", f"/apis/batch/v1/namespaces/{NS}/jobs", body)
    assert lax.status_code == 201 and "bogus" not in lax.json()["spec"]
    assert (
        'unknown field \\"spec.bogus\\"' in lax.headers["Warning"]
        or "spec.bogus" in lax.headers["Warning"]
    )


def test_volcano_jobs_are_checked_against_the_crd_and_the_admission_webhook(
    api: FakeApiServer, sim: Sim
) -> None:
    base = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "vj"},
        "spec": {
            "queue": "team-a",
            "minAvailable": 3,
            "tasks": [
                {
                    "name": "master",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "main", "image": "busybox"}],
                        }
                    },
                }
            ],
        },
    }
    path = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NS}/jobs"
    denied = raw(api, "POST", path, base)
    assert denied.status_code == 400
    assert "minAvailable' should not be greater than total replicas" in denied.json()["message"]
    base["spec"]["minAvailable"] = 2
    base["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": "one"}
    }
    invalid = raw(api, "POST", path, base).json()
    assert invalid["code"] == 422 and invalid["details"]["causes"][0]["field"].endswith(
        "limits.nvidia.com/gpu"
    )
    del base["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]
    made = raw(api, "POST", path, base).json()
    assert made["spec"]["maxRetry"] == 3  # the CRD schema default is applied
    base["metadata"]["name"] = "vj-zero"
    base["spec"]["maxRetry"] = 0
    zero = raw(api, "POST", path, base).json()
    assert zero["spec"]["maxRetry"] == 3  # the mutating webhook: 0 is unset
    base["metadata"]["name"] = "vj2"
    base["spec"]["queue"] = "nobody"
    assert "unable to find job queue" in raw(api, "POST", path, base).json()["message"]


def test_label_selectors_filter_lists(client: Client) -> None:
    client.create(job("a"))
    client.create(job("b"))
    client.patch(Job, "b", {"metadata": {"labels": {"team": "b"}}}, patch_type=PatchType.MERGE)
    assert [j.metadata.name for j in client.list(Job, labels={"team": "a"})] == ["a"]
    assert [j.metadata.name for j in client.list(Job, labels={"gpuq.io/job-id": None})] == [
        "a",
        "b",
    ]
    assert [j.metadata.name for j in client.list(Job, labels={"gpuq.io/job-id": ["b", "c"]})] == [
        "b"
    ]
    assert [j.metadata.name for j in client.list(Job, chunk_size=1)] == ["a", "b"]


JOBS_PATH = f"/apis/batch/v1/namespaces/{NS}/jobs"


@pytest.mark.parametrize(
    ("selector", "names"),
    [
        ("gpuq.io/job-id in (a,c)", ["a", "c"]),
        ("gpuq.io/job-id in ( a , c )", ["a", "c"]),
        ("team in ()", ["b"]),  # the set of the empty value, as labels.Parse reads it
        ("team in (a,)", ["a", "b"]),
        ("team notin (a)", ["b", "c"]),  # c has no team: notin holds
        ("team", ["a", "b"]),
        ("!team", ["c"]),
        ("team=,gpuq.io/job-id!=a", ["b"]),
        ("gpuq.io/job-id in (a b)", None),
        (f"gpuq.io/job-id in ({'x' * 64})", None),  # a label value is at most 63
        ("gpuq.io/job-id in (a_)", None),
        ("gpuq.io/job-id in a", None),
        ("gpuq.io/job-id in (a", None),
        ("Team_/x in (a)", None),
        ("!team=a", None),
        ("team in (a),,", None),
    ],
)
def test_set_based_label_selectors_are_parsed_as_the_api_server_parses_them(
    api: FakeApiServer, client: Client, selector: str, names: list[str] | None
) -> None:
    labels = {"a": {"team": "a"}, "b": {"team": ""}, "c": {"team": None}}
    for name, patch in labels.items():
        client.create(job(name))
        client.patch(Job, name, {"metadata": {"labels": patch}}, patch_type=PatchType.MERGE)

    answer = raw(api, "GET", JOBS_PATH, labelSelector=selector)

    if names is None:
        assert (answer.status_code, answer.json()["reason"]) == (400, "BadRequest")
    else:
        assert [j["metadata"]["name"] for j in answer.json()["items"]] == names


def raw_line(api: FakeApiServer, target: str) -> tuple[int, bytes]:
    """A GET sent over a plain socket (httpx refuses a query over 64 KiB itself): the
    status code and body of the answer."""
    host, port = api.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while piece := sock.recv(1 << 16):
            answer += piece
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_a_selector_is_taken_up_to_the_api_servers_1_mib_of_request_line_then_431(
    api: FakeApiServer, client: Client
) -> None:
    """The API server's Go http.Server reads 1 MiB of request line and headers (its
    MaxHeaderBytes) and answers more 431; Python's own bound would be a 414 at 64 KiB."""
    client.create(job("a"))

    def target(ids: list[str]) -> str:
        selector = "gpuq.io/job-id in (" + ",".join(ids) + ")"
        return f"{JOBS_PATH}?{urlencode({'labelSelector': selector})}"

    code, body = raw_line(api, target(["a"] + [f"{i:036d}" for i in range(5000)]))  # 195 KB
    assert code == 200
    assert [j["metadata"]["name"] for j in json.loads(body)["items"]] == ["a"]

    code, body = raw_line(api, target([f"{i:036d}" for i in range(30000)]))  # 1.2 MB
    assert (code, body) == (431, b"431 Request Header Fields Too Large")


def test_the_job_pod_template_is_immutable(client: Client) -> None:
    made = client.create(job("a"))
    made.spec.template.spec.containers[0].image = "busybox:2"
    with pytest.raises(ApiError) as err:
        client.replace(made)
    assert err.value.status.code == 422 and "field is immutable" in err.value.status.message


def test_watch_streams_in_order_from_a_resource_version_and_expires_old_ones(crd_dir: Any) -> None:
    with FakeApiServer(crd_dir=crd_dir, history=5) as api:
        Sim(api).namespace(NS)
        client = Client(config=config_for(api.url), namespace=NS, trust_env=False)
        listing = client.list(Job)
        assert list(listing) == []
        rv = listing.resourceVersion
        client.create(job("a"))
        client.patch(Job, "a", {"metadata": {"labels": {"x": "1"}}}, patch_type=PatchType.MERGE)
        client.delete(Job, "a")
        seen = []
        for kind, obj in client.watch(Job, resource_version=rv, server_timeout=1):
            seen.append((kind, obj.metadata.name, int(obj.metadata.resourceVersion)))
            if len(seen) == 3:
                break
        assert [s[0] for s in seen] == ["ADDED", "MODIFIED", "DELETED"]
        assert [s[2] for s in seen] == sorted(s[2] for s in seen)
        for i in range(6):  # push the first revisions out of the kept history
            client.create(job(f"j{i}"))
        with pytest.raises(ApiError) as gone:
            next(iter(client.watch(Job, resource_version=rv, server_timeout=1)))
        assert (gone.value.status.code, gone.value.status.reason) == (410, "Expired")


def test_a_watch_sees_a_label_change_leaving_its_selector_as_deleted(
    client: Client, api: FakeApiServer
) -> None:
    client.create(job("a"))
    rv = client.get(Job, "a").metadata.resourceVersion
    client.patch(Job, "a", {"metadata": {"labels": {"team": "b"}}}, patch_type=PatchType.MERGE)
    kind, obj = next(
        iter(client.watch(Job, labels={"team": "a"}, resource_version=rv, server_timeout=1))
    )
    assert (kind, obj.metadata.name) == ("DELETED", "a")


def test_foreground_delete_holds_the_owner_until_its_pods_are_gone(
    client: Client, sim: Sim, api: FakeApiServer
) -> None:
    client.create(job("a"))
    eid = f"{NS}/job/a"
    pods = sim.run(eid)
    client.patch(
        Pod,
        pods[0]["metadata"]["name"],
        {"metadata": {"finalizers": ["example.com/slow"]}},
        patch_type=PatchType.MERGE,
    )
    client.delete(Job, "a", cascade=CascadeType.FOREGROUND)
    client.delete(Job, "a", cascade=CascadeType.FOREGROUND)  # a second delete adds nothing
    held = client.get(Job, "a")
    assert (
        held.metadata.deletionTimestamp is not None
        and held.metadata.finalizers.count("foregroundDeletion") == 1
    )
    assert client.get(Pod, pods[0]["metadata"]["name"]).metadata.deletionTimestamp is not None
    client.patch(
        Pod,
        pods[0]["metadata"]["name"],
        {"metadata": {"finalizers": None}},
        patch_type=PatchType.MERGE,
    )
    assert list(client.list(Pod)) == []
    with pytest.raises(ApiError):
        client.get(Job, "a")


def test_a_pods_deletion_grace_is_the_pod_strategys_and_is_only_ever_shortened(
    client: Client, sim: Sim, api: FakeApiServer
) -> None:
    """registry/core/pod/strategy.go CheckGracefulDelete and rest.BeforeDelete: the DELETE's
    gracePeriodSeconds, else the pod's terminationGracePeriodSeconds (30 by default); a pod no
    node has taken goes at once; a second delete may shorten the grace, never lengthen it."""
    api.store.pods_stop_at_once = False
    client.create(job("a", parallelism=3))
    eid = f"{NS}/job/a"
    sim.create_pods(eid)
    bound, longer, unbound = (p["metadata"]["name"] for p in sim.pods(eid))
    sim.run(eid)  # binds all three
    with api.store.lock:  # the third never bound
        pt = api.store.types[("", "v1", "pods")]
        pod = copy.deepcopy(api.store.get(pt, NS, unbound))
        pod["spec"].pop("nodeName")
        api.store.replace(pt, pod)

    client.delete(Pod, bound)
    client.delete(Pod, longer, grace_period=10)
    client.delete(Pod, unbound, grace_period=10)

    def grace(name: str) -> int | None:
        return client.get(Pod, name).metadata.deletionGracePeriodSeconds

    assert (grace(bound), grace(longer)) == (30, 10)
    with pytest.raises(ApiError):
        client.get(Pod, unbound)
    rv = client.get(Pod, longer).metadata.resourceVersion
    client.delete(Pod, longer, grace_period=60)  # longer: nothing changes, nothing written
    assert (grace(longer), client.get(Pod, longer).metadata.resourceVersion) == (10, rv)
    client.delete(Pod, bound, grace_period=5)
    assert grace(bound) == 5
    sim.kubelet_confirms_stops()
    assert list(client.list(Pod)) == []


def test_pods_tolerate_the_not_ready_and_unreachable_taints_for_300_s_unless_they_say_otherwise(
    client: Client, sim: Sim
) -> None:
    """The DefaultTolerationSeconds admission plugin (on by default) adds what a pod lacks."""
    own = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}
    client.create(job("a"))
    body = job("b").to_dict()
    body["spec"]["template"]["spec"]["tolerations"] = [own]
    client.create(Job.from_dict(body))
    (a,) = sim.create_pods(f"{NS}/job/a")
    (b,) = sim.create_pods(f"{NS}/job/b")
    default = {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    assert a["spec"]["tolerations"] == [
        {"key": "node.kubernetes.io/not-ready", **default},
        {"key": "node.kubernetes.io/unreachable", **default},
    ]
    assert b["spec"]["tolerations"] == [own, {"key": "node.kubernetes.io/not-ready", **default}]


def test_a_pod_on_an_unreachable_node_is_evicted_when_its_toleration_runs_out_and_stays_terminating(
    client: Client, sim: Sim, clock: Any
) -> None:
    """The node lifecycle controller marks the node and its pods; the taint eviction
    controller deletes the pods after tolerationSeconds; no kubelet confirms, so the pod
    stays (phase Running, deletionTimestamp set) until the node is back or deleted."""
    client.create(job("a", parallelism=2))
    pods = sim.run(f"{NS}/job/a", nodes=["h100-01", "h100-02"])
    on_1, on_2 = sorted(pods, key=lambda p: p["spec"]["nodeName"])
    sim.node_unreachable("h100-02")

    node = sim.api.store.get(sim.api.store.types[("", "v1", "nodes")], "", "h100-02")
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")
    assert [(t["key"], t["effect"]) for t in node["spec"]["taints"]] == [
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    ]
    pod = client.get(Pod, on_2["metadata"]["name"])
    assert [c.status for c in pod.status.conditions if c.type == "Ready"] == ["False"]

    clock.now += 299
    assert sim.taint_eviction() == []
    clock.now += 1
    assert [p["metadata"]["name"] for p in sim.taint_eviction()] == [on_2["metadata"]["name"]]
    pod = client.get(Pod, on_2["metadata"]["name"])
    assert pod.metadata.deletionTimestamp is not None and pod.status.phase == "Running"
    assert [c.reason for c in pod.status.conditions if c.type == "DisruptionTarget"] == [
        "DeletionByTaintManager"
    ]
    sim.kubelet_confirms_stops()  # the kubelets that can be reached: not that one
    assert client.get(Pod, on_2["metadata"]["name"]).metadata.deletionTimestamp is not None
    assert client.get(Pod, on_1["metadata"]["name"]).metadata.deletionTimestamp is None

    sim.node_reachable("h100-02")  # its kubelet stops the pod and confirms
    assert [p.metadata.name for p in client.list(Pod)] == [on_1["metadata"]["name"]]


def test_a_pod_stuck_terminating_on_an_unreachable_node_goes_when_the_node_is_deleted(
    client: Client, sim: Sim, clock: Any
) -> None:
    client.create(job("a"))
    sim.run(f"{NS}/job/a", nodes=["h100-03"])
    sim.node_unreachable("h100-03")
    clock.now += 300
    sim.taint_eviction()
    sim.delete_node("h100-03")
    sim.pod_gc()  # gcOrphaned force-deletes it (grace 0)
    assert list(client.list(Pod)) == []


def test_a_batch_job_deleted_without_a_policy_orphans_its_pods(client: Client, sim: Sim) -> None:
    client.create(job("a"))
    pods = sim.run(f"{NS}/job/a")
    client.delete(Job, "a")
    orphan = client.get(Pod, pods[0]["metadata"]["name"])
    assert orphan.metadata.ownerReferences in (None, [])


def test_pod_logs_honour_limit_bytes_tail_lines_and_since(
    client: Client, sim: Sim, clock: Any
) -> None:
    client.create(job("a"))
    pod = sim.run(f"{NS}/job/a")[0]
    sim.log(pod, b"one\n", at=clock() - 100)
    sim.log(pod, b"two\n", at=clock() - 10)
    sim.log(pod, b"three\n")
    name = pod["metadata"]["name"]
    assert list(client.log(name)) == ["one\n", "two\n", "three\n"]
    assert list(client.log(name, tail_lines=1)) == ["three\n"]
    assert list(client.log(name, since=30)) == ["two\n", "three\n"]


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (Fault("status", code=429, retry_after=3), 429),
        (Fault("status", code=500), 500),
    ],
)
def test_faults_answer_with_real_status_objects(
    client: Client, api: FakeApiServer, fault: Fault, expected: int
) -> None:
    api.inject(fault)
    with pytest.raises(ApiError) as err:
        client.list(Job).__iter__().__next__()
    assert err.value.status.code == expected
    if fault.retry_after is not None:
        assert err.value.response.headers["Retry-After"] == "3"
    assert list(client.list(Job)) == []  # only `times` requests are hit


def test_a_dropped_connection_after_the_write_leaves_the_object_created(
    client: Client, api: FakeApiServer
) -> None:
    api.inject(Fault("drop_after", method="POST"))
    with pytest.raises(httpx2.TransportError):
        client.create(job("a"))
    assert client.get(Job, "a").metadata.name == "a"
    api.inject(Fault("drop", method="POST"))
    with pytest.raises(httpx2.TransportError):
        client.create(job("b"))
    assert [j.metadata.name for j in client.list(Job)] == ["a"]


def test_a_slow_answer_trips_the_client_timeout(api: FakeApiServer, sim: Sim) -> None:
    slow_client = Client(
        config=config_for(api.url), namespace=NS, timeout=httpx2.Timeout(0.2), trust_env=False
    )
    api.inject(Fault("slow", delay=0.6))
    with pytest.raises(httpx2.TimeoutException):
        list(slow_client.list(Job))


def test_concurrent_creates_get_distinct_increasing_revisions(client: Client) -> None:
    errors: list[Exception] = []

    def make(i: int) -> None:
        try:
            client.create(job(f"c{i}"))
        except Exception as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=make, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    revisions = [int(j.metadata.resourceVersion) for j in client.list(Job)]
    assert errors == [] and len(set(revisions)) == 8
