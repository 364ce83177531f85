from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="memory",
            name="observed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
