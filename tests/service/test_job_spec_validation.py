"""Every invalid job spec gets a 400 that names the bad field; none gets a 500 or a job."""

from __future__ import annotations

import json
from typing import Any

import pytest

from queue_service.jobs.models import Job
from queue_service.jobs.spec import ArraySpec, parse_array, parse_duration, parse_memory_mb
from tests.conftest import spec

INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("missing name", {"name": None}, "name"),
    ("empty name", {"name": "  "}, "name"),
    ("name with newline", {"name": "a\nb"}, "name"),
    ("unknown kind", {"kind": "batch"}, "kind"),
    ("empty command list", {"command": []}, "command"),
    ("command of numbers", {"command": [1, 2]}, "command"),
    ("blank shell command", {"command": "   "}, "command"),
    ("env name with dash", {"env": {"BAD-NAME": "x"}}, "env"),
    ("env overrides CUDA_VISIBLE_DEVICES", {"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "env"),
    ("env value a list", {"env": {"A": ["x"]}}, "env"),
    # A lone surrogate (JSON's "\ud800") cannot be stored in PostgreSQL: these were 500s.
    ("env value with a lone surrogate", {"env": {"A": "x\udfff"}}, "env"),
    ("argument with a lone surrogate", {"command": ["echo", "\ud800"]}, "command"),
    ("shell command with a lone surrogate", {"command": "echo \ud800"}, "command"),
    ("zero nodes", {"nodes": 0}, "nodes"),
    ("too many GPUs per node", {"gpus_per_node": 17}, "gpus_per_node"),
    ("negative GPUs", {"gpus_per_node": -1}, "gpus_per_node"),
    ("MIG profile on a training job", {"mig_profile": "1g.10gb"}, "mig_profile"),
    ("MIG profile on 2 nodes", {"kind": "agent", "mig_profile": "1g.10gb", "nodes": 2}, "nodes"),
    ("malformed MIG profile", {"kind": "agent", "mig_profile": "one-slice"}, "mig_profile"),
    (
        "MIG with gpus_per_node 2",
        {"kind": "agent", "mig_profile": "1g.10gb", "gpus_per_node": 2},
        "gpus_per_node",
    ),
    ("bad time limit", {"time_limit": "soon"}, "time_limit"),
    ("time limit over the site maximum", {"time_limit": "90d"}, "time_limit"),
    ("unknown priority", {"priority": "urgent"}, "priority"),
    ("retries max negative", {"retries": {"max": -1}}, "retries"),
    ("retry on an unknown cause", {"retries": {"on": ["oom"]}}, "retries"),
    ("memory nonsense", {"memory": "lots"}, "memory"),
    # A 400-digit number overflowed float(): these were 500s.
    ("memory of 400 digits", {"memory": 10**400}, "memory"),
    ("time limit of 400 digits", {"time_limit": 10**400}, "time_limit"),
    ("memory past a pebibyte", {"memory": "2048T"}, "memory"),
    ("memory of 400 digit characters", {"memory": "9" * 400 + "G"}, "memory"),
    (
        "checkpoint interval of 400 digits",
        {"checkpoint": {"dir": "/c", "interval": 10**400}},
        "checkpoint",
    ),
    ("checkpoint without dir", {"checkpoint": {"interval": "10m"}}, "checkpoint"),
    (
        "checkpoint interval over the time limit",
        {"time_limit": "1h", "checkpoint": {"dir": "/ckpt", "interval": "2h"}},
        "checkpoint",
    ),
    ("multi-node CPU-only", {"nodes": 2, "gpus_per_node": 0}, "gpus_per_node"),
    ("team the user is not in", {"team": "language"}, "team"),
    ("unknown cluster", {"cluster": "nowhere"}, "cluster"),
    ("gpu model with spaces", {"gpu_model": "A100 80GB"}, "gpu_model"),
    ("image with spaces", {"image": "nvcr.io/x y"}, "image"),
    # DEL and C1 (CSI: ESC [ to 8-bit terminals) are no whitespace, and no image has them.
    ("image with DEL", {"image": "nvcr.io/x\x7fy"}, "image"),
    ("image with a C1 CSI", {"image": "nvcr.io/x\x9b2J"}, "image"),
    ("nccl_debug on one GPU", {"nccl_debug": True}, "nccl_debug"),
    ("array of words", {"array": "a-b"}, "array"),
    ("array range that ends before it starts", {"array": "5-1"}, "array"),
    ("array step of 0", {"array": "0-10:0"}, "array"),
    ("array limit of 0", {"array": "0-3%0"}, "array"),
    ("array over the site's task limit", {"array": "0-1000"}, "array"),
    ("array index past the maximum", {"array": "1000000"}, "array"),
    ("array as a list", {"array": [1, 2]}, "array"),
    ("array as true", {"array": True}, "array"),
    ("array of 400 digits", {"array": "9" * 400}, "array"),
    ("array of a billion tasks", {"array": "0-999999999"}, "array"),
    ("array with a shell", {"array": "0-3; rm -rf /"}, "array"),
    # A limit past a 32-bit column was a 500 on PostgreSQL; a trailing newline was stored.
    ("array limit past 32 bits", {"array": "0-3%2147483648"}, "array"),
    ("array limit of 30 digits", {"array": "0-3%" + "9" * 30}, "array"),
    ("array with a trailing newline", {"array": "0-2\n"}, "array"),
    # Unknown fields were dropped: a misspelt gpus_per_node ran the job on one GPU.
    ("misspelt field", {"gpu_per_node": 8}, "gpu_per_node"),
    ("field of another tool", {"partition": "gpu"}, "partition"),
]


def test_a_misspelt_field_is_refused_with_the_field_it_resembles(client_for: Any) -> None:
    response = client_for("alice").post(
        "/api/v1/jobs/", spec(gpu_per_node=8, tim_limit="1h"), format="json"
    )
    assert response.status_code == 400, response.content
    errors = response.json()
    assert set(errors) == {"gpu_per_node", "tim_limit"}, errors
    assert "did you mean 'gpus_per_node'?" in str(errors["gpu_per_node"])
    assert "did you mean 'time_limit'?" in str(errors["tim_limit"])
    assert Job.objects.count() == 0


# Which of the two it is, and the limit: a 100 KB value was told "too long, or has a NUL byte
# or lone surrogate", neither which nor how long is allowed.
TOO_LONG_OR_UNSTORABLE = [
    ("env value too long", {"env": {"A": "x" * 32769}}, "env", "32,769 characters, at most 32,768"),
    ("env value with NUL", {"env": {"A": "x\x00y"}}, "env", "has a NUL byte or a lone surrogate"),
    ("argument too long", {"command": ["echo", "x" * 65537]}, "command", "at most 65,536"),
    ("argument with NUL", {"command": ["echo", "a\x00"]}, "command", "has a NUL byte"),
    ("shell command too long", {"command": "x" * 65537}, "command", "65,537 characters, at most"),
    ("shell command with NUL", {"command": "echo a\x00"}, "command", "has a NUL byte"),
]


@pytest.mark.parametrize(
    ("case", "overrides", "field", "says"),
    TOO_LONG_OR_UNSTORABLE,
    ids=[c[0] for c in TOO_LONG_OR_UNSTORABLE],
)
def test_a_value_too_long_says_the_limit_and_one_unstorable_says_why(
    client_for: Any, case: str, overrides: dict[str, Any], field: str, says: str
) -> None:
    response = client_for("alice").post("/api/v1/jobs/", spec(**overrides), format="json")
    assert response.status_code == 400, response.content
    message = str(response.json()[field])
    assert says in message, message
    assert ("too long" in message) == ("at most" in says), message
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("overrides", "also"),
    [({"nodes": 0}, "nodes"), ({"kind": "training", "mig_profile": "1g.10gb"}, "mig_profile")],
    ids=["a field's own error", "an error between fields"],
)
def test_a_misspelt_field_is_named_beside_the_other_errors(
    client_for: Any, overrides: dict[str, Any], also: str
) -> None:
    response = client_for("alice").post(
        "/api/v1/jobs/", spec(gpu_per_node=8, **overrides), format="json"
    )
    assert response.status_code == 400, response.content
    assert set(response.json()) == {"gpu_per_node", also}, response.json()
    assert Job.objects.count() == 0


def test_x_keys_are_free_for_yaml_anchors(client_for: Any) -> None:
    text = "x-common: &env {A: '1'}\nname: anchored\ncommand: [/bin/true]\nenv: *env\n"
    response = client_for("alice").post(
        "/api/v1/jobs/", data=text.encode(), content_type="application/yaml"
    )
    assert response.status_code == 201, response.content
    assert Job.objects.get().spec["env"] == {"A": "1"}


@pytest.mark.parametrize(("case", "overrides", "field"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_spec_is_a_400_naming_the_field(
    client_for: Any, case: str, overrides: dict[str, Any], field: str
) -> None:
    body = {k: v for k, v in spec(**overrides).items() if v is not None}
    # json.dumps escapes what UTF-8 cannot carry (a lone surrogate), as clients do.
    response = client_for("alice").post(
        "/api/v1/jobs/", json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    "body",
    [[], "a string", 42, None],
    ids=["a list", "a string", "a number", "null"],
)
def test_a_body_that_is_not_an_object_is_a_400(client_for: Any, body: Any) -> None:
    response = client_for("alice").post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    assert Job.objects.count() == 0


def test_malformed_json_is_a_400(client_for: Any) -> None:
    response = client_for("alice").post(
        "/api/v1/jobs/", data='{"name": ', content_type="application/json"
    )
    assert response.status_code == 400


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, 400, "nested too deeply"),
        ('{"name": "deep", "command": ' + "[" * 40 + "]" * 40 + "}", 400, "nested more than 32"),
        ('{"name": "big", "command": ["' + "x" * 3_000_000 + '"]}', 413, "larger than 2,621,440"),
    ],
    ids=["past the recursion limit", "40 levels", "over the body limit"],
)
def test_a_body_too_deep_or_too_large_is_refused_before_validation(
    client_for: Any, body: str, status: int, message: str
) -> None:
    response = client_for("alice").post("/api/v1/jobs/", data=body, content_type="application/json")
    assert response.status_code == status
    assert message in response.json()["detail"]
    assert Job.objects.count() == 0


def test_valid_spec_is_normalized(client_for: Any) -> None:
    response = client_for("alice").post(
        "/api/v1/jobs/",
        spec(
            time_limit="01:30:00",
            memory="64G",
            env={"SEED": 7},
            checkpoint={"dir": "/ckpt", "interval": "10m"},
        ),
        format="json",
    )
    assert response.status_code == 201, response.content
    stored = response.json()["spec"]
    assert stored["time_limit"] == 5400
    assert stored["memory"] == 65536
    assert stored["env"] == {"SEED": "7"}
    assert stored["checkpoint"] == {"dir": "/ckpt", "interval": 600}
    assert stored["retries"] == {"max": 3, "on": ["node_failure", "preemption"]}


def test_agent_job_on_a_mig_slice_is_accepted(client_for: Any) -> None:
    body = spec(kind="agent", mig_profile="1g.10gb")
    del body["gpus_per_node"]
    response = client_for("alice").post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["spec"]["gpus_per_node"] == 0
    assert 0 < response.json()["gpus"] < 1


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (3600, 3600),
        ("90m", 5400),
        ("2h", 7200),
        ("1d", 86400),
        ("01:30:00", 5400),
        ("2-00:00:00", 172800),
        ("10:00", 600),  # MM:SS, as Slurm's --time
        ("1-0", 86400),
        ("45s", 45),
    ],
)
def test_durations_parse_like_slurm_and_humans(text: Any, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("given", "indices", "max_running"),
    [
        ("0-3", (0, 1, 2, 3), None),
        ("1,3,5", (1, 3, 5), None),
        ("0-15:4", (0, 4, 8, 12), None),
        ("1-8:3", (1, 4, 7), None),
        ("0-99%10", tuple(range(100)), 10),
        (7, (7,), None),
        ("7", (7,), None),
        (" 0 - 2 % 1 ", (0, 1, 2), 1),
        ("3,1,1-2", (1, 2, 3), None),  # each index once, in order
        ("0-999", tuple(range(1000)), None),
        ("0-3%100", (0, 1, 2, 3), 4),  # a limit past the size limits nothing
    ],
)
def test_array_indices_parse_like_slurms_array_option(
    given: Any, indices: tuple[int, ...], max_running: int | None
) -> None:
    parsed = parse_array(given, 1000)
    assert (parsed.indices, parsed.max_running) == (indices, max_running)
    assert parse_array(parsed.text, 1000) == parsed  # what is stored reads back the same


def test_an_array_counts_every_index_its_text_lists_so_repeats_cannot_make_work() -> None:
    # The union would be 10 tasks; the parts list 20, and each listed one costs work.
    with pytest.raises(ValueError, match="at most 15 tasks"):
        parse_array("0-9,0-9", 15)
    with pytest.raises(ValueError, match="indices go up to 999999"):
        parse_array("1-" + "9" * 5000, 1000)  # int() of 5000 digits would raise its own error
    assert parse_array("0-9,5", 15).indices == tuple(range(10))


def test_array_text_past_its_length_is_refused_saying_so() -> None:
    with pytest.raises(ValueError, match=r"^at most 16384 characters$"):
        parse_array("1," * 8200 + "1", 100_000)
    assert len(parse_array(",".join(map(str, range(0, 4000, 2))), 100_000).indices) == 2000


def test_an_array_past_the_sites_task_limit_is_refused_before_it_is_expanded() -> None:
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="at most 10 tasks"):
            parse_array("0-999999", 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000  # a million indices in a set would take tens of MB
    assert parse_array("0-9", 10) == ArraySpec("0-9", tuple(range(10)), None)


@pytest.mark.parametrize(
    ("text", "mb"), [(4096, 4096), ("64G", 65536), ("64GiB", 65536), ("512M", 512), ("1T", 1048576)]
)
def test_memory_sizes_parse_to_megabytes(text: Any, mb: int) -> None:
    assert parse_memory_mb(text) == mb


def _valid_specs() -> Any:
    from hypothesis import strategies as st

    text = st.text(
        alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20
    ).filter(str.strip)
    durations = st.one_of(
        st.integers(1, 86400), st.sampled_from(["90s", "45m", "2h", "1d", "01:30:00", "1-00:00:00"])
    )
    common = {
        "name": text,
        "command": st.one_of(st.lists(text, min_size=1, max_size=4), text),
        "env": st.dictionaries(
            st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True), text, max_size=3
        ),
        "image": st.sampled_from([None, "busybox", "nvcr.io/nvidia/pytorch:24.05-py3"]),
        "cpus_per_gpu": st.one_of(st.none(), st.integers(1, 64)),
        "memory": st.one_of(
            st.none(), st.integers(1, 10**6), st.sampled_from(["512M", "64G", "1T"])
        ),
        "time_limit": st.one_of(st.none(), durations),
        "priority": st.sampled_from(["low", "normal", "high"]),
        "hold": st.booleans(),
        # A task stores its own index: its copy is that task again.
        "array": st.integers(0, 999).map(str),
        "retries": st.fixed_dictionaries(
            {"max": st.integers(0, 20)},
            optional={
                "on": st.lists(
                    st.sampled_from(["node_failure", "preemption"]), max_size=2, unique=True
                )
            },
        ),
        "checkpoint": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {"dir": st.just("/ckpt/x")}, optional={"interval": st.sampled_from(["1m", 60])}
            ),
        ),
    }
    training = st.fixed_dictionaries(
        {"kind": st.just("training")},
        optional={
            **common,
            "nodes": st.integers(1, 4),
            "gpus_per_node": st.integers(1, 8),
            "gpu_model": st.sampled_from([None, "A100-SXM4-80GB"]),
            "nccl_debug": st.booleans(),
        },
    )
    agent = st.fixed_dictionaries(
        {
            "kind": st.just("agent"),
            "mig_profile": st.sampled_from(["1g.10gb", "3g.40gb", "1g.20gb+me"]),
        },
        optional={**common, "gpus_per_node": st.sampled_from([0, 1])},
    )
    return st.one_of(training, agent).map(lambda d: {"name": "n", "command": ["true"], **d})


@pytest.mark.django_db
def test_a_stored_spec_is_accepted_again_and_stored_unchanged(db: Any) -> None:
    """What submit stores is what a copy sends back (resubmit, the UI's copy): for any valid
    spec, validating the stored form again gives the same stored form."""
    from hypothesis import HealthCheck, assume, given, settings

    from queue_service.jobs.spec import JobSpecSerializer

    def as_stored(value: Any) -> Any:
        assert isinstance(value, ArraySpec) and len(value.indices) == 1
        return str(value.indices[0])  # as submit_job stores a task's index

    @settings(
        max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(data=_valid_specs())
    def check(data: dict[str, Any]) -> None:
        first = JobSpecSerializer(data=data)
        # Refused specs store nothing (e.g. NCCL debugging on one GPU): not this test's.
        assume(first.is_valid())
        stored = json.loads(json.dumps(dict(first.validated_data), default=as_stored))
        again = JobSpecSerializer(data=stored)
        assert again.is_valid(), (stored, again.errors)
        assert json.loads(json.dumps(dict(again.validated_data), default=as_stored)) == stored

    check()
