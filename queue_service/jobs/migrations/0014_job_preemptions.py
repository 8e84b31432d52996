from django.db import migrations, models
from django.db.models import Count, OuterRef, Subquery


def count_preemptions(apps, schema_editor):
    """Each job preempted before the upgrade takes its count from its events to preempting,
    which the cycle counted until then."""
    Job = apps.get_model("jobs", "Job")
    JobEvent = apps.get_model("jobs", "JobEvent")
    preempting = JobEvent.objects.filter(to_state="preempting")
    counts = (
        preempting.filter(job=OuterRef("pk"))
        .order_by()
        .values("job")
        .annotate(n=Count("id"))
        .values("n")
    )
    Job.objects.filter(pk__in=preempting.values("job")).update(preemptions=Subquery(counts))


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0013_jobrun_external_id"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="preemptions",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunPython(count_preemptions, migrations.RunPython.noop),
    ]
