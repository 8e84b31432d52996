"""A preview asks the scheduler as the cycle does, and reads as the cycle does: one view of
the database (snapshot.consistent_read). The nodes its job's CPUs and memory are fitted
against are the scheduler's nodes; read apart, an inventory change committed in between
gave it a state that never was: the job narrowed to a cluster the scheduler did not see,
"unsatisfiable", where before the change and after it the job starts at once."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction

from queue_service.clusters.models import Cluster, Node
from tests.conftest import spec
from tests.service.between_reads import after_the_first_read

pytestmark = pytest.mark.django_db(transaction=True)
GB = 1024


def test_a_preview_fits_its_job_to_the_nodes_the_scheduler_sees(
    client_for: Any, people: Any, local_cluster: Cluster, tmp_path: Any
) -> None:
    # n1 and n2 hold the job's 32G; then, as one change, their inventory says 16G and a new
    # cluster's node of 64G comes up. Either way the job starts at once: on n1 or n2 before,
    # on the new node after (fitted to its cluster, the only one that holds it).
    Node.objects.filter(cluster=local_cluster).update(memory_mb=64 * GB)
    alice = client_for("alice")
    job = spec(name="big-memory", gpus_per_node=4, memory="32G")

    def shrink_and_add() -> None:
        with transaction.atomic():
            Node.objects.filter(cluster=local_cluster).update(memory_mb=16 * GB)
            other = Cluster.objects.create(
                name="other", kind="local", settings={"workdir": str(tmp_path / "other-jobs")}
            )
            Node.objects.create(
                cluster=other, name="o1", gpu_model="SIM-A100", gpus=4, memory_mb=64 * GB
            )

    wrapper, fired = after_the_first_read(lambda sql: 'FROM "clusters_node"' in sql, shrink_and_add)
    with connection.execute_wrapper(wrapper):
        answer = alice.post("/api/v1/jobs/preview/", job, format="json")

    assert fired and Node.objects.filter(name="o1").exists()  # the change came between
    assert answer.status_code == 200, answer.content
    assert answer.json()["starts_now"] is True, answer.json()
    # After the change, read afresh: it starts at once too (on o1).
    again = alice.post("/api/v1/jobs/preview/", job, format="json")
    assert again.json()["starts_now"] is True, again.json()
