from django.db import migrations, models

# Records written before the columns: their provider usage (kept in ``tokens``) and the
# deployment that answered into the columns, so spend over a period counts their tokens. Their
# cost stays unknown (null): the price they were called at was not recorded.
BACKFILL = """
UPDATE routing_replayrecord SET
    input_tokens = COALESCE((tokens -> 'provider' ->> 'input')::integer, 0),
    output_tokens = COALESCE((tokens -> 'provider' ->> 'output')::integer, 0),
    cached_input_tokens = COALESCE((tokens -> 'provider' ->> 'cached_input')::integer, 0),
    cache_write_tokens = COALESCE((tokens -> 'provider' ->> 'cache_write')::integer, 0),
    deployment = LEFT(COALESCE(tokens ->> 'answered_by', tokens ->> 'deployment', ''), 100)
WHERE jsonb_typeof(tokens -> 'provider') = 'object'
"""


class Migration(migrations.Migration):
    dependencies = [
        ("routing", "0009_stored_responses"),
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
        migrations.RunSQL(BACKFILL, reverse_sql=migrations.RunSQL.noop),
    ]
