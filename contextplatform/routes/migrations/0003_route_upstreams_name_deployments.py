"""A route's ``model.upstream`` names a deployment: each stored inline upstream object (the first
version's ``{"url", "model", "api_key_env", "timeout_ms"}``) becomes a deployment of the route's
own, ``<route>-upstream``, exactly as a route written with one today (routes.services)."""

from django.db import migrations


def inline_upstreams_to_deployments(apps, schema_editor):
    from pydantic import ValidationError

    from contextplatform.core import secrets
    from contextplatform.deployments.schema import DeploymentSpec
    from contextplatform.routes.configuration.schema import UpstreamConfig

    Route = apps.get_model("routing", "Route")
    Deployment = apps.get_model("deployments", "Deployment")
    for route in Route.objects.all():
        model = dict(route.model or {})
        upstream = model.get("upstream")
        if not isinstance(upstream, dict):
            continue
        try:
            legacy = UpstreamConfig.model_validate(upstream)
            spec = DeploymentSpec.model_validate(legacy.deployment_data(route.name, model))
        except ValidationError:
            model["upstream"] = None  # it could never be called; the route keeps working
        else:
            Deployment.objects.update_or_create(
                name=spec.name,
                defaults={
                    "protocol": spec.protocol,
                    "base_url": spec.base_url,
                    "model": spec.model,
                    "api_key_encrypted": secrets.encrypt(spec.api_key) if spec.api_key else "",
                    "timeout_ms": spec.timeout_ms,
                    "context_window": spec.context_window,
                    "max_output_tokens": spec.max_output_tokens,
                },
            )
            model["upstream"] = spec.name
        route.model = model
        route.save(update_fields=["model"])


class Migration(migrations.Migration):
    dependencies = [
        ("routing", "0002_recipes_and_tenant_defaults"),
        ("deployments", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(inline_upstreams_to_deployments, migrations.RunPython.noop),
    ]
