"""Re-encrypt every tenant's MCP server header values under the newest key of
DEPLOYMENT_SECRET_KEYS (run it beside rotate_deployment_keys)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django_tenants.utils import get_public_schema_name, schema_context

from contextplatform.core.errors import ApiError
from sources.mcp.services import rotate_header_keys
from tenants.models import Tenant


class Command(BaseCommand):
    help = (
        "Re-encrypt the header values of every tenant's MCP servers with the first (newest) key "
        "of DEPLOYMENT_SECRET_KEYS. Run it after prepending a new key, beside "
        "rotate_deployment_keys; drop the old key afterwards."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        tenants = Tenant.objects.exclude(schema_name=get_public_schema_name()).order_by(
            "schema_name"
        )
        total = 0
        for tenant in tenants:
            with schema_context(tenant.schema_name):
                try:
                    rotated = rotate_header_keys()
                except ApiError as error:  # each tenant rotates in its own transaction
                    raise CommandError(f"tenant {tenant.schema_name}: {error.message}") from None
            total += rotated
            self.stdout.write(f"{tenant.schema_name}: {rotated} MCP server(s) re-encrypted")
        self.stdout.write(f"done: {total} MCP server(s) re-encrypted with the newest key")
