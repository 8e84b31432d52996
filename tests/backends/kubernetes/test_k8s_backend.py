"""The backend against the fake API server over real HTTP: dispatch, follow, cancel, logs,
inventory, MIG relayout and error classification."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from conftest import NAMESPACE, FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer, Fault
from k8s_sim import BATCH, VOLCANO, Sim

from queue_service.backends import ClusterConfig
from queue_service.backends.base import BackendError
from queue_service.backends.base import RemoteState as R
from queue_service.backends.kubernetes import KubernetesBackend, create
from queue_service.backends.kubernetes.manifests import FINALIZER

WORKLOADS = ["volcano", "indexed"]


def backend_for(
    api: FakeApiServer, clock: FakeClock, workload: str, **settings: Any
) -> KubernetesBackend:
    return make_backend(api, clock, workload=workload, **settings)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_training_job_goes_dispatched_running_succeeded(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    b = backend_for(api, clock, workload)
    eid = b.submit(request(nodes=2)).external_id
    assert b.poll([eid])[eid].state == R.QUEUED
    sim.run(eid)
    assert b.poll([eid])[eid].state == R.RUNNING
    sim.succeed(eid)
    done = b.poll([eid])[eid]
    assert (done.state, done.exit_code) == (R.SUCCEEDED, 0)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_failing_job_reports_its_exit_code(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    b = backend_for(api, clock, workload)
    eid = b.submit(request(nodes=2, retries_max=0)).external_id
    sim.run(eid)
    sim.fail(eid, exit_code=3)
    status = b.poll([eid])[eid]
    assert (status.state, status.exit_code) == (R.FAILED, 3)
    assert "exit code 3" in status.reason


def test_an_oom_kill_is_failed_with_the_reason(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = backend_for(api, clock, "indexed")
    eid = b.submit(request(kind="agent", gpus_per_node=0, mig_profile="1g.10gb")).external_id
    sim.run(eid)
    sim.fail(eid, exit_code=137, reason="OOMKilled")
    status = b.poll([eid])[eid]
    assert (
        status.state == R.FAILED
        and "OOMKilled" in status.reason
        and status.native_state == "OOMKilled"
    )


@pytest.mark.parametrize(
    ("cause", "state"), [("kubelet", R.NODE_FAILURE), ("preemption", R.PREEMPTED)]
)
def test_an_evicted_batch_job_is_reported_for_requeue(
    api: FakeApiServer, sim: Sim, clock: FakeClock, cause: str, state: str
) -> None:
    b = backend_for(api, clock, "indexed")
    eid = b.submit(request(nodes=2)).external_id
    sim.run(eid)
    sim.evict(eid, index=1, cause=cause)
    assert b.poll([eid])[eid].state == state


def test_volcano_restarts_a_gang_whose_pod_was_deleted_in_place_up_to_max_retry(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """A preemption deletes the pod (Volcano's PodEvicted -> RestartJob: the job's retries
    list preemption)."""
    b = backend_for(api, clock, "volcano")
    eid = b.submit(request(nodes=2, retries_max=1)).external_id
    sim.run(eid)
    sim.evict(eid, cause="preemption")
    restarting = b.poll([eid])[eid]
    assert restarting.state == R.QUEUED and "retry 1" in restarting.reason
    sim.run(eid)
    assert b.poll([eid])[eid].state == R.RUNNING
    sim.evict(eid, cause="preemption")
    final = b.poll([eid])[eid]
    assert final.state == R.FAILED and "after 1 in-place restarts" in final.reason


def test_a_volcano_gang_whose_pod_its_kubelet_evicted_is_reported_for_requeue(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """The kubelet's eviction leaves the pod Failed (Volcano's PodFailed -> TerminateJob):
    the job ends a node failure, for the service to retry as a new attempt."""
    b = backend_for(api, clock, "volcano")
    eid = b.submit(request(nodes=2, retries_max=1)).external_id
    sim.run(eid)
    sim.evict(eid, index=1)
    status = b.poll([eid])[eid]
    assert status.state == R.NODE_FAILURE and "evicted" in status.reason, status
    assert sim.workload(eid)[1]["status"]["state"]["phase"] == "Terminated"


def test_a_time_limit_is_reported_as_timeout(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = backend_for(api, clock, "indexed")
    eid = b.submit(request(nodes=1)).external_id
    sim.run(eid)
    sim.deadline(eid)
    assert b.poll([eid])[eid].state == R.TIMEOUT


def test_unschedulable_and_image_pull_problems_keep_the_job_queued_with_a_reason(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = backend_for(api, clock, "indexed")
    eid = b.submit(request(nodes=1)).external_id
    sim.unschedulable(eid)
    assert "Insufficient nvidia.com/gpu" in b.poll([eid])[eid].reason
    other = b.submit(request(job_id="11111111-2222-3333-4444-555555555555")).external_id
    sim.image_pull_backoff(other)
    assert b.poll([other])[other].state == R.QUEUED
    clock.now += 301  # past image_pull_grace_s: failed, and the Job is deleted
    failed = b.poll([other])[other]
    assert failed.state == R.FAILED and "ImagePullBackOff" in failed.reason
    assert b.poll([other])[other].state == R.LOST


def test_a_duplicate_dispatch_after_a_timeout_creates_exactly_one_object(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = backend_for(api, clock, "indexed")
    api.inject(Fault("drop_after", method="POST", path_contains="/jobs"))
    with pytest.raises(BackendError) as lost:
        make_backend(api, clock, workload="indexed", max_retries=0).submit(request(nodes=2))
    assert lost.value.permanent is False
    again = b.submit(request(nodes=2, resubmit=True))
    assert again.adopted is True
    # The retry finds the first Job by the attempt's labels and creates none; it makes the
    # Service the lost answer left unmade.
    jobs = [r for r in api.calls("POST") if r.path.endswith("/jobs")]
    assert len(jobs) == 1
    assert len(api.store.objects[api.store.types[("batch", "v1", "jobs")]]) == 1
    assert len(api.store.objects[api.store.types[("", "v1", "services")]]) == 1


def test_a_submit_retried_inside_the_backend_adopts_its_own_first_attempt(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = backend_for(api, clock, "volcano")
    api.inject(Fault("drop_after", method="POST"))
    result = b.submit(request(nodes=2))
    assert result.adopted is True
    assert len(api.store.objects[api.store.types[("batch.volcano.sh", "v1alpha1", "jobs")]]) == 1


@pytest.mark.parametrize("workload", WORKLOADS)
def test_cancel_deletes_in_the_foreground_and_is_reported_cancelled(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    b = backend_for(api, clock, workload)
    eid = b.submit(request(nodes=2)).external_id
    sim.run(eid)
    assert b.cancel(eid, grace_s=5) is True  # a deletion's end cannot be told from a natural one
    (delete,) = [c for c in api.calls("DELETE") if "/jobs/" in c.path]
    assert (
        delete.query["propagationPolicy"] == "Foreground"
        and delete.query["gracePeriodSeconds"] == "5"
    )
    assert api.store.objects[api.store.types[("", "v1", "pods")]] == {}
    assert b.poll([eid])[eid].state == R.CANCELLED  # held by gpuq's finalizer until seen
    assert b.poll([eid])[eid].state == R.LOST  # then released and gone
    b.cancel(eid)  # cancelling again is harmless


@pytest.mark.parametrize("workload", WORKLOADS)
def test_cancel_of_a_workload_that_already_ended_deletes_nothing_and_says_so(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    b = backend_for(api, clock, workload)
    eid = b.submit(request(nodes=2)).external_id
    sim.run(eid)
    sim.succeed(eid)

    assert b.cancel(eid, grace_s=5) is False

    assert api.calls("DELETE") == []
    assert b.poll([eid])[eid].state == R.SUCCEEDED  # still there to be reported


def _held_by_gpuq(api: FakeApiServer, eid: str) -> bool:
    _, kind, name = eid.split("/")
    t = api.store.types[VOLCANO if kind == "vcjob" else BATCH]
    with api.store.lock:
        left = api.store.objects[t].get((NAMESPACE, name))
    return left is not None and FINALIZER in (left["metadata"].get("finalizers") or [])


def _ttl_expires(sim: Sim, eid: str) -> None:
    """The TTL-after-finished controller (or Volcano's garbage collector) deleting a finished
    workload, Foreground (pkg/controller/ttlafterfinished)."""
    t, obj = sim.workload(eid)
    with sim.store.lock:
        sim.store.delete(t, NAMESPACE, obj["metadata"]["name"], "Foreground", None)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_job_that_succeeded_and_expired_before_the_next_sync_is_reported_succeeded(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    b = backend_for(api, clock, workload, ttl_after_finished_s=0)
    eid = b.submit(request(nodes=2)).external_id
    sim.run(eid)
    assert b.poll([eid])[eid].state == R.RUNNING
    sim.succeed(eid)
    _ttl_expires(sim, eid)  # ttl 0: before gpuq's next sync; gpuq's finalizer holds it
    status = b.poll([eid])[eid]
    assert (status.state, status.exit_code) == (R.SUCCEEDED, 0), status
    assert b.poll([eid])[eid].state == R.LOST  # released, then gone


@pytest.mark.parametrize("workload", WORKLOADS)
def test_cancel_of_a_finished_workload_its_ttl_deleted_stops_nothing(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    b = backend_for(api, clock, workload, ttl_after_finished_s=5)
    eid = b.submit(request(nodes=2)).external_id
    sim.run(eid)
    sim.succeed(eid)
    clock.now += 5
    _ttl_expires(sim, eid)

    assert b.cancel(eid, grace_s=5) is False  # it ended before anyone deleted it

    assert api.calls("DELETE") == []
    status = b.poll([eid])[eid]
    assert (status.state, status.exit_code) == (R.SUCCEEDED, 0)


def test_a_workload_stopped_by_poll_does_not_keep_gpuqs_finalizer_forever(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """poll deletes a workload whose image never pulls, then releases the finalizer of an
    object that its own delete changed: a job reported ended is never polled again, so a
    release that fails here would hold the Job (and its namespace) for ever."""
    b = backend_for(api, clock, "indexed")
    eid = b.submit(request(nodes=1)).external_id
    sim.image_pull_backoff(eid)
    clock.now += 301  # past image_pull_grace_s
    assert b.poll([eid])[eid].state == R.FAILED
    assert not _held_by_gpuq(api, eid)


def test_the_finalizer_is_released_when_another_writer_moved_it_meanwhile(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = backend_for(api, clock, "indexed")
    eid = b.submit(request(nodes=1)).external_id
    sim.run(eid)
    sim.succeed(eid)
    t, obj = sim.workload(eid)

    def another_controller() -> None:
        with api.store.lock:
            current = copy.deepcopy(api.store.get(t, NAMESPACE, obj["metadata"]["name"]))
            current["metadata"]["finalizers"].insert(0, "example.com/audit")
            api.store.replace(t, current, spec_changed=False)

    api.inject(Fault("race", method="PATCH", action=another_controller))
    assert b.poll([eid])[eid].state == R.SUCCEEDED
    assert sim.workload(eid)[1]["metadata"]["finalizers"] == ["example.com/audit"]
    assert len(api.calls("PATCH")) == 2  # the first found its index moved (422), re-read


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_cancelled_job_is_not_reported_ended_while_its_pods_are_still_terminating(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    """A deleted pod stays Running until the kubelet has stopped its containers: up to
    terminationGracePeriodSeconds (checkpoint_grace_s, so a job can save its state). Until
    then its GPUs are not free, and the job has not ended."""
    b = backend_for(api, clock, workload)
    eid = b.submit(request(nodes=2, checkpoint_dir="/ckpt")).external_id
    sim.run(eid)
    pt = api.store.types[("", "v1", "pods")]
    with api.store.lock:  # the kubelet has not confirmed the containers stopped yet
        for pod in sim.pods(eid):
            pod["metadata"]["finalizers"] = ["test.gpuq.io/kubelet-grace"]
            api.store.replace(pt, pod, spec_changed=False)
    assert b.cancel(eid, grace_s=30) is True
    still = sim.pods(eid)
    assert len(still) == 2 and all(p["metadata"].get("deletionTimestamp") for p in still)

    stopping = b.poll([eid])[eid]
    assert stopping.state == R.RUNNING and "2 pods not stopped yet" in stopping.reason
    assert _held_by_gpuq(api, eid)

    with api.store.lock:  # the kubelet is done: the pods go
        for pod in sim.pods(eid):
            pod["metadata"]["finalizers"] = []
            api.store.replace(pt, pod, spec_changed=False)
    assert b.poll([eid])[eid].state == R.CANCELLED
    assert b.poll([eid])[eid].state == R.LOST


def test_a_second_cancel_of_a_workload_being_deleted_is_still_a_stop(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = backend_for(api, clock, "volcano")
    eid = b.submit(request(nodes=2)).external_id
    sim.run(eid)
    assert b.cancel(eid, grace_s=5) is True

    assert b.cancel(eid, grace_s=5) is True  # gpuq's own deletion, not an end of its own
    assert b.poll([eid])[eid].state == R.CANCELLED


def test_logs_follow_rank_zero_with_byte_offsets(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = backend_for(api, clock, "volcano")
    eid = b.submit(request(nodes=2)).external_id
    assert b.logs(eid).data == b""
    pods = sim.run(eid)
    master = next(p for p in pods if p["metadata"]["name"].endswith("-master-0"))
    worker = next(p for p in pods if p["metadata"]["name"].endswith("-worker-0"))
    sim.log(worker, b"worker noise\n")
    sim.log(master, b"step 1 loss 2.0\r")
    first = b.logs(eid, offset=0, limit=5)
    assert (first.data, first.next_offset, first.eof) == (b"step ", 5, False)
    sim.log(master, "step 2 loss 1.5 ✓\n".encode())
    rest = b.logs(eid, offset=first.next_offset)
    assert rest.data == "1 loss 2.0\rstep 2 loss 1.5 ✓\n".encode()
    sim.succeed(eid)
    end = b.logs(eid, offset=rest.next_offset)
    assert (end.data, end.eof) == (b"", True)
    assert b.logs(eid, stream="stderr").eof is True


def test_inventory_reports_mixed_mig_resources_and_slices_in_use(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    sim.node("mig-01", gpus=1, mig={"1g.10gb": 3, "2g.20gb": 2})
    b = backend_for(api, clock, "volcano")
    eid = b.submit(
        request(kind="agent", gpus_per_node=0, mig_profile="1g.10gb", placement=())
    ).external_id
    sim.run(eid, nodes=["mig-01"])
    nodes = {n.name: n for n in b.nodes()}
    assert set(nodes) == {"h100-01", "h100-02", "h100-03", "h100-04", "mig-01"}
    mig = nodes["mig-01"]
    assert (
        mig.mig
        and sorted(m.profile for m in mig.mig_instances) == ["1g.10gb"] * 3 + ["2g.20gb"] * 2
    )
    used = [m for m in mig.mig_instances if m.in_use]
    assert [(m.profile, m.external_job) for m in used] == [("1g.10gb", request().job_id)]
    assert nodes["h100-01"].gpus == 8 and not nodes["h100-01"].mig


def test_a_media_extension_mig_job_runs_on_the_slice_the_device_plugin_advertises(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    sim.node("mig-me", gpus=1, mig={"1g.10gb+me": 1, "1g.10gb": 6})
    b = backend_for(api, clock, "volcano")
    job = request(kind="agent", gpus_per_node=0, mig_profile="1g.10gb+me", placement=())
    eid = b.submit(job).external_id  # the fake refuses a resource name with '+' (422)
    sim.run(eid, nodes=["mig-me"])
    node = next(n for n in b.nodes() if n.name == "mig-me")
    used = [(m.profile, m.external_job) for m in node.mig_instances if m.in_use]
    assert used == [("1g.10gb+me", job.job_id)]


def test_a_mig_relayout_goes_pending_then_success_or_reports_failure(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    sim.node("mig-01", gpus=1, mig={"7g.80gb": 1})
    b = backend_for(
        api,
        clock,
        "volcano",
        mig_configs={"all-1g.10gb": [["1g.10gb"] * 7], "all-7g": [["7g.80gb"]]},
    )
    layouts = {"all-1g.10gb": {"1g.10gb": 7}, "all-7g": {"7g.80gb": 1}}
    b.apply_mig_layout("mig-01", "all-1g.10gb")
    assert b.mig_layout_state("mig-01") == "unknown"
    sim.mig_manager_step("mig-01", layouts=layouts)
    assert b.mig_layout_state("mig-01") == "pending"
    assert next(n for n in b.nodes() if n.name == "mig-01").state == "drain"
    sim.mig_manager_step("mig-01", layouts=layouts)
    assert b.mig_layout_state("mig-01") == "success"
    node = next(n for n in b.nodes() if n.name == "mig-01")
    assert node.state == "up" and [m.profile for m in node.mig_instances] == ["1g.10gb"] * 7
    b.apply_mig_layout("mig-01", "all-7g")
    sim.mig_manager_step("mig-01", layouts=layouts)
    sim.mig_manager_step("mig-01", layouts=layouts, fail=True)
    assert b.mig_layout_state("mig-01") == "failed"
    failed = next(n for n in b.nodes() if n.name == "mig-01")
    assert failed.state == "drain" and "failed" in failed.reason
    with pytest.raises(BackendError) as unknown:
        b.apply_mig_layout("mig-01", "no-such-config")
    assert unknown.value.permanent


def test_poll_lists_once_per_kind_per_namespace_never_once_per_job(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = backend_for(api, clock, "volcano")
    ids = [
        b.submit(request(job_id=f"00000000-0000-0000-0000-{i:012d}")).external_id for i in range(30)
    ]
    ids += [
        b.submit(
            request(job_id=f"10000000-0000-0000-0000-{i:012d}", kind="agent", gpus_per_node=1)
        ).external_id
        for i in range(10)
    ]
    before = len(api.calls())
    statuses = b.poll(ids)
    calls = api.calls()[before:]
    assert len(statuses) == 40 and all(s.state == R.QUEUED for s in statuses.values())
    assert sorted(c.path.rsplit("/", 1)[-1] for c in calls) == ["jobs", "jobs", "pods"]
    # Each of the polled jobs alone: finished workloads of other jobs stay for their TTL.
    job_ids = [i.rsplit("/", 1)[-1].removeprefix("gpuq-").removesuffix("-1") for i in ids]
    selects = {c.path.split("/")[2]: c.query["labelSelector"] for c in calls if c.method == "GET"}
    assert selects == {
        "batch.volcano.sh": f"gpuq.io/job-id in ({','.join(job_ids[:30])})",
        "batch": f"gpuq.io/job-id in ({','.join(job_ids[30:])})",
        "v1": f"gpuq.io/job-id in ({','.join(job_ids)})",
    }


def test_429_honours_retry_after_then_succeeds(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = backend_for(api, clock, "volcano")
    api.inject(Fault("status", code=429, retry_after=7, method="POST"))
    assert b.submit(request()).adopted is False
    assert clock.sleeps == [7.0]


@pytest.mark.parametrize(
    "fault",
    [
        Fault("status", code=500, times=9),
        Fault("status", code=503, times=9),
        Fault("drop", times=9),
    ],
)
def test_transient_failures_are_retried_then_raised_as_transient(
    api: FakeApiServer, sim: Sim, clock: FakeClock, fault: Fault
) -> None:
    b = backend_for(api, clock, "volcano", max_retries=2)
    api.inject(fault)
    with pytest.raises(BackendError) as err:
        b.nodes()
    assert err.value.permanent is False and "gave up after retries" in err.value.message
    assert len(clock.sleeps) == 2


def test_a_refused_connection_is_transient(clock: FakeClock, crd_dir: Any) -> None:
    with FakeApiServer(crd_dir=crd_dir) as gone:
        url = gone.url
    b = make_backend(type("Stopped", (), {"url": url})(), clock, max_retries=1)  # type: ignore[arg-type]
    with pytest.raises(BackendError) as err:
        b.poll(["ns/job/x"])
    assert err.value.permanent is False


@pytest.mark.parametrize(
    ("job", "overrides", "needle"),
    [
        (request(team="ghosts"), {}, 'namespaces "gpuq-ghosts" not found'),
        (request(), {"volcano_queue": "closed-queue"}, "unable to find job queue"),
        (
            request(kind="agent", env={"BAD NAME": "x"}),
            {},
            "spec.template.spec.containers[0].env[4].name",
        ),
    ],
)
def test_permanent_errors_carry_the_api_servers_message(
    api: FakeApiServer, sim: Sim, clock: FakeClock, job: Any, overrides: dict[str, Any], needle: str
) -> None:
    b = backend_for(api, clock, "volcano", **overrides)
    with pytest.raises(BackendError) as err:
        b.submit(job)
    assert err.value.permanent is True and needle in err.value.message


def test_forbidden_is_permanent(api: FakeApiServer, sim: Sim, clock: FakeClock) -> None:
    api.inject(Fault("status", code=403))
    with pytest.raises(BackendError) as err:
        backend_for(api, clock, "volcano").nodes()
    assert err.value.permanent is True and "Forbidden" in err.value.message


def test_the_registry_builds_the_backend_from_cluster_settings(
    api: FakeApiServer, sim: Sim
) -> None:
    from conftest import kubeconfig

    backend = create(
        ClusterConfig(
            1, "k8s", "kubernetes", {"kubeconfig": kubeconfig(api.url), "context": "fake"}
        )
    )
    assert [n.name for n in backend.nodes()] == ["h100-01", "h100-02", "h100-03", "h100-04"]
    for bad in (
        {},
        {"kubeconfig": "x", "workload": "mpi"},
        {"kubeconfig": "x", "surprise": 1},
        {"kubeconfig": kubeconfig(api.url), "context": "nope"},
    ):
        with pytest.raises(BackendError) as err:
            create(ClusterConfig(1, "k8s", "kubernetes", bad))
        assert err.value.permanent


def test_unknown_external_ids_are_lost_not_errors(backend: KubernetesBackend) -> None:
    statuses = backend.poll(["garbage", f"{NAMESPACE}/job/never-made"])
    assert {s.state for s in statuses.values()} == {R.LOST}
