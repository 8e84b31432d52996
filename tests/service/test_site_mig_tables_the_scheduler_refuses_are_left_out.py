"""A cluster's `mig_profiles` table that the scheduler's own checks refuse (well typed but
impossible: a placement past the GPU's end, more compute slices than the GPU has, a name
that is no profile) is logged and left out by the snapshot (snapshot._mig_tables), as a
malformed one is: one cluster's slip must not stop every cycle, and the built-in table then
applies. The cluster's other tables still apply."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import build_snapshot, run_cycle
from tests.conftest import spec

S = Job.State

GOOD = {
    "compute_slices": 4,
    "memory_slices": 4,
    "profiles": [["1g.12gb", 1, 1, 4, [0, 1, 2, 3], 1]],
}

# (case, the refused table's one profile row on a 4-slice GPU)
REFUSED = [
    ("a placement past the GPU's end", ["2g.24gb", 2, 2, 2, [0, 3], 2]),
    ("a negative placement", ["1g.12gb", 1, 1, 4, [-1], 1]),
    ("no placement", ["1g.12gb", 1, 1, 4, [], 1]),
    ("more compute slices than the GPU has", ["5g.48gb", 5, 4, 1, [0], 4]),
    ("a name that is no profile", ["big", 1, 1, 4, [0], 1]),
]


@pytest.mark.django_db
@pytest.mark.parametrize("row", [c[1] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_a_table_the_scheduler_refuses_is_left_out_and_the_cycle_runs(
    people: Any, local_cluster: Any, row: list[Any]
) -> None:
    local_cluster.settings["mig_profiles"] = {
        "X-GPU-48GB": {"compute_slices": 4, "memory_slices": 4, "profiles": [row]},
        "Y-GPU-48GB": GOOD,
    }
    local_cluster.save()
    job = submit_job(people["alice"], spec(name="any")).job

    run_cycle()

    job.refresh_from_db()
    assert job.state == S.ADMITTED, job.reason
    snap, _, _ = build_snapshot(timezone.now())
    assert [t.model for t in snap.mig_tables] == ["Y-GPU-48GB"]
