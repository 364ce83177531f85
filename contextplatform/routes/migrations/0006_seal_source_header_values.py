"""Header values of sources (an external API backend's, a realtime_apis connector's) became
write-only secrets: the values stored before in plain text in routes, recipes and the tenant
defaults are encrypted here (``sources.secret_settings.seal_plain``), stored tokens left as they
are. Rows are read either way, so the migration may run after the new code is serving."""

from django.db import migrations


def seal_plain_header_values(apps, schema_editor):
    from sources import secret_settings

    for model_name in ("Route", "Recipe", "TenantDefaults"):
        model = apps.get_model("routing", model_name)
        for pk, context in model.objects.values_list("pk", "context"):
            sealed, count = secret_settings.seal_plain(context)
            if count:
                model.objects.filter(pk=pk).update(context=sealed)


class Migration(migrations.Migration):
    dependencies = [("routing", "0005_replay_tool_calls")]

    operations = [
        migrations.RunPython(seal_plain_header_values, migrations.RunPython.noop, elidable=True)
    ]
