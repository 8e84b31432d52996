"""A filter given twice filters by all its values; an Idempotency-Key used for one request
answers a different request (another spec, a resubmit of another job) with a 409, not with
the first job."""

from __future__ import annotations

from typing import Any

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job, transition
from tests.conftest import spec

S = Job.State


def test_a_filter_given_twice_is_not_silently_narrowed_to_its_last_value(
    client_for: Any, people: Any
) -> None:
    # `?state=pending&state=cancelled` (how most HTTP clients encode a list) kept only the
    # last value (QueryDict.__getitem__), so the pending job silently vanishes from the list.
    pending = submit_job(people["alice"], spec(name="pending")).job
    cancelled = submit_job(people["alice"], spec(name="cancelled")).job
    transition(cancelled, S.CANCELLED)

    response = client_for("alice").get("/api/v1/jobs/?state=pending&state=cancelled")

    if response.status_code != 400:  # a 400 naming the repeat would be as good as the union
        names = sorted(j["name"] for j in response.json()["results"])
        assert names == sorted([pending.name, cancelled.name])


def test_resubmitting_a_job_with_a_key_used_for_another_job_is_not_answered_with_that_job(
    client_for: Any, people: Any
) -> None:
    # The key is looked up before anything else, by user only: POST jobs/B/resubmit/ with a key
    # first used to submit A answers 200 with job A itself, which is no copy of B.
    client = client_for("alice")
    first = client.post(
        "/api/v1/jobs/", spec(name="first"), format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    ).json()
    other = submit_job(people["alice"], spec(name="other", gpus_per_node=2)).job

    response = client.post(
        f"/api/v1/jobs/{other.pk}/resubmit/", {}, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )

    assert response.status_code in (409, 422), (response.status_code, response.json()["name"])
    assert response.json().get("id") != first["id"]


def test_a_submit_reusing_a_key_with_a_different_spec_is_refused_not_answered_200(
    client_for: Any, people: Any
) -> None:
    # A different (even invalid) body under a used key is answered 200 with the first job, so
    # the client believes its 4-GPU job was stored; the schema declares a 409 for this.
    client = client_for("alice")
    first = client.post(
        "/api/v1/jobs/", spec(name="one-gpu"), format="json", HTTP_IDEMPOTENCY_KEY="k-2"
    )
    assert first.status_code == 201

    changed = client.post(
        "/api/v1/jobs/",
        spec(name="four-gpus", gpus_per_node=4),
        format="json",
        HTTP_IDEMPOTENCY_KEY="k-2",
    )
    invalid = client.post(
        "/api/v1/jobs/", spec(time_limit="bogus"), format="json", HTTP_IDEMPOTENCY_KEY="k-2"
    )

    assert (changed.status_code, invalid.status_code) != (200, 200)
    assert changed.status_code in (409, 422), changed.json()["name"]
    assert invalid.status_code in (400, 409, 422)


def test_a_repeat_holding_a_set_has_the_first_submits_fingerprint_whatever_the_sets_order() -> None:
    # A YAML !!set's iteration order follows hashing and insertion (string hashes differ
    # between server processes): a true repeat must not be a 409 for it.
    from queue_service.jobs.services import _fingerprint

    first, repeat = {1, 9}, {9, 1}
    assert list(first) != list(repeat)  # the same set, iterated in another order
    assert _fingerprint({"x-note": first}) == _fingerprint({"x-note": repeat})
