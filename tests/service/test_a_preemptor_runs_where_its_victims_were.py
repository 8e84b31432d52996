"""A job that preempts waits with the nodes it will run on (its reason's `on_nodes`), and
the next cycles' snapshots hand them back (PendingJob.preempting_on), so that once its
victims have left it runs there. The scheduler's side, where another preemptor took the
GPUs freed for a gang and a fourth job was preempted, is in
tests/scheduler/test_reclaims_over_several_cycles.py, and with the victims leaving in any
order in tests/scheduler/test_a_preemptor_waits_for_its_leaving_victims.py (once, a victim
leaving first let the 1-GPU job take the gang's GPU, and a fourth job was preempted); here
the service carries the nodes from one cycle to the next on real processes."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.jobs.snapshot import build_snapshot
from queue_service.tenancy.models import Quota
from tests.conftest import spec
from tests.service.test_job_flow import run_until

S = Job.State


def test_the_snapshot_hands_a_preemptor_back_the_nodes_it_preempted_on(
    teams: Any, local_cluster: Any, people: Any
) -> None:
    waiting = submit_job(people["alice"], spec(name="preemptor")).job
    refused = submit_job(people["alice"], spec(name="refused")).job
    other = submit_job(people["alice"], spec(name="other")).job
    on_nodes = {"victims": 1, "on_nodes": ["local/n2"]}
    Job.objects.filter(pk=waiting.pk).update(
        reason={
            "code": "preempting",
            "message": "1 job(s) are being preempted",
            "details": on_nodes,
        }
    )
    # A preemptor refused quota for a while keeps what it freed (scheduler.reasons.keeping).
    Job.objects.filter(pk=refused.pk).update(
        reason={
            "code": "quota_exhausted",
            "message": "team uses 2 of 2 GPUs",
            "details": {"used": 2, "on_nodes": ["local/n2"]},
        }
    )
    # Only those reasons' nodes count: another reason naming nodes is no claim.
    Job.objects.filter(pk=other.pk).update(
        reason={"code": "no_capacity", "message": "no room", "details": on_nodes}
    )

    snap, _, _ = build_snapshot(timezone.now())

    got = {p.request.id: p.preempting_on for p in snap.pending}
    assert got == {
        str(waiting.pk): ("local/n2",),
        str(refused.pk): ("local/n2",),
        str(other.pk): (),
    }


def test_the_snapshot_hands_a_slice_preemptor_back_its_node_while_its_gpu_is_re_laid_out(
    teams: Any, local_cluster: Any, people: Any
) -> None:
    # The GPU its victims emptied is re-laid out for it: it stays its own until it starts.
    waiting = submit_job(people["alice"], spec(name="slice")).job
    Job.objects.filter(pk=waiting.pk).update(
        reason={
            "code": "mig_relayout",
            "message": "GPU 0 on node local/n2 is being re-laid out",
            "details": {"node": "local/n2", "gpu": 0, "on_nodes": ["local/n2"]},
        }
    )

    snap, _, _ = build_snapshot(timezone.now())

    assert [p.preempting_on for p in snap.pending] == [("local/n2",)]


@pytest.mark.django_db(transaction=True)
def test_a_reclaim_for_two_jobs_preempts_three_and_each_runs_where_its_victims_were(
    teams: Any, local_cluster: Any, people: Any, settings: Any
) -> None:
    # 2 nodes x 4 GPUs, all 8 held by language on borrowed quota (nominal 0); vision
    # (nominal 3) asks for 1 GPU, then for 2 nodes x 1 GPU: three victims make room for both.
    settings.GPUQ_PREEMPTION_GRACE_S = 1
    Quota.objects.filter(team__slug="vision", gpu_model="SIM-A100").update(
        nominal_gpus=3, borrowing_limit_gpus=0
    )
    Quota.objects.filter(team__slug="language", gpu_model="SIM-A100").update(
        nominal_gpus=0, borrowing_limit_gpus=8
    )
    borrowers = [
        submit_job(people["charlie"], spec(name=f"lang-{i}", command=["sleep", "120"])).job
        for i in range(8)
    ]
    for job in borrowers:
        run_until(job, lambda j: j.state == S.RUNNING)
    one = submit_job(people["alice"], spec(name="one", command=["sleep", "120"])).job
    gang = submit_job(people["alice"], spec(name="gang", nodes=2, command=["sleep", "120"])).job

    gang = run_until(gang, lambda j: (j.reason or {}).get("code") == "preempting", timeout=40)
    planned = sorted(n.split("/", 1)[1] for n in gang.reason["details"]["on_nodes"])
    assert planned == ["n1", "n2"]
    one = run_until(one, lambda j: j.state == S.RUNNING, timeout=40)
    gang = run_until(gang, lambda j: j.state == S.RUNNING, timeout=40)

    assert sorted(a["node"] for a in gang.placement) == planned
    preempted = Job.objects.filter(team__slug="language", events__to_state=S.PREEMPTING)
    assert preempted.distinct().count() == 3
