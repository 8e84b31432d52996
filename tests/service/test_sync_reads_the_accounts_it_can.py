"""A poll that could read only some of a cluster's jobs (a PartialPoll: one Slurm account of
the `accounts` setting cannot log in) still follows those it read. The others stay as they
are (unknown, not lost), the cluster's sync error says why, and the cluster's last sync time
stays that of the last sync that read every job: a job first seen ended is charged from it,
and a sync that never saw the unread jobs waiting must not shorten their charge."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from queue_service.backends.base import JobStatus, PartialPoll, RemoteState
from queue_service.clusters.models import Cluster
from queue_service.jobs import dispatch
from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from tests.conftest import spec

S = Job.State
BEFORE = datetime(2024, 3, 12, 7, 31, 5, tzinfo=UTC)
ERROR = "jobs of the account gpuq-nlp not read: SSH authentication as gpuq-nlp failed"


class OneAccountUnread:
    """The cluster's backend, whose poll reads every job but those of `unread`."""

    def __init__(self, real: Any, unread: str) -> None:
        self.real = real
        self.unread = unread

    def nodes(self) -> Any:
        return self.real.nodes()

    def poll(self, external_ids: list[str]) -> dict[str, JobStatus]:
        read = {
            i: JobStatus(i, RemoteState.SUCCEEDED, exit_code=0)
            for i in external_ids
            if i != self.unread
        }
        raise PartialPoll(ERROR, read, permanent=True)


@pytest.mark.django_db
def test_a_sync_follows_the_jobs_it_could_read_and_says_why_the_others_were_not(
    people: Any, local_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = []
    for external_id in ("41", "42"):
        job = submit_job(people["alice"], spec()).job
        Job.objects.filter(pk=job.pk).update(
            state=S.RUNNING, cluster=local_cluster, external_id=external_id
        )
        jobs.append(job)
    Cluster.objects.filter(pk=local_cluster.pk).update(last_sync_at=BEFORE)
    real = dispatch.backend_for(local_cluster)
    monkeypatch.setattr(dispatch, "backend_for", lambda cluster: OneAccountUnread(real, "42"))

    dispatch.sync_cluster(local_cluster.pk)

    read, unread = (Job.objects.get(pk=job.pk) for job in jobs)
    assert read.state == S.SUCCEEDED
    assert unread.state == S.RUNNING
    local_cluster.refresh_from_db()
    assert local_cluster.last_sync_error == ERROR
    assert local_cluster.last_sync_at == BEFORE
