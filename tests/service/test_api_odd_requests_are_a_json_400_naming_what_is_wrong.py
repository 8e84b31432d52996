"""Odd requests to the API are a JSON 400 that names what is wrong: the query parameter or
the body's field, or, for a request as a whole, the part of it at fault. Each row here was
a 500, an HTML page, or a message naming something else before its fix: a usage period
ending near year 1, a body that is no object on a path naming the object, a request
Django itself refuses (too many query parameters, a Host it does not serve), an integer
too long for Python to read, a NUL byte in a query parameter. Nothing is changed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.services import submit_job
from queue_service.tenancy.models import Membership, Quota
from tests.conftest import spec


def _as(client_for: Any, who: str) -> Any:
    """A client that answers a server error as the 500 a real client gets, not a raise."""
    client = client_for(who)
    client.raise_request_exception = False
    return client


# --- usage periods ------------------------------------------------------------------------

# (query, the parameters the 400 names): a `from` left out is `to`'s last fortnight, which
# for a `to` near year 1 is no date at all; `to` is the one at fault.
USAGE_PERIODS = [
    ("to=0001-01-01", {"to"}),
    ("to=0001-01-13", {"to"}),
    ("from=0001-01-01&to=0001-01-01", {"from", "to"}),
    ("to=9999-12-31", {"to"}),
    ("from=9999-12-31", {"from"}),
]


@pytest.mark.parametrize(("query", "named"), USAGE_PERIODS)
def test_a_usage_period_out_of_range_is_a_400_naming_the_dates_given(
    client_for: Any, people: Any, query: str, named: set[str]
) -> None:
    response = _as(client_for, "dana").get(f"/api/v1/teams/vision/usage/?{query}")
    assert response.status_code == 400, response.content[:200]
    assert set(response.json()) == named
    assert all("days run from 2000-01-01" in response.json()[n][0] for n in named)


# --- bodies that are no object ------------------------------------------------------------

NOT_OBJECTS = ["[]", "null", '"admin"', "1", '[{"role": "admin"}]']
# (path naming the object, what must not have changed)
NAMED_BY_PATH = [
    ("patch", "/api/v1/teams/vision/members/bob/"),
    ("put", "/api/v1/teams/vision/quotas/H100/"),
]


@pytest.mark.parametrize("body", NOT_OBJECTS)
@pytest.mark.parametrize(("method", "path"), NAMED_BY_PATH)
def test_a_body_that_is_no_object_is_refused_as_a_whole_on_a_path_naming_the_object(
    client_for: Any, people: Any, method: str, path: str, body: str
) -> None:
    response = getattr(_as(client_for, "dana"), method)(
        path, data=body, content_type="application/json"
    )
    assert response.status_code == 400
    # Not "role: must be one of" nor "nominal_gpus: required": no field was given at all.
    assert response.json() == {"non_field_errors": ["the body must be a JSON object"]}
    assert Membership.objects.get(team__slug="vision", user__username="bob").role == "member"
    assert not Quota.objects.filter(gpu_model="H100").exists()


# --- requests Django refuses before any view ----------------------------------------------

MANY = "&".join(f"p{i}=1" for i in range(1001))  # past DATA_UPLOAD_MAX_NUMBER_FIELDS
# (path, headers, what the detail says)
REFUSED_FIRST = [
    (f"/api/v1/jobs/?{MANY}", {}, "more than 1,000 query parameters"),
    (f"/api/v1/queue/?{MANY}", {}, "more than 1,000 query parameters"),
    (f"/api/v1/no-such-thing/?{MANY}", {}, "more than 1,000 query parameters"),
    ("/api/v1/jobs/", {"HTTP_HOST": "elsewhere.example"}, "the Host header"),
    ("/api/v1/jobs/", {"HTTP_HOST": "a b"}, "the Host header"),
]


@pytest.mark.parametrize(("path", "headers", "said"), REFUSED_FIRST)
def test_a_request_refused_before_the_api_sees_it_is_a_json_400_saying_why(
    client_for: Any, path: str, headers: dict[str, str], said: str
) -> None:
    response = _as(client_for, "alice").get(path, **headers)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert said in response.json()["detail"]
    # Django's own words name its settings: for site staff, not for clients.
    assert "ALLOWED_HOSTS" not in response.json()["detail"]
    assert "DATA_UPLOAD" not in response.json()["detail"]


def test_a_page_refused_before_its_view_is_still_djangos_page(client_for: Any) -> None:
    response = _as(client_for, "alice").get(f"/queue/?{MANY}")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")


# --- numbers too long to read -------------------------------------------------------------

LONG = "9" * 5000  # past the 4,300 digits Python's int() reads
# (method, path, body with the number in it)
LONG_NUMBERS = [
    (
        "post",
        "/api/v1/jobs/",
        json.dumps(spec(name="long")).replace('"gpus_per_node": 1', f'"gpus_per_node": {LONG}'),
    ),
    ("post", "/api/v1/jobs/preview/", f'{{"name": "x", "command": ["a"], "nodes": -{LONG}}}'),
    ("put", "/api/v1/teams/vision/quotas/H100/", f'{{"nominal_gpus": {LONG}}}'),
    ("patch", "/api/v1/me/", f'{{"email": [{LONG}]}}'),
]


@pytest.mark.parametrize(("method", "path", "body"), LONG_NUMBERS)
def test_an_integer_too_long_to_read_is_a_400_in_the_apis_words(
    client_for: Any, people: Any, method: str, path: str, body: str
) -> None:
    before = Job.objects.count()
    response = getattr(_as(client_for, "dana"), method)(
        path, data=body, content_type="application/json"
    )
    assert response.status_code == 400
    # As shape.py says it of a YAML file's, not Python's advice to call sys.set_int_max_str_digits.
    assert response.json() == {"detail": "the JSON body holds a number of over 3,000 digits"}
    assert Job.objects.count() == before


# --- NUL bytes in the query ---------------------------------------------------------------


@pytest.fixture
def alice_job(people: Any) -> Job:
    return submit_job(people["alice"], spec(name="nul")).job


# (path with {job}, the parameter holding the NUL)
NUL_QUERIES = [
    ("/api/v1/jobs/{job}/logs/?offset=%00", "offset"),
    ("/api/v1/jobs/{job}/logs/?stream=stdout%00", "stream"),
    ("/api/v1/jobs/?cursor=%00", "cursor"),
    ("/api/v1/jobs/?state=pending&name=a%00b", "name"),
    ("/api/v1/queue/?team=vision&team=%00", "team"),
    ("/api/v1/teams/vision/usage/?from=%00", "from"),
]


@pytest.mark.parametrize(("path", "param"), NUL_QUERIES)
def test_a_nul_in_a_query_parameter_is_a_400_naming_the_parameter(
    client_for: Any, alice_job: Job, path: str, param: str
) -> None:
    response = _as(client_for, "dana").get(path.format(job=alice_job.pk))
    assert response.status_code == 400
    assert response.json() == {param: ["contains a NUL byte"]}


# (path, what the detail names): no parameter to name
NUL_ELSEWHERE = [
    ("/api/v1/jobs/?%00=x", "a query parameter's name"),
    ("/api/v1/teams/vi%00sion/", "the path"),
]


@pytest.mark.parametrize(("path", "said"), NUL_ELSEWHERE)
def test_a_nul_in_the_path_or_a_parameters_name_is_a_400_saying_where(
    client_for: Any, people: Any, path: str, said: str
) -> None:
    response = _as(client_for, "dana").get(path)
    assert response.status_code == 400
    assert response.json() == {"detail": f"{said} contains a NUL byte"}


# --- charsets -----------------------------------------------------------------------------

# Codecs Python's codecs.lookup() finds that are no text encoding: zlib's and bz2's would
# inflate a body Django bounded while compressed; hex's raises an error no parser expects.
NOT_TEXT = ["bz2", "zlib", "hex", "base64", "rot13", "uu"]


@pytest.mark.parametrize("charset", NOT_TEXT)
def test_a_charset_that_is_no_text_encoding_is_a_400_naming_it(
    client_for: Any, people: Any, charset: str
) -> None:
    before = Job.objects.count()
    response = _as(client_for, "alice").post(
        "/api/v1/jobs/",
        data=json.dumps(spec(name="charset")),
        content_type=f"application/json; charset={charset}",
    )
    assert response.status_code == 400
    assert response.json() == {"detail": f"Unsupported charset {charset!r} in the Content-Type"}
    assert Job.objects.count() == before
