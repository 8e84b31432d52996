"""Local clusters without a `workdir` of their own kept their jobs in GPUQ_LOCAL_WORKDIR/<name>
before; new ones use GPUQ_LOCAL_WORKDIR/cluster.<id>, which a rename does not move. Those
that exist keep the directory their running jobs are in, now named in their settings."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import migrations


def pin_by_name_workdirs(apps: Any, schema_editor: Any) -> None:
    Cluster = apps.get_model("clusters", "Cluster")
    for cluster in Cluster.objects.filter(kind="local"):
        options = cluster.settings
        if isinstance(options, dict) and not options.get("workdir"):
            workdir = str(settings.GPUQ_LOCAL_WORKDIR / cluster.name)
            cluster.settings = {**options, "workdir": workdir}
            cluster.save(update_fields=["settings"])


class Migration(migrations.Migration):
    dependencies = [
        ("clusters", "0003_node_cpus_memory"),
    ]

    operations = [
        # Backwards: the pinned directory is what the earlier code used anyway.
        migrations.RunPython(pin_by_name_workdirs, migrations.RunPython.noop),
    ]
