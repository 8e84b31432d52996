"""`gpuq queue`, `gpuq show` and `gpuq ls` print every text the server hands them (names a
site admin, a cluster or a user chose: priority class, team, user, GPU model, MIG profile,
array indices, cluster, node, reason, event) with control characters escaped, as they print
job names: a priority class named with C1's CSI (8-bit terminals read it as ESC [) or a
right-to-left override cannot clear the screen or reverse what follows. Before, the priority
class, team, user, GPU model, MIG profile and array indices went to the terminal raw."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

from typing import Any

import pytest

from queue_service.cli import clean
from queue_service.clusters.models import Cluster
from queue_service.jobs.models import Job, JobArray, JobEvent, PriorityClass
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Team
from tests.conftest import spec
from tests.service.test_cli import Gpuq, gpuq  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)

RAW = {"\x9b", "\u202e", "\t", "\x1b", "\x07"}


def hostile(what: str) -> str:
    """A text that would clear the screen and reverse what follows, marked by what it is."""
    return f"{what}\x9b2J\u202e"


# (what, the commands that print it)
PRINTED = [
    ("prio", ("queue", "show")),
    ("team", ("queue", "show", "ls")),
    ("mig", ("queue", "show", "ls")),
    ("reason", ("queue", "show", "ls")),
    ("user", ("show", "ls")),
    ("model", ("show",)),
    ("indices", ("show",)),
    ("cluster", ("show",)),
    ("node", ("show",)),
    ("slice", ("show",)),
    ("event", ("show",)),
]


@pytest.fixture
def outputs(gpuq: Gpuq, people: dict[str, Any]) -> dict[str, str]:
    """`gpuq queue` and `gpuq show` of a waiting array task whose every text is hostile, as
    stored by hand (the admin site and the backends' reports are the ways in)."""
    job = submit_job(people["alice"], spec(name="sweep", array="0-1")).job
    JobArray.objects.filter(pk=job.array_id).update(indices=hostile("indices"))
    Team.objects.filter(pk=job.team_id).update(slug=hostile("team"))
    type(people["alice"]).objects.filter(pk=people["alice"].pk).update(username=hostile("user"))
    Job.objects.filter(pk=job.pk).update(
        priority_class=PriorityClass.objects.create(name=hostile("prio"), value=5),
        spec={**job.spec, "mig_profile": hostile("mig")},
        gpu_model=hostile("model"),
        cluster=Cluster.objects.create(name=hostile("cluster"), kind="local", settings={}),
        placement=[
            {"node": hostile("node"), "gpus": [0]},
            {"node": "n2", "mig": {"gpu": 1, "profile": hostile("slice")}},
        ],
        reason={"code": "no_fit", "message": hostile("reason"), "details": {}},
    )
    JobEvent.objects.create(job=job, code="note", message=hostile("event"))

    runs = {
        "queue": gpuq("bob", "queue"),
        "show": gpuq("bob", "show", str(job.pk)),
        "ls": gpuq("bob", "ls"),
    }
    for command, run in runs.items():
        assert (run.code, run.err) == (0, ""), (command, run.err)
    return {command: run.out for command, run in runs.items()}


@pytest.mark.parametrize(("what", "commands"), PRINTED)
def test_queue_show_and_ls_print_what_the_server_names_escaped(
    outputs: dict[str, str], what: str, commands: tuple[str, ...]
) -> None:
    for command in commands:
        out = outputs[command]
        assert hostile(what) not in out, (command, out)
        assert clean(hostile(what)) in out, (command, out)


def test_nothing_any_command_prints_holds_a_control_character(outputs: dict[str, str]) -> None:
    for command, out in outputs.items():
        assert not RAW & set(out), (command, out)
