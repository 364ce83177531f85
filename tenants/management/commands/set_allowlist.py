from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contextplatform.core.outbound.policy import ENTRY_FORMS
from tenants.models import Tenant
from tenants.services import TenantError, set_outbound_allowlist


class Command(BaseCommand):
    help = (
        "Replace a tenant's outbound allow-list: the private, loopback or link-local hosts its "
        "outbound calls may reach (anything else must be a public address). No entry clears it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant", help="tenant name")
        parser.add_argument(
            "entries",
            nargs="*",
            metavar="ENTRY",
            help=f"{ENTRY_FORMS}; host:port allows that port only",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(schema_name=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant named {options['tenant']!r}")
        try:
            set_outbound_allowlist(tenant=tenant, entries=options["entries"])
        except TenantError as error:
            raise CommandError(str(error)) from None
        entries = " ".join(tenant.outbound_allowlist) or "(empty: public addresses only)"
        self.stdout.write(f"{tenant.name}: outbound allow-list {entries}")
