from django.db import migrations

DEFAULTS = [
    ("high", 1000, False, "inference and agents: never preempted, runs within nominal quota only"),
    ("normal", 100, True, "the default"),
    ("low", 10, True, "spot-like: first to be preempted"),
]


def create(apps, schema_editor):
    PriorityClass = apps.get_model("jobs", "PriorityClass")
    for name, value, preemptible, description in DEFAULTS:
        PriorityClass.objects.get_or_create(
            name=name,
            defaults={"value": value, "preemptible": preemptible, "description": description},
        )


class Migration(migrations.Migration):
    dependencies = [("jobs", "0001_initial")]
    operations = [migrations.RunPython(create, migrations.RunPython.noop)]
