"""The frame of every secret-rotation command: each tenant's schema in turn, its own rotation (in
its own transaction), a line per tenant and a total. The secrets differ (deployment keys, MCP
header values, source settings' secrets); walking the tenants does not."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from django.core.management.base import BaseCommand, CommandError
from django_tenants.utils import get_public_schema_name, schema_context

from contextplatform.core.errors import ApiError
from tenants.models import Tenant


class RotateSecretsCommand(BaseCommand):
    """Subclasses name what they re-encrypt (``what``, e.g. "key(s)") and how (``rotate``: the
    tenant's rotation, run in its schema, returning how many it re-encrypted)."""

    what: ClassVar[str] = "secret(s)"

    def rotate(self) -> int:
        raise NotImplementedError

    def handle(self, *args: Any, **options: Any) -> None:
        tenants = Tenant.objects.exclude(schema_name=get_public_schema_name()).order_by(
            "schema_name"
        )
        total = 0
        for tenant in tenants:
            with schema_context(tenant.schema_name):
                try:
                    rotated = self.rotate()
                except ApiError as error:  # each tenant rotates in its own transaction
                    raise CommandError(f"tenant {tenant.schema_name}: {error.message}") from None
            total += rotated
            self.stdout.write(f"{tenant.schema_name}: {rotated} {self.what} re-encrypted")
        self.stdout.write(f"done: {total} {self.what} re-encrypted with the newest key")


def rotation_command(rotate: Callable[[], int], what: str, help_text: str) -> type[BaseCommand]:
    """A management command class that rotates with ``rotate`` in every tenant."""

    class Command(RotateSecretsCommand):
        help = help_text

        def rotate(self) -> int:
            return rotate()

    Command.what = what
    return Command
