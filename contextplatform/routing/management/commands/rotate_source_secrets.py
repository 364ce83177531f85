"""Re-encrypt the secrets of every tenant's source settings (routes, recipes, tenant defaults)
under the newest key of DEPLOYMENT_SECRET_KEYS."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django_tenants.utils import get_public_schema_name, schema_context

from contextplatform.core.errors import ApiError
from contextplatform.routing.services import rotate_source_secrets
from tenants.models import Tenant


class Command(BaseCommand):
    help = (
        "Re-encrypt the secrets stored in every tenant's source settings (a Milvus token, a "
        "Qdrant or OpenAI api_key) with the first (newest) key of DEPLOYMENT_SECRET_KEYS. Run it "
        "with rotate_deployment_keys after prepending a new key; drop the old key afterwards."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        tenants = Tenant.objects.exclude(schema_name=get_public_schema_name()).order_by(
            "schema_name"
        )
        total = 0
        for tenant in tenants:
            with schema_context(tenant.schema_name):
                try:
                    rotated = rotate_source_secrets()
                except ApiError as error:  # each tenant rotates in its own transaction
                    raise CommandError(f"tenant {tenant.schema_name}: {error.message}") from None
            total += rotated
            self.stdout.write(f"{tenant.schema_name}: {rotated} source secret(s) re-encrypted")
        self.stdout.write(f"done: {total} source secret(s) re-encrypted with the newest key")
