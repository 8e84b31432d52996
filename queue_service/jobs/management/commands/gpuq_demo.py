"""Load the demo: two teams with quotas, users alice/bob (vision) and carol (language), a
staff user, and one local cluster of 2 nodes x 8 simulated GPUs plus a MIG node of 2 GPUs.
Idempotent: a second run changes nothing and prints the same credentials (kept in
var/demo-credentials.json)."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from queue_service.clusters.models import Cluster
from queue_service.jobs.dispatch import sync_cluster
from queue_service.tenancy.models import ApiToken, Membership, Quota, Team
from queue_service.tenancy.services import create_token, revoke_token

MODEL = "A100-SXM4-80GB"
USERS = [
    # username, team, role, staff
    ("alice", "vision", Membership.Role.ADMIN, False),
    ("bob", "vision", Membership.Role.MEMBER, False),
    ("carol", "language", Membership.Role.ADMIN, False),
    ("admin", None, None, True),
]


class Command(BaseCommand):
    help = "Load demo teams, users, quotas and a local cluster; print credentials."

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(settings.BASE_DIR) / "var" / "demo-credentials.json"
        creds: dict[str, dict[str, str]] = json.loads(path.read_text()) if path.exists() else {}
        with transaction.atomic():
            # Each team's ceiling on its nominal quotas (staff's, in /admin) is its share of
            # the 16 training GPUs: a team admin cannot raise her guarantee into the other's.
            teams = {
                slug: Team.objects.get_or_create(
                    slug=slug, defaults={"name": slug.title(), "max_nominal_gpus": 8}
                )[0]
                for slug in ("vision", "language")
            }
            Quota.objects.get_or_create(
                team=teams["vision"],
                gpu_model=MODEL,
                defaults={"nominal_gpus": 8, "borrowing_limit_gpus": 8},
            )
            Quota.objects.get_or_create(
                team=teams["language"],
                gpu_model=MODEL,
                defaults={"nominal_gpus": 8, "borrowing_limit_gpus": 4},
            )
            User = get_user_model()
            for username, team, role, staff in USERS:
                user = User.objects.filter(username=username).first()
                if user is None or username not in creds:
                    password = secrets.token_urlsafe(9)
                    user = user or User(username=username)
                    user.is_staff = user.is_superuser = staff
                    # For `notify:` (printed by the embedded mode's console mail backend).
                    user.email = user.email or f"{username}@example.org"
                    user.set_password(password)
                    user.save()
                    # A "demo" token of an earlier run: its key was in the lost file.
                    for stale in ApiToken.objects.filter(user=user, name="demo"):
                        revoke_token(user, stale.pk)
                    _, key = create_token(user, "demo")
                    creds[username] = {"password": password, "token": key}
                if team is not None:
                    Membership.objects.get_or_create(
                        user=user, team=teams[team], defaults={"role": role}
                    )
            cluster, _ = Cluster.objects.get_or_create(
                name="local",
                defaults={
                    "kind": Cluster.Kind.LOCAL,
                    "settings": {
                        "nodes": [
                            {"name": "node-1", "gpus": 8, "gpu_model": MODEL, "pool": "training"},
                            {"name": "node-2", "gpus": 8, "gpu_model": MODEL, "pool": "training"},
                            # MIG-enabled, no instances yet: the scheduler lays slices out
                            # for agent jobs as they come.
                            {
                                "name": "node-mig",
                                "gpus": 2,
                                "gpu_model": MODEL,
                                "pool": "inference",
                                "mig": True,
                            },
                        ]
                    },
                },
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(creds, indent=2))
        path.chmod(0o600)
        sync_cluster(cluster.pk)
        self.stdout.write("Demo users (password, API token):")
        for username, team, role, staff in USERS:
            c = creds[username]
            what = "site staff" if staff else f"{role} of {team}"
            self.stdout.write(
                f"  {username:6} {what:18} password={c['password']}  token={c['token']}"
            )
