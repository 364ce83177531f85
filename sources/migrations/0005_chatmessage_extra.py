from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("sources", "0004_collection_judge_calibration")]

    operations = [
        migrations.AddField(
            model_name="chatmessage",
            name="extra",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
