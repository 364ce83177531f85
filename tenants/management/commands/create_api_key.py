from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants.models import Tenant
from tenants.scopes import ALL_SCOPES, UnknownScopeError
from tenants.services import issue_api_key


class Command(BaseCommand):
    help = "Mint an API key for a tenant with the given scopes and print it once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant", help="tenant name")
        parser.add_argument(
            "--scopes",
            default=",".join(ALL_SCOPES),
            help=f"comma-separated, of: {', '.join(ALL_SCOPES)}",
        )
        parser.add_argument("--name", default="default", help="a label for the key")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(schema_name=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant named {options['tenant']!r}")
        try:
            issued = issue_api_key(tenant=tenant, scopes=options["scopes"], name=options["name"])
        except UnknownScopeError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"scopes: {','.join(issued.api_key.scopes)}")
        self.stdout.write("API key (shown once, store it now):")
        self.stdout.write(issued.plain_key)
