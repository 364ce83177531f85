from __future__ import annotations

import getpass
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants.admin_users import create_admin_user
from tenants.models import Tenant
from tenants.roles import ROLES, UnknownRoleError
from tenants.services import TenantError

PASSWORD_VARIABLE = "TENANT_USER_PASSWORD"
# Where the admin is served: `make run` serves on $PORT, 8000 unless set.
DEFAULT_PORT = 8000


class Command(BaseCommand):
    help = (
        "Create a staff user in a tenant's own admin with one role. The password comes from "
        f"--password, else ${PASSWORD_VARIABLE}, else a prompt."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant", help="tenant name")
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=sorted(ROLES))
        parser.add_argument("--password", help=f"else ${PASSWORD_VARIABLE}, else a prompt")
        parser.add_argument("--email", default="")
        parser.add_argument(
            "--port",
            type=int,
            help=f"the port the printed sign-in URL names (else $PORT, else {DEFAULT_PORT})",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(schema_name=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant named {options['tenant']!r}")
        password = options["password"] or os.environ.get(PASSWORD_VARIABLE) or prompted_password()
        try:
            create_admin_user(
                tenant=tenant,
                username=options["username"],
                password=password,
                role=options["role"],
                email=options["email"],
            )
        except (TenantError, UnknownRoleError) as error:
            raise CommandError(str(error)) from None
        self.stdout.write(
            f"user {options['username']} ({options['role']}) created; "
            f"sign in at {sign_in_url(tenant, options['port'])}"
        )


def sign_in_url(tenant: Tenant, port: int | None) -> str:
    """The tenant admin's URL on the port the server listens on (none written for 80)."""
    if port is None:
        port = int(os.environ.get("PORT") or DEFAULT_PORT)
    host = tenant.get_primary_domain().domain
    return f"http://{host}/admin/" if port == 80 else f"http://{host}:{port}/admin/"


def prompted_password() -> str:
    if not sys.stdin.isatty():
        raise CommandError(f"no password: pass --password or set ${PASSWORD_VARIABLE}")
    password = getpass.getpass("Password: ")
    if password != getpass.getpass("Password (again): "):
        raise CommandError("the passwords differ")
    if not password:
        raise CommandError("the password is empty")
    return password
