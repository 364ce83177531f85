"""A deployment's requests and tokens a minute (``limits``: {"rpm": n, "tpm": n}), enforced by
the gateway."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("deployments", "0004_price")]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="limits",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
