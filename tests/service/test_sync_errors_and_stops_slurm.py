"""Errors on the way to a Slurm cluster, as a job's owner and team read them, and a stop
delivered twice: a login node that does not answer (a closed port on 127.0.0.1, no lab
needed), and the real Slurm lab (deploy/slurm-lab/lab up).

- A cluster that stays down leaves one `dispatch_retry` event counting its repeats. Before:
  the SSH connection's backoff said "...; next attempt in 0.4s", a message that differed
  every time, so no repeat was ever found.
- An error in how gpuq reaches the cluster (SSH's connection, login, host key; a timeout)
  reads in a job's reason and events as the summary the clusters API shows everyone: its own
  words name the cluster's host and gpuq's Unix account, which are for site staff. The
  cluster's answer about the job (sbatch's "Invalid account") is shown as it is. Before: the
  raw text, "svc-gpuq@127.0.0.1" included, in the reason, `details.cluster` and events.
- A stop delivered while another of the attempt was under way leaves the end to it, also
  when that one is answered while this one is on the wire. Before: it then recorded
  `ended_before_stop`, and a suspend ended `failed`.
- A host key pinned under another name than the login node's is a setting to fix ("not
  found in known_hosts"), not a changed key (paramiko's BadHostKeyException). Before: both
  were summarised as "the cluster's SSH host key does not match the one pinned"."""

from __future__ import annotations

import io
import json
import socket
import time
from typing import Any

import paramiko
import pytest
from django.conf import settings

from queue_service.backends import BackendError
from queue_service.clusters.models import Cluster, Node
from queue_service.jobs import dispatch
from queue_service.jobs.dispatch import RETRY, backend_for, run_once, stop_job, sync_cluster
from queue_service.jobs.models import Job, JobEvent
from queue_service.jobs.services import cancel_job, held_reason, submit_job, transition
from tests.backends.slurm.conftest import CLUSTER_JSON
from tests.conftest import lab_missing, spec
from tests.service.test_disabled_cluster_dispatch import retry_due
from tests.service.test_stop_delivered_twice import running_job, slurm  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)
S = Job.State
# What the clusters API keeps for site staff: the login node's address, gpuq's accounts there.
SECRET_WORDS = ("svc-gpuq", "slurmuser", "127.0.0.1", "Errno")


def closed_port() -> int:
    """A port nothing listens on: the login node's sshd is down."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


def slurm_down(name: str = "hpc") -> Cluster:
    """A Slurm cluster gpuq knew (two nodes of its last inventory) whose login node no longer
    answers: every connection is refused."""
    key = paramiko.Ed25519Key.from_private_key(io.StringIO(_ed25519_pem()))
    port = closed_port()
    cluster = Cluster.objects.create(
        name=name,
        kind="slurm",
        settings={
            "host": "127.0.0.1",
            "port": port,
            "user": "svc-gpuq",
            "private_key": _ed25519_pem(),
            "known_hosts": f"[127.0.0.1]:{port} ssh-ed25519 {key.get_base64()}",
            "connect_timeout_s": 0.5,
            "containers": "none",
        },
    )
    for n in ("gpu-1", "gpu-2"):
        Node.objects.create(cluster=cluster, name=n, gpu_model="SIM-A100", gpus=4)
    return cluster


_PEM: list[str] = []


def _ed25519_pem() -> str:
    if not _PEM:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        _PEM.append(
            Ed25519PrivateKey.generate()
            .private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.OpenSSH,
                serialization.NoEncryption(),
            )
            .decode()
        )
    return _PEM[0]


def test_a_slurm_cluster_that_stays_down_leaves_one_retry_event(people: Any) -> None:
    """Five failed submits to a Slurm cluster whose sshd is down: one `dispatch_retry`
    counting 5, in the words of the clusters' summary."""
    cluster = slurm_down()
    job = submit_job(people["alice"], spec(name="patient", cluster=cluster.name)).job
    run_once()
    job.refresh_from_db()
    assert (job.state, job.reason["code"]) == (S.DISPATCHING, RETRY), job.reason
    for _ in range(4):
        time.sleep(0.15)  # the retries are not all in the same tenth of a second
        retry_due(job)
        run_once()

    retried = list(job.events.filter(code=RETRY).order_by("at", "id"))
    assert [(e.message, e.details.get("repeats", 1)) for e in retried] == [
        ("will retry: cannot reach the cluster (connection refused)", 5)
    ]


def test_a_job_cancelled_while_its_cluster_does_not_answer_names_no_host_or_account(
    people: Any, client_for: Any
) -> None:
    """alice's job, cancelled while its submit is in doubt: alice and bob (her teammate, not
    staff) read its reason and events as they read the cluster, without its host or account;
    charlie (another team) does not see the job at all."""
    cluster = slurm_down()
    job = submit_job(people["alice"], spec(name="in-doubt", cluster=cluster.name)).job
    run_once()
    cancel_job(people["alice"], Job.objects.get(pk=job.pk))

    for who in ("alice", "bob"):
        reader = client_for(who)
        shown_cluster = reader.get(f"/api/v1/clusters/{cluster.name}/").json()
        shown_job = reader.get(f"/api/v1/jobs/{job.pk}/").json()
        shown_events = reader.get(f"/api/v1/jobs/{job.pk}/events/").json()
        page = reader.get(f"/jobs/{job.pk}/").content.decode()

        assert shown_job["state"] == S.CANCELLING
        assert shown_job["reason"]["message"] == (
            "cancelled by alice; hpc did not answer whether it has the job (cannot reach the"
            " cluster (connection refused)): it is asked again, with backoff, and the job"
            " stopped there once found"
        )
        assert shown_job["reason"]["details"]["cluster"] == (
            "cannot reach the cluster (connection refused)"
        )
        said = json.dumps([shown_cluster, shown_job, shown_events]) + page
        assert [w for w in SECRET_WORDS if w in said] == [], who
    charlie = client_for("charlie")
    assert charlie.get(f"/api/v1/jobs/{job.pk}/").status_code == 404
    assert charlie.get(f"/api/v1/jobs/{job.pk}/events/").status_code == 404


def lab_job(people: Any, name: str) -> Job:
    return submit_job(
        people["alice"],
        {
            "name": name,
            "command": ["true"],
            "gpus_per_node": 1,
            "cluster": "lab",
            "gpu_model": "A100-SXM4-80GB",
        },
    ).job


def test_a_login_the_cluster_refuses_reads_as_the_summary_in_the_jobs_reason_and_events(
    slurm: Cluster,  # noqa: F811
    people: Any,
    client_for: Any,
) -> None:
    """gpuq's key is no longer authorised on the login node: the job's reason and events say
    "the cluster refused gpuq's credentials", not "SSH authentication as slurmuser on
    127.0.0.1:2222 failed". (The sync's failed login just before leaves the connection in
    its backoff, whose calls fail with that same permanent error: the job fails at once, as
    it would outside the backoff, rather than being retried for ever.)"""
    lab = {k: v for k, v in slurm.settings.items() if k != "private_key_file"}
    Cluster.objects.filter(pk=slurm.pk).update(settings={**lab, "private_key": _ed25519_pem()})
    job = lab_job(people, "refused-login")

    run_once()

    shown_job = client_for("alice").get(f"/api/v1/jobs/{job.pk}/").json()
    shown_events = client_for("alice").get(f"/api/v1/jobs/{job.pk}/events/").json()
    assert (shown_job["state"], shown_job["reason"]["message"]) == (
        S.FAILED,
        "the cluster refused gpuq's credentials",
    )
    said = json.dumps([shown_job, shown_events])
    assert [w for w in SECRET_WORDS if w in said] == []


def test_the_clusters_answer_about_a_job_is_shown_as_it_is(
    slurm: Cluster,  # noqa: F811
    people: Any,
) -> None:
    """sbatch refuses the job (an account Slurm does not know): its owner reads sbatch's own
    words, which tell what to change."""
    Cluster.objects.filter(pk=slurm.pk).update(settings={**slurm.settings, "account": "nope"})
    job = lab_job(people, "bad-account")

    run_once()

    job.refresh_from_db()
    assert job.state == S.FAILED
    assert "Invalid account" in job.reason["message"], job.reason


@pytest.mark.slow
def test_a_stop_delivered_twice_whose_other_delivery_answers_meanwhile_keeps_the_stops_end(
    slurm: Cluster,  # noqa: F811
    people: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Delivery A's TERM ends the job (a suspend); delivery B, noted while A was under way,
    finds it ended after A's answer landed while B's scancel was on the wire: the end is the
    stop's, the job `suspended`, no `ended_before_stop`. (Slurm's cancel looks once a
    second: any second delivery in that second runs this race.)"""
    job = running_job(people)
    transition(
        job,
        S.SUSPENDING,
        code="suspend_requested",
        message="suspend requested by alice",
        reason=held_reason(people["alice"]),
    )
    grace = settings.GPUQ_PREEMPTION_GRACE_S
    backend = backend_for(Cluster.objects.get(pk=slurm.pk))  # the one stop_job uses
    # Delivery A: its stop_sent, then its TERM, which ends `sleep` at once; Slurm's cancel
    # returns once it sees the end. A has not yet recorded that the cluster answered.
    _, sent_a = dispatch._note_stop(Job.objects.get(pk=job.pk), grace)
    assert backend.cancel(job.external_id, grace_s=grace) is True
    real_cancel = backend.cancel

    def b_cancel(external_id: str, grace_s: float = 30.0) -> bool:
        # A's next statement lands while B's scancel is on the wire.
        JobEvent.objects.filter(pk=sent_a.pk).update(details={**sent_a.details, "delivered": True})
        return real_cancel(external_id, grace_s=grace_s)

    monkeypatch.setattr(backend, "cancel", b_cancel)
    stop_job(str(job.pk))  # delivery B
    monkeypatch.undo()
    for _ in range(3):
        run_once()

    job.refresh_from_db()
    said = list(job.events.order_by("at", "id").values_list("code", "message"))
    assert job.state == S.SUSPENDED, "\n".join(map(str, [job.state, job.reason, *said]))
    assert "ended_before_stop" not in [c for c, _ in said]


@pytest.mark.parametrize(
    ("pinned_as", "raised", "summary"),
    [
        # port 22's form for a login node on port 2222: paramiko finds no key for
        # "[127.0.0.1]:2222" ("Server '[127.0.0.1]:2222' not found in known_hosts")
        ("127.0.0.1", "no pinned host key", "gpuq's settings for the cluster are not usable"),
        # another key under the right name: BadHostKeyException ("... does not match")
        ("other key", "host key of 127.0.0.1:2222 changed", "the cluster's SSH host key does not"),
    ],
    ids=["wrong-name", "other-key"],
)
def test_a_host_key_pinned_under_the_wrong_name_is_not_called_a_changed_key(
    client_for: Any, teams: Any, pinned_as: str, raised: str, summary: str
) -> None:
    if not CLUSTER_JSON.exists():
        lab_missing("the Slurm lab (deploy/slurm-lab/lab up)")
    lab = json.loads(CLUSTER_JSON.read_text())
    if pinned_as == "other key":
        other = paramiko.Ed25519Key.from_private_key(io.StringIO(_ed25519_pem()))
        pinned = f"[127.0.0.1]:2222 ssh-ed25519 {other.get_base64()}"
    else:
        pinned = lab["known_hosts"].replace("[127.0.0.1]:2222", pinned_as)
    Cluster.objects.create(name="lab", kind="slurm", settings={**lab, "known_hosts": pinned})
    with pytest.raises(BackendError, match=raised):
        sync_cluster(Cluster.objects.get(name="lab").pk)

    shown = client_for("alice").get("/api/v1/clusters/lab/").json()["last_sync_error"]

    assert shown.startswith(summary), shown
