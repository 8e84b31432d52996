"""The demo (`manage.py gpuq_demo`, run by `make run`): two teams guaranteed 8 GPUs each of
the 16 training GPUs. Each team's ceiling on its nominal quotas (site staff's, in /admin) is
its share, so a team admin cannot raise her team's guarantee into the other team's."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.exceptions import ValidationError

from queue_service.clusters.models import Node
from queue_service.tenancy.models import Quota, Team
from queue_service.tenancy.services import set_quota

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def demo(settings: Any, tmp_path: Path) -> None:
    settings.BASE_DIR = tmp_path  # its credentials file goes to var/ there, not the checkout's
    settings.GPUQ_LOCAL_WORKDIR = tmp_path / "jobs"
    call_command("gpuq_demo", stdout=io.StringIO())


def test_the_demo_teams_nominal_ceilings_add_up_to_no_more_than_the_training_gpus(
    demo: None,
) -> None:
    training = sum(n.gpus for n in Node.objects.filter(pool="training"))
    ceilings = {t.slug: t.max_nominal_gpus for t in Team.objects.all()}
    nominal = {q.team.slug: q.nominal_gpus for q in Quota.objects.select_related("team")}
    assert sum(ceilings.values()) <= training, (ceilings, training)
    assert ceilings == nominal  # each team's ceiling is its share


def test_alice_cannot_raise_vision_to_the_whole_cluster(demo: None) -> None:
    from django.contrib.auth import get_user_model

    alice = get_user_model().objects.get(username="alice")
    vision = Team.objects.get(slug="vision")
    quota = Quota.objects.get(team=vision)

    with pytest.raises(ValidationError) as refused:
        set_quota(alice, vision, quota.gpu_model, {"nominal_gpus": 16, "borrowing_limit_gpus": 8})

    assert "nominal_gpus" in refused.value.detail
    quota.refresh_from_db()
    assert quota.nominal_gpus == 8
