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
        domain = tenant.get_primary_domain()
        self.stdout.write(
            f"user {options['username']} ({options['role']}) created; "
            f"sign in at http://{domain}/admin/"
        )


def prompted_password() -> str:
    if not sys.stdin.isatty():
        raise CommandError(f"no password: pass --password or set ${PASSWORD_VARIABLE}")
    password = getpass.getpass("Password: ")
    if password != getpass.getpass("Password (again): "):
        raise CommandError("the passwords differ")
    if not password:
        raise CommandError("the password is empty")
    return password
