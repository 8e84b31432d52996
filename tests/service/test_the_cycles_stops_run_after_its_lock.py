"""On PostgreSQL the cycle holds an advisory lock from its read to its commit, so that no
other cycle and no job update comes in between. The stops it sends after its commit
(embedded, with no broker: inline, in the cycle's process) run without it: a slow stop
(Slurm's TERM, a wait, then scancel over SSH) must not keep job updates and the next cycle
waiting on the lock."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from queue_service import backends
from queue_service.backends.local import LocalBackend
from queue_service.clusters.models import Cluster
from queue_service.jobs.models import SchedulerLock
from queue_service.tenancy.models import Quota
from tests.conftest import lab_missing
from tests.service.test_preemption_flow import _reclaim

pytestmark = pytest.mark.django_db(transaction=True)


def _cycle_lock_free() -> bool:
    """Whether another session could take the cycle's advisory lock now."""
    db = connection.settings_dict
    with psycopg.connect(
        dbname=db["NAME"], host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"]
    ) as other:
        (got,) = other.execute(
            "SELECT pg_try_advisory_lock(%s)", [SchedulerLock.ADVISORY_KEY]
        ).fetchone() or (False,)
        if got:
            other.execute("SELECT pg_advisory_unlock(%s)", [SchedulerLock.ADVISORY_KEY])
        return bool(got)


class ProbedBackend(LocalBackend):
    """The local backend, noting at each stop whether the cycle's lock is free."""

    kind = "local"
    free_at_stop: list[bool] = []

    def cancel(self, external_id: str, grace_s: float = 30.0) -> bool:
        ProbedBackend.free_at_stop.append(_cycle_lock_free())
        return super().cancel(external_id, grace_s)


def create(cluster: Any) -> ProbedBackend:
    return ProbedBackend(cluster)


@pytest.fixture
def probed_cluster(
    teams: Any, local_cluster: Cluster, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cluster]:
    if connection.vendor != "postgresql":
        lab_missing("PostgreSQL (the advisory lock is PostgreSQL's)")
    monkeypatch.setitem(backends._MODULES, "local", __name__)
    backends._cache.clear()
    ProbedBackend.free_at_stop = []
    settings.GPUQ_PREEMPTION_GRACE_S = 1
    Quota.objects.filter(gpu_model="SIM-A100").update(nominal_gpus=4, borrowing_limit_gpus=4)
    yield local_cluster
    backends._cache.clear()


def test_the_stops_a_cycle_sends_run_after_it_lets_go_of_its_lock(
    probed_cluster: Cluster, people: Any
) -> None:
    _reclaim(people)  # language runs 8 1-GPU jobs; vision reclaims two of them

    assert ProbedBackend.free_at_stop, "the reclaim sent no stop"
    assert all(ProbedBackend.free_at_stop), ProbedBackend.free_at_stop
