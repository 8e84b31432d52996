"""`manage.py gpuq_demo` prints each demo user's password and API token, kept in
var/demo-credentials.json. Run again after that file was lost, it makes new ones; a user's
token names are unique (one "demo" token each), so the lost key's token goes, and the key it
prints is the one that works."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from queue_service.tenancy.models import ApiToken

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_demo_run_again_without_its_credentials_gives_one_working_token_each(
    settings: Any, tmp_path: Path
) -> None:
    settings.BASE_DIR = tmp_path
    settings.GPUQ_LOCAL_WORKDIR = tmp_path / "jobs"
    credentials = tmp_path / "var" / "demo-credentials.json"
    call_command("gpuq_demo", stdout=io.StringIO())
    credentials.unlink()

    call_command("gpuq_demo", stdout=io.StringIO())

    keys = {user: c["token"] for user, c in json.loads(credentials.read_text()).items()}
    for user, key in keys.items():
        tokens = ApiToken.objects.filter(user__username=user)
        assert [t.name for t in tokens] == ["demo"]
        assert tokens.get().key_hash == ApiToken.hash_key(key)
