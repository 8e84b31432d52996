"""Accounts are polled apart (docs/slurm.md: each team's jobs are followed "as that user, about
its own jobs only, over a pinned connection of its own"). One account that cannot be read (its
key rotated on the cluster, the Unix account locked or expired) leaves its own jobs unread and
no one else's: poll() raises a PartialPoll that carries every other account's statuses and
names the account that failed; sync_cluster follows those and shows the error as the
cluster's sync error (tests/service/test_sync_reads_the_accounts_it_can.py)."""

from __future__ import annotations

import uuid

import pytest

from queue_service.backends.base import BackendError, PartialPoll, RemoteState

from .conftest import lab_backend, request, second_account, wait_for


def _new_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return (
        Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        .decode()
    )


@pytest.mark.slurm
def test_one_teams_unreachable_account_does_not_stop_other_teams_jobs_being_read(
    slurm_lab: None,
) -> None:
    """A backend of its own (the shared `backend` fixture's `scancel -u` would stop others'
    jobs on the lab); team nlp's account has a key the cluster does not know."""
    user2 = second_account()["user"]
    backend = lab_backend(accounts={"nlp": {"user": user2, "private_key": _new_key()}})
    try:
        vision = backend.submit(request(team="vision", command=("true",))).external_id
        assert wait_for(backend, vision).state == RemoteState.SUCCEEDED
        nlp = f"{user2}:999997@{uuid.uuid4()}.1"  # a job of the team whose account is broken

        with pytest.raises(PartialPoll) as raised:
            backend.poll([vision, nlp])

        assert raised.value.statuses[vision].state == RemoteState.SUCCEEDED
        assert nlp not in raised.value.statuses  # unknown: neither ended nor lost
        assert user2 in raised.value.message
        assert raised.value.permanent  # its login is refused: only an operator mends it
        # Alone, the account's error is raised as it is.
        with pytest.raises(BackendError) as alone:
            backend.poll([nlp])
        assert not isinstance(alone.value, PartialPoll)
    finally:
        backend.close()
