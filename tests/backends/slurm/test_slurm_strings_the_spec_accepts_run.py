"""Every command argument, shell string and env entry the spec accepts can be run: Linux
refuses any one argument or environment string over 128 KiB of bytes (MAX_ARG_STRLEN,
131,072 with its NUL), counted in UTF-8, where a character may take 4. So the spec counts
each in bytes (an env entry as the `NAME=value` string execve gets), at most
MAX_STRING_BYTES, and answers a longer one with a 400 naming its field. On the lab: the
longest the spec accepts runs (the shell string as `bash -c`'s argument, the env entry on
`env --`'s line and in the job's environment).

The lab tests use a backend of their own (not the shared `backend` fixture, whose
`scancel -u` would stop the jobs of everyone else using the lab at the same time)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from queue_service.backends.base import RemoteState
from queue_service.backends.slurm import SlurmBackend
from queue_service.jobs.spec import MAX_STRING_BYTES, JobSpecSerializer
from tests.conftest import spec

from .conftest import lab_backend, request, wait_for

EMOJI = "\U0001f600"  # 4 bytes of UTF-8


def longest_command(extra: int = 0) -> str:
    """`true €€€…`: MAX_STRING_BYTES bytes at most (3 a `€`), `extra` characters over."""
    return "true " + "€" * ((MAX_STRING_BYTES - 5) // 3 + extra)


def longest_blob(extra: int = 0) -> str:
    """A value whose `BLOB=<value>` is MAX_STRING_BYTES bytes exactly, plus `extra` bytes."""
    room = MAX_STRING_BYTES - len("BLOB=")
    return EMOJI * (room // 4) + "x" * (room % 4 + extra)


def errors(**overrides: Any) -> dict[str, Any]:
    serializer = JobSpecSerializer(data=spec(gpus_per_node=0, **overrides))
    return {} if serializer.is_valid() else dict(serializer.errors)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"command": longest_command()}, None),
        ({"command": longest_command(extra=1)}, "command"),
        ({"command": ["echo", longest_command()]}, None),
        ({"command": ["echo", longest_command(extra=1)]}, "command"),
        ({"command": ["true"], "env": {"BLOB": longest_blob()}}, None),
        ({"command": ["true"], "env": {"BLOB": longest_blob(extra=1)}}, "env"),
        # 65,000 `€` (the shell string's 65,536 characters) are 195,000 bytes.
        ({"command": "true " + "€" * 65000}, "command"),
        # 32,768 emoji (an env value's 32,768 characters) are 131,072 bytes.
        ({"command": ["true"], "env": {"BLOB": EMOJI * 32768}}, "env"),
    ],
)
def test_the_spec_counts_each_string_in_bytes(
    teams: Any, overrides: dict[str, Any], field: str | None
) -> None:
    found = errors(**overrides)
    if field is None:
        assert found == {}
        return
    assert list(found) == [field]
    said = str(found[field])
    assert f"at most {MAX_STRING_BYTES:,}" in said
    if field == "env":
        assert "BLOB" in found["env"]  # the variable is named


@pytest.fixture(scope="module")
def lab(slurm_lab: None) -> Iterator[SlurmBackend]:
    backend = lab_backend()
    yield backend
    backend.close()


@pytest.mark.slurm
@pytest.mark.django_db
def test_the_longest_shell_string_the_spec_accepts_runs_on_slurm(
    lab: SlurmBackend, teams: Any
) -> None:
    command = longest_command()
    assert errors(command=command) == {}
    external_id = lab.submit(request(command=command)).external_id
    status = wait_for(lab, external_id)
    stderr = lab.logs(external_id, stream="stderr").data.decode(errors="replace")
    assert status.state == RemoteState.SUCCEEDED, (status, stderr[-300:])


@pytest.mark.slurm
@pytest.mark.django_db
def test_the_longest_env_entry_the_spec_accepts_reaches_the_job(
    lab: SlurmBackend, teams: Any
) -> None:
    env = {"BLOB": longest_blob()}
    assert errors(env=env, command=["true"]) == {}
    size = len(env["BLOB"].encode())
    check = f'test "$(printf %s "$BLOB" | wc -c)" -eq {size}'  # bytes, whatever the locale
    external_id = lab.submit(request(env=env, command=("bash", "-c", check))).external_id
    status = wait_for(lab, external_id)
    stderr = lab.logs(external_id, stream="stderr").data.decode(errors="replace")
    assert status.state == RemoteState.SUCCEEDED, (status, stderr[-300:])
