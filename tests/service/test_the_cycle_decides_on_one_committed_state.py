"""The cycle reads nodes, quotas, usage and jobs in many queries. On PostgreSQL's READ
COMMITTED each query sees what was committed when it ran, so a change committed between two
of them would give the scheduler a state that never was: a node as it was before a change
and a quota as it is after the same change. The cycle's reads are one view: changes
committed together are seen together or not at all, and the cycle still applies what it
decided (a change that came meanwhile is the next cycle's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction

from queue_service.clusters.models import Cluster, Node
from queue_service.jobs import snapshot
from queue_service.jobs.models import Job
from queue_service.jobs.services import cancel_job, submit_job
from queue_service.tenancy.models import Quota
from scheduler import types as st
from tests.conftest import spec
from tests.service.between_reads import after_the_first_read

pytestmark = pytest.mark.django_db(transaction=True)


def after_the_first_read_of(table: str, change: Callable[[], None]) -> tuple[Any, list[bool]]:
    """Runs `change`, committed, right after the cycle's first SELECT from `table`."""
    return after_the_first_read(lambda sql: f'FROM "{table}"' in sql, change)


def seen(snap: st.Snapshot) -> tuple[str, float]:
    """Node n2's state and team vision's nominal quota of SIM-A100, as the cycle saw them."""
    (n2,) = [n for n in snap.nodes if n.name.endswith("/n2")]
    (vision,) = [t for t in snap.teams if t.name == "vision"]
    (quota,) = [q for q in vision.quotas if q.gpu_model == "SIM-A100"]
    return n2.state, quota.nominal


def test_a_node_and_a_quota_changed_together_between_the_cycles_reads_are_seen_together(
    people: Any, local_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = submit_job(people["alice"], spec(name="waits", gpus_per_node=2)).job
    snaps: list[st.Snapshot] = []
    real_decide = snapshot.decide

    def deciding(snap: st.Snapshot, now: Any) -> st.Decisions:
        snaps.append(snap)
        return real_decide(snap, now)

    def retire_n2() -> None:
        # n2 is drained for good, and its 4 GPUs leave vision's quota, as one change.
        with transaction.atomic():
            Node.objects.filter(cluster=local_cluster, name="n2").update(state=Node.State.DRAIN)
            Quota.objects.filter(team__slug="vision", gpu_model="SIM-A100").update(nominal_gpus=4)

    monkeypatch.setattr(snapshot, "decide", deciding)
    wrapper, fired = after_the_first_read_of("clusters_node", retire_n2)
    with connection.execute_wrapper(wrapper):
        snapshot.run_cycle()

    assert fired and Quota.objects.get(team__slug="vision", gpu_model="SIM-A100").nominal_gpus == 4
    (snap,) = snaps
    assert seen(snap) in [("up", 8.0), ("drain", 4.0)], seen(snap)
    # What it decided was applied (its view was from before the change: n1 or n2 took it).
    job.refresh_from_db()
    assert job.state == Job.State.ADMITTED, job.reason


def test_a_cycle_whose_job_changed_after_its_read_applies_the_rest(
    people: Any, local_cluster: Cluster
) -> None:
    """Its view may be older than what it writes: a job cancelled after the read is not
    admitted, and the cycle does not fail for it (no serialization error)."""
    cancelled = submit_job(people["alice"], spec(name="cancelled", gpus_per_node=4)).job
    kept = submit_job(people["alice"], spec(name="kept", gpus_per_node=4)).job

    def cancel() -> None:
        cancel_job(people["alice"], Job.objects.get(pk=cancelled.pk))

    wrapper, fired = after_the_first_read_of("clusters_node", cancel)
    with connection.execute_wrapper(wrapper):
        snapshot.run_cycle()

    assert fired
    assert Job.objects.get(pk=cancelled.pk).state == Job.State.CANCELLED
    assert Job.objects.get(pk=kept.pk).state == Job.State.ADMITTED
