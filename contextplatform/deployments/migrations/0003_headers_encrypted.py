"""A deployment's header values became write-only secrets, like its key: each value stored before
in plain text (``headers``) is encrypted into ``headers_encrypted`` ({name: Fernet token}), and the
plain column is dropped."""

from django.db import migrations, models


def encrypt_headers(apps, schema_editor):
    from contextplatform.core import secrets

    deployment_model = apps.get_model("deployments", "Deployment")
    for pk, headers in deployment_model.objects.values_list("pk", "headers"):
        if headers:
            tokens = {str(name): secrets.encrypt(str(value)) for name, value in headers.items()}
            deployment_model.objects.filter(pk=pk).update(headers_encrypted=tokens)


def decrypt_headers(apps, schema_editor):
    from contextplatform.core import secrets

    deployment_model = apps.get_model("deployments", "Deployment")
    for pk, tokens in deployment_model.objects.values_list("pk", "headers_encrypted"):
        if tokens:
            headers = {name: secrets.decrypt(token) for name, token in tokens.items()}
            deployment_model.objects.filter(pk=pk).update(headers=headers)


class Migration(migrations.Migration):
    dependencies = [("deployments", "0002_calibration")]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="headers_encrypted",
            field=models.JSONField(blank=True, default=dict, editable=False),
        ),
        migrations.RunPython(encrypt_headers, decrypt_headers),
        migrations.RemoveField(model_name="deployment", name="headers"),
    ]
