from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("routing", "0008_route_version"),
    ]

    operations = [
        migrations.AddField(
            model_name="replayrecord",
            name="input_tokens",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="replayrecord",
            name="output_tokens",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="replayrecord",
            name="cached_input_tokens",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="replayrecord",
            name="cache_write_tokens",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="replayrecord",
            name="cost_usd",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="replayrecord",
            name="deployment",
            field=models.CharField(blank=True, default="", max_length=100),
        ),
        migrations.AddField(
            model_name="replayrecord",
            name="key_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="replayrecord",
            name="call_ms",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="replayrecord",
            index=models.Index(fields=["created_at", "route"], name="replay_spend_time"),
        ),
    ]
