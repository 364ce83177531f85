"""Tenant admin users: a staff user in the tenant's own schema, holding one role."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction
from django_tenants.utils import schema_context

from tenants.models import Tenant
from tenants.roles import ROLES, UnknownRoleError, role_group
from tenants.services import TenantError


def create_admin_user(
    *, tenant: Tenant, username: str, password: str, role: str, email: str = ""
) -> AbstractBaseUser:
    """Raises TenantError (taken username, weak password) or UnknownRoleError; stores nothing then."""
    if role not in ROLES:
        raise UnknownRoleError(f"unknown role {role!r}: use one of {', '.join(ROLES)}")
    user_model = get_user_model()
    with schema_context(tenant.schema_name):
        if user_model.objects.filter(username=username).exists():
            raise TenantError(f"user {username!r} already exists in tenant {tenant.schema_name!r}")
        try:
            validate_password(password, user=user_model(username=username, email=email))
        except ValidationError as error:
            raise TenantError(" ".join(error.messages)) from None
        with transaction.atomic():
            user = user_model.objects.create_user(
                username=username, email=email, password=password, is_staff=True
            )
            user.groups.add(role_group(role))
    return user
