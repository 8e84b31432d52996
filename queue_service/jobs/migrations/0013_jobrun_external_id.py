from django.db import migrations, models
from django.db.models import F, OuterRef, Subquery


def name_open_attempts(apps, schema_editor):
    """Runs of an attempt still on its cluster take its id from the job (older attempts'
    ids were cleared when they ended: their logs stay unread, as before)."""
    Job = apps.get_model("jobs", "Job")
    JobRun = apps.get_model("jobs", "JobRun")
    JobRun.objects.filter(attempt=F("job__attempts")).exclude(job__external_id="").update(
        external_id=Subquery(Job.objects.filter(pk=OuterRef("job_id")).values("external_id")[:1])
    )


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0012_array_look"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobrun",
            name="external_id",
            field=models.CharField(blank=True, default="", max_length=256),
        ),
        migrations.RunPython(name_open_attempts, migrations.RunPython.noop),
    ]
