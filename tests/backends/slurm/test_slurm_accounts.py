"""Per-team cluster accounts (the settings' `accounts`, docs/slurm.md "Trust boundary"): a team
mapped to its own Unix user runs its jobs as that user, so another team's job can neither read
its batch script (env and secrets), nor cancel it, nor read its files. On the real lab, whose
second key-only user (`lab up`) is the nlp team's account; vision stays on the cluster's user."""

from __future__ import annotations

import os
import pwd
import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from queue_service.backends.base import (
    BackendError,
    ClusterConfig,
    JobStatus,
    RemoteState,
    SubmitResult,
)
from queue_service.backends.slurm import SlurmBackend, create, script
from queue_service.backends.slurm.backend import log_name, slurm_job_id

from .conftest import lab_backend, request, second_account, wait_for


def running(status: JobStatus) -> bool:
    return status.state == RemoteState.RUNNING or status.state in RemoteState.TERMINAL


def slurm_id(external_id: str) -> str:
    return slurm_job_id(external_id)


def read_log(backend: SlurmBackend, external_id: str, until: str, timeout_s: float = 30) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        text = backend.logs(external_id).data.decode(errors="replace")
        if until in text or time.monotonic() > deadline:
            return text
        time.sleep(0.3)


def cancel_all_of_account(backend: SlurmBackend, team: str) -> None:
    backend.account_connection(team).run("scancel -u $(id -un)")


@pytest.fixture
def mapped(slurm_lab: None) -> Iterator[SlurmBackend]:
    """nlp (charlie's team) on the lab's second user; vision (alice's) on the cluster's user."""
    backend = lab_backend(accounts={"nlp": second_account()})
    yield backend
    cancel_all_of_account(backend, "nlp")
    backend.account_connection("nlp").close()
    backend.connection.close()


@pytest.fixture
def unmapped(slurm_lab: None) -> Iterator[SlurmBackend]:
    """Both teams on the cluster's one user: today's default, one trust domain."""
    backend = lab_backend()
    yield backend
    backend.connection.close()


def charlie_goes_for_alices_job(backend: SlurmBackend) -> tuple[str, str, JobStatus]:
    """Alice (vision) runs a job with a secret in its env that also prints it to its log.
    Charlie's job (nlp) then asks Slurm for her batch script, cancels her job and reads her
    log file and workdir. Returns (the secret, charlie's output, alice's status after)."""
    secret = f"wandb-{uuid.uuid4().hex}"
    alice = backend.submit(
        request(
            team="vision",
            user="alice",
            name="alice-train",
            command=("bash", "-c", 'echo "key=$WANDB_API_KEY"; exec sleep 120'),
            env={"WANDB_API_KEY": secret},
        )
    ).external_id
    try:
        assert wait_for(backend, alice, running).state == RemoteState.RUNNING
        assert f"key={secret}" in read_log(backend, alice, until="key=")
        target = slurm_id(alice)
        alice_log = script.log_path(backend.workdir(), log_name(alice), "stdout")
        charlie = backend.submit(
            request(
                team="nlp",
                user="charlie",
                name="charlie-peek",
                command=(
                    "exec 2>&1; echo charlie-start; "
                    f"scontrol write batch_script {target} -; "
                    f"scancel {target}; "
                    f"cat {shlex.quote(alice_log)}; "
                    f"ls -ld {shlex.quote(backend.workdir())}; "
                    "echo charlie-end"
                ),
            )
        ).external_id
        assert wait_for(backend, charlie).state == RemoteState.SUCCEEDED
        output = read_log(backend, charlie, until="charlie-end")
        assert "charlie-start" in output and "charlie-end" in output, output
        status = backend.poll([alice])[alice]
        deadline = time.monotonic() + 30
        while status.native_state == "COMPLETING" and time.monotonic() < deadline:
            time.sleep(0.5)  # a cancel's end: Slurm still stops her processes
            status = backend.poll([alice])[alice]
        return secret, output, status
    finally:
        backend.cancel(alice, grace_s=0)


@pytest.mark.slurm
def test_a_team_on_its_own_account_can_neither_read_nor_cancel_another_teams_job(
    mapped: SlurmBackend,
) -> None:
    secret, output, alice = charlie_goes_for_alices_job(mapped)
    assert secret not in output
    assert alice.state == RemoteState.RUNNING, alice


@pytest.mark.slurm
def test_without_accounts_the_same_job_reads_and_cancels_it(unmapped: SlurmBackend) -> None:
    """The control: on one shared account the attack above works (the trust boundary the
    docs describe), so the test above passes because of the mapping, not by accident."""
    secret, output, alice = charlie_goes_for_alices_job(unmapped)
    assert f"WANDB_API_KEY={secret}" in output  # the batch script's launch line
    assert f"key={secret}" in output  # her log file
    assert alice.state == RemoteState.CANCELLED, alice


@pytest.mark.slurm
def test_a_mapped_teams_job_is_submitted_polled_read_and_cancelled_through_its_account(
    mapped: SlurmBackend,
) -> None:
    user = second_account()["user"]
    nlp = mapped.account_connection("nlp")
    default_workdir = mapped.workdir()
    default_calls = mapped.connection.calls
    job = request(team="nlp", user="charlie", command=("bash", "-c", "echo hi-nlp; sleep 120"))
    external_id = mapped.submit(job).external_id
    assert external_id.startswith(f"{user}:") and slurm_id(external_id).isdigit()
    owner = subprocess.run(
        ["squeue", "-h", "-j", slurm_id(external_id), "-o", "%u"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert owner == user
    # The submit's guard works under the account too: a repeat adopts the job.
    assert mapped.submit(job) == SubmitResult(external_id, adopted=True)

    status = wait_for(mapped, external_id, running)
    assert (status.external_id, status.state) == (external_id, RemoteState.RUNNING)
    assert "hi-nlp" in read_log(mapped, external_id, until="hi-nlp")

    # The account's workdir is its own and private.
    workdir = nlp.home().rstrip("/") + "/.gpuq/jobs"
    info = os.stat(workdir)
    assert (pwd.getpwuid(info.st_uid).pw_name, info.st_mode & 0o777) == (user, 0o700)
    assert os.stat(default_workdir).st_mode & 0o777 == 0o700

    nlp_calls = nlp.calls
    assert mapped.cancel(external_id, grace_s=0) is True
    assert nlp.calls > nlp_calls
    final = wait_for(mapped, external_id)
    assert (final.state, final.native_state) == (RemoteState.CANCELLED, "CANCELLED")
    assert mapped.connection.calls == default_calls, "nothing went through the cluster's user"


@pytest.mark.slurm
def test_one_poll_asks_each_account_about_its_own_jobs(mapped: SlurmBackend) -> None:
    vision = mapped.submit(request(team="vision", command=("sleep", "30"))).external_id
    nlp = mapped.submit(request(team="nlp", command=("sleep", "30"))).external_id
    try:
        nlp_connection = mapped.account_connection("nlp")
        calls = (mapped.connection.calls, nlp_connection.calls)
        statuses = mapped.poll([vision, nlp, "999999", f"{second_account()['user']}:999998"])
        assert (mapped.connection.calls - calls[0], nlp_connection.calls - calls[1]) == (2, 2)
        assert statuses[vision].external_id == vision and ":" not in vision
        assert statuses[nlp].external_id == nlp
        assert {statuses[vision].state, statuses[nlp].state} <= {
            RemoteState.QUEUED,
            RemoteState.RUNNING,
        }
        assert statuses["999999"].state == RemoteState.LOST
    finally:
        mapped.cancel(vision, grace_s=0)
        mapped.cancel(nlp, grace_s=0)


# -- settings --------------------------------------------------------------------------------

HOST_KEY = (
    "[127.0.0.1]:2222 ssh-ed25519 "
    "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
)


def new_key() -> str:
    return (
        Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        .decode()
    )


KEY, OTHER_KEY = new_key(), new_key()


def settings(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": 2222,
        "user": "slurmuser",
        "private_key": KEY,
        "known_hosts": HOST_KEY,
    }
    base.update(overrides)
    return base


def backend_for(**overrides: Any) -> SlurmBackend:
    return create(ClusterConfig(id=1, name="c", kind="slurm", settings=settings(**overrides)))


def entry(**fields: Any) -> dict[str, Any]:
    return {"user": "nlpuser", "private_key": KEY, **fields}


INVALID = [
    pytest.param({"accounts": "nlpuser"}, "accounts: must map team slugs", id="not a mapping"),
    pytest.param({"accounts": ["nlp"]}, "accounts: must map team slugs", id="a list"),
    pytest.param(
        {"accounts": {"not a slug": entry()}}, "accounts.'not a slug': not a team slug", id="slug"
    ),
    pytest.param({"accounts": {"nlp": "nlpuser"}}, "accounts.nlp: must be a mapping", id="entry"),
    pytest.param(
        {"accounts": {"nlp": {"private_key": KEY}}}, "accounts.nlp.user: required", id="no user"
    ),
    pytest.param(
        {"accounts": {"nlp": entry(user="a:b")}},
        "accounts.nlp.user: 'a:b' is not a Unix user name",
        id="colon in user",
    ),
    pytest.param(
        {"accounts": {"nlp": entry(user="x; rm -rf ~")}},
        "accounts.nlp.user: 'x; rm -rf ~' is not a Unix user name",
        id="shell in user",
    ),
    pytest.param(
        {"accounts": {"nlp": entry(user=7)}},
        "accounts.nlp.user: 7 is not a Unix user name",
        id="user not a string",
    ),
    pytest.param(
        {"accounts": {"nlp": entry(user="slurmuser")}},
        "accounts.nlp.user: slurmuser is the cluster's own user",
        id="the cluster's user",
    ),
    pytest.param(
        {"accounts": {"nlp": {"user": "nlpuser"}}},
        "accounts.nlp: needs private_key or private_key_file",
        id="no key",
    ),
    pytest.param(
        {"accounts": {"nlp": entry(private_key=5)}},
        "accounts.nlp.private_key: must be a string",
        id="key not a string",
    ),
    pytest.param(
        {"accounts": {"nlp": entry(private_key="-----BEGIN nothing")}},
        "accounts.nlp.private_key: the private key could not be read",
        id="unreadable key",
    ),
    pytest.param(
        {"accounts": {"nlp": {"user": "nlpuser", "private_key_file": "/nonexistent/key"}}},
        "accounts.nlp.private_key_file: cannot read the private key file",
        id="missing key file",
    ),
    pytest.param(
        {"accounts": {"nlp": entry(privatekey=KEY)}},
        "accounts.nlp.privatekey: unknown setting",
        id="unknown setting",
    ),
    pytest.param(
        {"workdir": "/shared/gpuq", "accounts": {"nlp": entry()}},
        "accounts.nlp.workdir: required: the cluster's workdir /shared/gpuq is an absolute path",
        id="absolute cluster workdir",
    ),
    pytest.param(
        {"workdir": "/shared/gpuq", "accounts": {"nlp": entry(workdir="/shared/gpuq/")}},
        "accounts.nlp.workdir: is the cluster's own workdir",
        id="the cluster's workdir",
    ),
    pytest.param(
        {
            "accounts": {
                "vision": entry(user="visionuser", workdir="/shared/v"),
                "nlp": entry(workdir="/shared/v"),
            }
        },
        "accounts.nlp.workdir: is also accounts.vision's workdir",
        id="two users, one workdir",
    ),
    pytest.param(
        {"accounts": {"vision": entry(), "nlp": entry(private_key=OTHER_KEY)}},
        "accounts.nlp: user nlpuser is also accounts.vision's, with another key or workdir",
        id="one user, two keys",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), INVALID)
def test_invalid_accounts_are_permanent_errors_naming_the_entry(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(BackendError) as raised:
        backend_for(**overrides)
    assert raised.value.permanent
    assert raised.value.message.startswith(message), raised.value.message
    assert "PRIVATE KEY" not in raised.value.message and KEY not in raised.value.message


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({}, id="none"),
        pytest.param({"accounts": None}, id="null"),
        pytest.param({"accounts": {}}, id="empty"),
        pytest.param({"accounts": {"nlp": entry(), "vision": entry()}}, id="one user, two teams"),
        pytest.param(
            {"workdir": "/shared/gpuq", "accounts": {"nlp": entry(workdir="/shared/nlp")}},
            id="own absolute workdir",
        ),
        pytest.param({"accounts": {"nlp": entry(workdir="~/gpuq-nlp")}}, id="own home workdir"),
    ],
)
def test_valid_accounts_map_teams_to_users(overrides: dict[str, Any]) -> None:
    backend = backend_for(**overrides)
    mapped = {t: a.user for t, a in backend.settings.accounts.items()}
    assert mapped == dict.fromkeys(overrides.get("accounts") or {}, "nlpuser")
    assert "PRIVATE" not in repr(backend.settings)


def test_an_id_whose_account_left_the_settings_is_lost_and_cannot_be_stopped_or_read() -> None:
    """A job id names its account; once that account is gone from the settings, gpuq cannot
    reach the job: poll says so (LOST, with why), cancel and logs are permanent errors."""
    backend = backend_for(accounts={"nlp": entry()})
    status = backend.poll(["ghost:123"])["ghost:123"]
    assert status.state == RemoteState.LOST
    assert "ghost" in status.reason
    for call in (lambda: backend.cancel("ghost:123"), lambda: backend.logs("ghost:123")):
        with pytest.raises(BackendError, match="ghost is not in this cluster's accounts") as e:
            call()
        assert e.value.permanent
