from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("deployments", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="calibration",
            field=models.FloatField(
                blank=True,
                editable=False,
                help_text="provider tokens per estimated token",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="deployment",
            name="calibration_samples",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
    ]
