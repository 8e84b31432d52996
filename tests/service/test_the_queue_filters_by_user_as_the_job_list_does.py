"""`GET /api/v1/queue/?user=bob,me` and `gpuq queue --user bob` (as squeue -u): only the
waiting jobs those users submitted, comma-separated or repeated, `me` being you, within what
the caller may see (a teammate's jobs, not another team's), as the job list's `user` filter.
There was no such filter: the queue answered every visible waiting job whatever `user` said,
and `gpuq queue --user` was a usage error."""

# ruff: noqa: F811  (pytest fixtures imported from test_cli are parameters here)
from __future__ import annotations

from typing import Any

import pytest

from queue_service.jobs.services import submit_job
from tests.conftest import spec
from tests.service.test_cli import Gpuq, gpuq  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def waiting(people: dict[str, Any]) -> dict[str, str]:
    """A pending job of each: Alice and Bob in vision, Charlie in language; by name, its id."""
    return {
        who: str(submit_job(people[who], spec(name=f"{who}-job")).job.pk)
        for who in ("alice", "bob", "charlie")
    }


@pytest.mark.parametrize(
    ("who", "query", "seen"),
    [
        ("alice", "user=me", ["alice"]),  # the owner
        ("alice", "user=alice", ["alice"]),
        ("bob", "user=alice", ["alice"]),  # a teammate sees it
        ("bob", "user=alice,me", ["alice", "bob"]),
        ("bob", "user=alice&user=bob", ["alice", "bob"]),  # repeated: any of them
        ("bob", "user=", ["alice", "bob"]),  # empty: no filter, as the job list's
        ("bob", "user=charlie", []),  # another team's user: not visible
        ("charlie", "user=alice", []),  # an outsider sees nothing of vision
        ("charlie", "user=alice,me", ["charlie"]),
        ("alice", "user=nobody", []),
    ],
)
def test_the_queue_lists_only_the_waiting_jobs_of_the_users_named(
    client_for: Any, waiting: dict[str, str], who: str, query: str, seen: list[str]
) -> None:
    answer = client_for(who).get(f"/api/v1/queue/?{query}")

    assert answer.status_code == 200, answer.content
    assert sorted(j["id"] for j in answer.json()) == sorted(waiting[w] for w in seen)
    assert answer.headers["X-Total-Count"] == str(len(seen))
    jobs = client_for(who).get(f"/api/v1/jobs/?{query}").json()["results"]
    assert sorted(j["id"] for j in jobs) == sorted(waiting[w] for w in seen)  # as the list


def test_the_schema_documents_the_queues_user_filter(client_for: Any) -> None:
    schema = client_for("alice").get("/api/schema/", {"format": "json"}).json()

    params = {p["name"]: p for p in schema["paths"]["/api/v1/queue/"]["get"]["parameters"]}
    listed = {p["name"]: p for p in schema["paths"]["/api/v1/jobs/"]["get"]["parameters"]}
    assert params["user"]["in"] == "query"
    assert params["user"]["description"] == listed["user"]["description"]


def test_gpuq_queue_user_shows_those_users_waiting_jobs(
    gpuq: Gpuq, waiting: dict[str, str]
) -> None:
    def names(who: str, *argv: str) -> list[str]:
        run = gpuq(who, "queue", *argv)
        assert (run.code, run.err) == (0, ""), run.err
        return sorted(line.split()[2] for line in run.out.splitlines()[1:])

    assert names("bob", "--user", "alice") == ["alice-job"]
    assert names("bob", "--user", "me") == ["bob-job"]
    assert names("bob", "--user", "alice", "--user", "me") == ["alice-job", "bob-job"]
    assert names("bob", "--user", "alice,me", "--team", "vision") == ["alice-job", "bob-job"]
    assert names("charlie", "--user", "alice") == []
    assert names("alice") == ["alice-job", "bob-job"]
