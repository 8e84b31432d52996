"""A submit retried after its first answer was lost adopts the workload that first submit
made, never starting a second one for the same job attempt, even when the cluster's
settings changed in between: gpuq rebuilds the backend on a settings change
(backends/__init__.get_backend), and the old backend's call in flight then fails as a
transient error retried on the new backend, which would build another kind (`workload`) or
put it in another namespace (`namespace`)."""

from __future__ import annotations

import pytest
from conftest import NAMESPACE, FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer, Fault
from k8s_sim import BATCH, VOLCANO, Sim

from queue_service.backends.base import BackendError
from queue_service.backends.base import RemoteState as R

SERVICES = ("", "v1", "services")


def _workloads(api: FakeApiServer) -> list[str]:
    """Every workload (Volcano Job or batch/v1 Job) the cluster holds, as external ids."""
    out = []
    for key, kind in ((VOLCANO, "vcjob"), (BATCH, "job")):
        if key in api.store.types:  # a cluster without Volcano serves no Volcano Jobs
            with api.store.lock:
                objects = api.store.objects[api.store.types[key]]
                out += [f"{ns}/{kind}/{name}" for ns, name in objects]
    return sorted(out)


def _lost_submit(api: FakeApiServer, clock: FakeClock, nodes: int = 2, **settings: str) -> None:
    """A submit whose workload is created and whose answer is lost: the job stays
    `dispatching` and the service retries the same attempt (`resubmit`: dispatch_job marks
    every submit but an attempt's first so)."""
    api.inject(Fault("drop_after", method="POST", path_contains="/jobs"))
    with pytest.raises(BackendError) as lost:
        make_backend(api, clock, max_retries=0, **settings).submit(request(nodes=nodes))
    assert lost.value.permanent is False
    assert len(_workloads(api)) == 1  # it exists and will run


def test_a_retried_submit_after_the_workload_setting_changed_starts_no_second_workload(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    _lost_submit(api, clock, workload="volcano")
    (first,) = _workloads(api)
    # An admin switches the cluster to Indexed Jobs; the retry runs on the rebuilt backend.
    retried = make_backend(api, clock, workload="indexed").submit(request(nodes=2, resubmit=True))
    # Two gangs of the same attempt would hold 2 x 2 nodes x 8 GPUs gpuq counts once.
    assert _workloads(api) == [first]
    assert (retried.external_id, retried.adopted) == (first, True)


def test_an_adopted_indexed_job_gets_the_service_its_lost_submit_did_not_make(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """The first submit's Job was made, its headless Service never was (the answer to the
    Job's create was lost). The retry, built for Volcano now, makes the Service beside the
    Job it adopts, owned by it: torchrun's rendezvous needs its DNS name."""
    _lost_submit(api, clock, workload="indexed")
    (first,) = _workloads(api)
    retried = make_backend(api, clock, workload="volcano").submit(request(nodes=2, resubmit=True))
    assert (retried.external_id, _workloads(api)) == (first, [first])
    with api.store.lock:
        (job,) = api.store.objects[api.store.types[BATCH]].values()
        (svc,) = api.store.objects[api.store.types[SERVICES]].values()
    assert svc["metadata"]["name"] == job["metadata"]["name"]
    assert [o["uid"] for o in svc["metadata"]["ownerReferences"]] == [job["metadata"]["uid"]]


def test_a_retried_submit_after_the_namespace_setting_changed_adopts_the_first_namespaces(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    sim.namespace("batch-team-a")  # the new namespace exists: a create there would succeed
    _lost_submit(api, clock)
    (first,) = _workloads(api)
    b = make_backend(api, clock, namespace="batch-{team}")
    retried = b.submit(request(nodes=2, resubmit=True))
    assert (retried.external_id, _workloads(api)) == (first, [first])
    assert first.startswith(f"{NAMESPACE}/")
    sim.run(first)
    assert b.poll([first])[first].state == R.RUNNING  # followed where it is


def test_an_attempts_first_submit_lists_nothing_in_all_namespaces(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """Only a retry can find an earlier workload elsewhere: a first submit spares the cluster
    the two cluster-wide lists (on clusters before 1.31, reads of every Job from etcd)."""
    made = make_backend(api, clock, workload="volcano").submit(request(nodes=2))
    assert made.adopted is False
    assert [r.path for r in api.calls("GET") if "labelSelector" in r.query] == []
    make_backend(api, clock, workload="volcano").submit(request(nodes=2, resubmit=True))
    assert len([r for r in api.calls("GET") if "labelSelector" in r.query]) == 2


def test_the_next_attempt_of_a_requeued_job_is_a_workload_of_its_own(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b = make_backend(api, clock, workload="volcano")
    first = b.submit(request(nodes=2)).external_id
    # Even a retry of the next attempt's submit looks only for that attempt's workload.
    again = make_backend(api, clock, workload="indexed").submit(
        request(nodes=2, attempt=2, resubmit=True)
    )
    assert again.adopted is False and again.external_id != first
    assert _workloads(api) == sorted([first, again.external_id])


@pytest.mark.parametrize("workload", ["volcano", "indexed"])
def test_a_retry_adopts_the_first_workload_being_deleted_and_a_poll_ends_it(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    """Deleted on the cluster while the submit was in doubt (an admin; its TTL once it
    ended): gpuq's finalizer holds it until a poll reports its end, and only a job named is
    polled, so a retry that waited for the deletion would wait for ever, the job holding its
    GPUs. Adopted, it is followed: RUNNING while its pods stop, then its end, and released."""
    _lost_submit(api, clock, workload=workload)
    (first,) = _workloads(api)
    sim.run(first)
    sim.store.pods_stop_at_once = False  # its pods' kubelets have not confirmed yet
    t, obj = sim.workload(first)
    with sim.store.lock:
        sim.store.delete(t, NAMESPACE, obj["metadata"]["name"], "Foreground", None)
    other = "indexed" if workload == "volcano" else "volcano"
    # Found by its name's 409 (a submit not marked a retry), or by the retry's look.
    for kind, resubmit in ((workload, False), (other, True)):
        retried = make_backend(api, clock, workload=kind).submit(
            request(nodes=2, resubmit=resubmit)
        )
        assert (retried.external_id, retried.adopted, _workloads(api)) == (first, True, [first])
    b = make_backend(api, clock, workload=workload)
    assert b.poll([first])[first].state == R.RUNNING  # its pods still stop
    sim.kubelet_confirms_stops()
    assert b.poll([first])[first].state == R.CANCELLED
    assert _workloads(api) == []  # the end reported, gpuq's finalizer let it go


def test_without_the_right_to_list_in_all_namespaces_the_look_is_in_the_jobs_namespace(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """An account allowed to list Jobs only in the teams' namespaces (403 in all): a retry
    after the `workload` setting changed still finds the first workload (one after the
    namespace setting changed could not: docs/kubernetes.md)."""
    _lost_submit(api, clock, workload="volcano")
    (first,) = _workloads(api)
    for path in ("/apis/batch.volcano.sh/v1alpha1/jobs", "/apis/batch/v1/jobs"):
        api.inject(Fault("status", code=403, method="GET", path_contains=path))
    retried = make_backend(api, clock, workload="indexed").submit(request(nodes=2, resubmit=True))
    assert (retried.external_id, _workloads(api)) == (first, [first])
    assert all(f.times == 0 for f in api.faults)  # both lists in all namespaces were refused


def test_a_cluster_without_volcano_takes_indexed_jobs_and_their_retries(
    clock: FakeClock,
) -> None:
    """Listing Volcano Jobs there is a 404 (no such resource): none of that kind exist."""
    with FakeApiServer(crd_dir=None) as api:
        api.store.clock = clock
        sim = Sim(api)
        sim.namespace(NAMESPACE)
        for i in (1, 2):
            sim.node(f"h100-{i:02d}")
        _lost_submit(api, clock, workload="indexed")
        (first,) = _workloads(api)
        retried = make_backend(api, clock, workload="indexed").submit(
            request(nodes=2, resubmit=True)
        )
        assert (retried.external_id, retried.adopted, _workloads(api)) == (first, True, [first])
