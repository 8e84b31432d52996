from django.conf import settings
from django.db import migrations, models
from django.db.models import Count

NAME_MAX = 64


def rename_duplicates(apps, schema_editor):
    """A user's tokens of one name keep working: the first made keeps the name, each later one
    takes the first free "name (2)", "name (3)", … (cut to fit the name's 64 characters)."""
    ApiToken = apps.get_model("tenancy", "ApiToken")
    users = (
        ApiToken.objects.order_by()  # the model's ordering would join the GROUP BY
        .values("user_id", "name")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .values_list("user_id", flat=True)
        .distinct()
    )
    for user_id in users:
        tokens = list(ApiToken.objects.filter(user_id=user_id).order_by("created_at", "id"))
        taken = {t.name for t in tokens}
        seen = set()
        for token in tokens:
            if token.name not in seen:
                seen.add(token.name)
                continue
            number = 2
            while True:
                suffix = f" ({number})"
                name = token.name[: NAME_MAX - len(suffix)] + suffix
                if name not in taken:
                    break
                number += 1
            taken.add(name)
            seen.add(name)
            ApiToken.objects.filter(pk=token.pk).update(name=name)


class Migration(migrations.Migration):
    dependencies = [
        ("tenancy", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunPython(rename_duplicates, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="apitoken",
            constraint=models.UniqueConstraint(fields=("user", "name"), name="token_name_per_user"),
        ),
    ]
