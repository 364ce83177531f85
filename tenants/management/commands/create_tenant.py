from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contextplatform.core.outbound.policy import ENTRY_FORMS
from tenants.services import TenantError, create_tenant


class Command(BaseCommand):
    help = "Create a tenant (its own PostgreSQL schema) and print its first API key (all scopes)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="lowercase letters, digits and _; also the schema name")
        parser.add_argument("--domain", help="admin host, default NAME.localhost")
        parser.add_argument(
            "--capture-content", action="store_true", help="store raw messages in replay records"
        )
        parser.add_argument(
            "--allow",
            action="extend",
            nargs="+",
            default=[],
            metavar="ENTRY",
            help=f"outbound allow-list entries: {ENTRY_FORMS} (see set_allowlist)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            tenant, issued = create_tenant(
                name=options["name"],
                domain=options["domain"],
                capture_content=options["capture_content"],
                outbound_allowlist=options["allow"],
            )
        except TenantError as error:
            raise CommandError(str(error)) from None
        domain = tenant.get_primary_domain()
        self.stdout.write(
            f"tenant: {tenant.name} (schema {tenant.schema_name}, admin host {domain})"
        )
        if tenant.outbound_allowlist:
            self.stdout.write(f"outbound allow-list: {' '.join(tenant.outbound_allowlist)}")
        self.stdout.write(f"scopes: {','.join(issued.api_key.scopes)}")
        self.stdout.write("API key (shown once, store it now):")
        self.stdout.write(issued.plain_key)
