from django.db import migrations, models
from django.db.models import F

STOPPING = ("preempting", "cancelling", "suspending")


def from_updated_at(apps, schema_editor):  # type: ignore[no-untyped-def]
    # Jobs being stopped now: their last write is the best known start of their stop.
    Job = apps.get_model("jobs", "Job")
    Job.objects.filter(state__in=STOPPING).update(stopping_since=F("updated_at"))


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0009_jobarray_notify"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="stopping_since",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(from_updated_at, migrations.RunPython.noop),
    ]
