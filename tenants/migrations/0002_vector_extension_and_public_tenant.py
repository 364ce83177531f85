"""The ``vector`` extension lives in ``public`` (a shared-app migration, never a tenant one), and the
public tenant row that django-tenants needs for the platform host."""

from django.db import migrations
from pgvector.django import VectorExtension


def create_public_tenant(apps, schema_editor):
    Tenant = apps.get_model("tenants", "Tenant")
    Tenant.objects.get_or_create(schema_name="public", defaults={"name": "public"})


class Migration(migrations.Migration):
    dependencies = [("tenants", "0001_initial")]

    operations = [
        VectorExtension(),
        migrations.RunPython(create_public_tenant, migrations.RunPython.noop),
    ]
