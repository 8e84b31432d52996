"""`manage.py gpuq_task` given a malformed id, or one of no row, says so as a usage error
(exit status 2), not with the task's traceback."""

from __future__ import annotations

import re
import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

UNKNOWN = str(uuid.UUID(int=7))


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["dispatch_job", "not-a-job"], "dispatch_job takes a job id, not ['not-a-job']"),
        (["cancel_job", "42"], "cancel_job takes a job id, not ['42']"),
        (["dispatch_job", UNKNOWN], f"dispatch_job: there is no job {UNKNOWN}"),
        (["cancel_job", UNKNOWN], f"cancel_job: there is no job {UNKNOWN}"),
        (["sync_cluster", "999"], "sync_cluster: there is no cluster 999"),
        (["sync_cluster", str(2**70)], f"sync_cluster: there is no cluster {2**70}"),
        (["apply_mig_layout", "999", "all-1g.10gb"], "apply_mig_layout: there is no node 999"),
    ],
)
def test_gpuq_task_given_an_id_it_cannot_use_says_so_as_a_usage_error(
    argv: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=re.escape(message)) as raised:
        call_command("gpuq_task", *argv, stdout=StringIO())
    assert raised.value.returncode == 2
