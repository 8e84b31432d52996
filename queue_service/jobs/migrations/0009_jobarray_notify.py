from __future__ import annotations

from typing import Any

from django.db import migrations, models


def fill(apps: Any, schema_editor: Any) -> None:
    """Each array's notify as submitted: its first task's, before any update of it (all its
    tasks were stored with the same)."""
    JobArray = apps.get_model("jobs", "JobArray")
    Job = apps.get_model("jobs", "Job")
    JobEvent = apps.get_model("jobs", "JobEvent")
    for array in JobArray.objects.iterator():
        task = Job.objects.filter(array=array).order_by("array_index").first()
        if task is None:
            continue
        notify = task.spec.get("notify")
        for event in JobEvent.objects.filter(job=task, code="updated").order_by("at", "id"):
            if "notify" in (event.details or {}):
                notify = event.details["notify"][0]
                break
        JobArray.objects.filter(pk=array.pk).update(notify=list(notify or ()))


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0008_notification_dedupe_key"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobarray",
            name="notify",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
