"""A log read on Kubernetes lists the job's pods, then asks for rank 0's log; a pod deleted in
between (Volcano killing the gang to restart it, a stop) is no error of the cluster's: the API
answers what a read after the deletion gets (nothing yet, or `gone` once the workload went),
and the job page keeps following. Against the fake API server, whose `race` fault deletes the
pod just before the log GET is served; Alice owns the job."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from k8s_fakeapi import Fault
from k8s_sim import Sim

from tests.ui.test_ui_edges import client_of, log_text, poll

pytestmark = pytest.mark.django_db(transaction=True)


def gang_killed(sim: Sim, eid: str) -> None:
    sim._remove_pods(eid)  # Volcano's RestartJob; the new pods not made yet


def workload_deleted(sim: Sim, eid: str) -> None:
    t, obj = sim.workload(eid)
    meta = obj["metadata"]
    with sim.store.lock:
        held = copy.deepcopy(sim.store.get(t, meta["namespace"], meta["name"]))
        held["metadata"]["finalizers"] = []
        sim.store.replace(t, held, spec_changed=False)
        sim.store.delete(t, meta["namespace"], meta["name"], "Background", None)


@pytest.mark.parametrize(
    ("delete", "gone"), [(gang_killed, False), (workload_deleted, True)], ids=["gang", "workload"]
)
def test_a_log_read_whose_pod_goes_before_its_log_is_read_answers_as_after_the_deletion(
    running_on_k8s: Any, people: dict[str, Any], client_for: Any, delete: Any, gone: bool
) -> None:
    with running_on_k8s() as (job, sim):
        (pod,) = sim.pods(job.external_id)
        sim.log(pod, b"epoch 1\n")
        alice = client_of(people["alice"])
        first, url = poll(alice, f"/jobs/{job.pk}/log/?stream=stdout&offset=0")
        assert log_text([first]) == "epoch 1\n"

        race = Fault("race", method="GET", path_contains="/log")
        race.action = lambda: delete(sim, job.external_id)
        sim.api.inject(race)
        answer = client_for("alice").get(f"/api/v1/jobs/{job.pk}/logs/", {"offset": 8})

        assert answer.status_code == 200, answer.content
        body = answer.json()
        assert (body["text"], body["next_offset"], body["gone"]) == ("", 8, gone)
        assert (body["attempt_eof"], body["eof"]) == (gone, False)  # the job is still running

        sim.api.inject(Fault("race", method="GET", path_contains="/log", action=race.action))
        piece, _ = poll(alice, url)
        assert "did not return the log" not in piece
        assert log_text([first, piece]) == "epoch 1\n"
