"""A preview asks the scheduler about the job as if it were submitted, but the cycle's actions
for it are not taken: a reason that describes one (a relayout for it, a preemption) would
say the job waits for something that is not happening. The preview says what a submit
would do first (`starts_soon`), in the API, the CLI's dry run and the submit page's panel."""

from __future__ import annotations

from typing import Any

import pytest

from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import sync_cluster
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Quota
from tests.conftest import spec
from tests.service.test_job_flow import run_until

MODEL = "A100-SXM4-80GB"
RELAYOUT = "would start once GPU 0 of node mig/m1 is re-laid out for it (a few seconds)"


@pytest.fixture
def idle_mig_gpu(teams: Any, tmp_path: Any) -> Cluster:
    """A local node of one MIG GPU with no instances yet: a slice job's cycle lays it out."""
    cluster = Cluster.objects.create(
        name="mig",
        kind="local",
        settings={
            "workdir": str(tmp_path / "jobs"),
            "nodes": [{"name": "m1", "gpus": 1, "gpu_model": MODEL, "mig": True}],
        },
    )
    sync_cluster(cluster.pk)
    for team in teams.values():
        Quota.objects.create(team=team, gpu_model=MODEL, nominal_gpus=1, borrowing_limit_gpus=0)
    return cluster


def agent() -> dict[str, Any]:
    body = spec(name="serve", kind="agent", mig_profile="1g.10gb")
    del body["gpus_per_node"]
    return body


def test_a_preview_says_a_slice_job_would_start_once_its_gpu_is_re_laid_out_for_it(
    client_for: Any, idle_mig_gpu: Cluster
) -> None:
    answer = client_for("alice").post("/api/v1/jobs/preview/", agent(), format="json")

    assert answer.status_code == 200, answer.content
    got = answer.json()
    assert (got["starts_now"], got["starts_soon"]) == (False, True), got
    assert got["reason"]["code"] == "mig_relayout"
    assert got["reason"]["message"] == RELAYOUT
    assert not Job.objects.exists()


def test_the_submit_panel_says_a_slice_job_would_start_once_its_gpu_is_re_laid_out(
    client: Any, people: Any, idle_mig_gpu: Cluster
) -> None:
    client.force_login(people["alice"])
    form = {"name": "serve", "command": "serve", "kind": "agent", "mig_profile": "1g.10gb"}

    page = client.post("/submit/preview/", form).content.decode()

    assert 'data-verdict="soon"' in page, page
    assert f"It {RELAYOUT}." in page
    assert "It would wait" not in page


@pytest.mark.django_db(transaction=True)
def test_a_preview_of_a_job_that_would_reclaim_quota_says_it_would_preempt_then_start(
    client_for: Any, people: Any, local_cluster: Any, settings: Any
) -> None:
    # 2 nodes x 4 GPUs, language runs on both, one on borrowed quota; vision's 4-GPU job
    # would reclaim it. Nothing is preempted by the preview.
    settings.GPUQ_PREEMPTION_GRACE_S = 30
    Quota.objects.filter(gpu_model="SIM-A100").update(nominal_gpus=4, borrowing_limit_gpus=4)
    for i in range(2):
        borrower = submit_job(
            people["charlie"], spec(name=f"lang-{i}", gpus_per_node=4, command=["sleep", "60"])
        ).job
        run_until(borrower, lambda j: j.state == Job.State.RUNNING)

    answer = client_for("alice").post(
        "/api/v1/jobs/preview/", spec(name="mine", gpus_per_node=4), format="json"
    )

    got = answer.json()
    assert (got["starts_now"], got["starts_soon"]) == (False, True), got
    assert got["reason"]["code"] == "preempting"
    assert got["reason"]["message"] == (
        "would preempt 1 job(s) to free 4 GPU(s), then start within their grace of 30 s"
    )
    assert Job.objects.filter(state=Job.State.RUNNING).count() == 2
    assert not Job.objects.filter(team__slug="vision").exists()


def test_a_preview_of_a_job_waiting_for_capacity_is_not_told_it_starts_soon(
    client_for: Any, local_cluster: Any
) -> None:
    answer = client_for("alice").post(
        "/api/v1/jobs/preview/", spec(nodes=3, gpus_per_node=4), format="json"
    )

    got = answer.json()
    assert (got["starts_now"], got["starts_soon"]) == (False, False), got
    assert got["reason"]["message"].startswith("needs 3 nodes x 4")
