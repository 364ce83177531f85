"""Writes for tenants and keys: create a tenant with its domain and first key, mint and revoke keys."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from contextplatform.core.outbound.policy import validate_allowlist
from tenants.models import ApiKey, Domain, Tenant
from tenants.scopes import ALL_SCOPES, parse_scopes

KEY_PREFIX = "cp_"
TENANT_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
RESERVED_NAMES = {"public", "pg_catalog", "information_schema"}


class TenantError(ValueError):
    pass


@dataclass(frozen=True)
class IssuedKey:
    api_key: ApiKey
    plain_key: str


def hash_key(plain_key: str) -> str:
    # Keys carry 256 bits of randomness, so a fast hash is enough to make a leaked table useless.
    return hashlib.sha256(plain_key.encode()).hexdigest()


def issue_api_key(
    *,
    tenant: Tenant,
    scopes: list[str] | str | None = None,
    name: str = "default",
    plain_key: str | None = None,
) -> IssuedKey:
    """A new key for the tenant: random, or ``plain_key`` when the operator chose it (the demo's
    ``DEMO_API_KEY``); only its hash is stored."""
    scope_list = list(ALL_SCOPES) if scopes is None else parse_scopes(scopes)
    plain = plain_key or KEY_PREFIX + secrets.token_urlsafe(32)
    api_key = ApiKey.objects.create(
        tenant=tenant,
        name=name,
        prefix=plain[:10],
        key_hash=hash_key(plain),
        scopes=scope_list,
    )
    return IssuedKey(api_key=api_key, plain_key=plain)


PLAYGROUND_KEY_NAME = "admin playground"


def playground_key(tenant: Tenant) -> ApiKey:
    """The key the tenant admin's playground calls the gateway with: scope ``resolve`` only, its
    plain text never kept (the page hands the key object itself to the call), so its calls count
    as one key's, limits and spend included, like an application's."""
    existing = (
        ApiKey.objects.filter(tenant=tenant, name=PLAYGROUND_KEY_NAME, revoked_at__isnull=True)
        .order_by("created_at")
        .first()
    )
    if existing is not None:
        return existing
    return issue_api_key(tenant=tenant, scopes=["resolve"], name=PLAYGROUND_KEY_NAME).api_key


def revoke_api_key(*, api_key: ApiKey) -> None:
    api_key.revoked_at = timezone.now()
    api_key.save(update_fields=["revoked_at"])


def checked_allowlist(entries: Sequence[str]) -> list[str]:
    """The outbound allow-list as given, each entry checked (TenantError naming the bad ones)."""
    try:
        return validate_allowlist(list(entries))
    except ValueError as error:
        raise TenantError(f"invalid outbound allow-list: {error}") from None


def set_outbound_allowlist(*, tenant: Tenant, entries: Sequence[str]) -> Tenant:
    """Replace the tenant's outbound allow-list (no entry clears it). Saved, not updated: the
    save's signal drops what every process kept of the tenant, its list included."""
    tenant.outbound_allowlist = checked_allowlist(entries)
    tenant.save(update_fields=["outbound_allowlist"])
    return tenant


def create_tenant(
    *,
    name: str,
    domain: str | None = None,
    capture_content: bool = False,
    outbound_allowlist: Sequence[str] = (),
) -> tuple[Tenant, IssuedKey]:
    """Create the tenant's schema (migrated), its admin host ``NAME.localhost`` and a key with all scopes."""
    if not TENANT_NAME_PATTERN.match(name) or name in RESERVED_NAMES or name.startswith("pg_"):
        raise TenantError(
            f"invalid tenant name {name!r}: use lowercase letters, digits and _ (start with a letter)"
        )
    allowlist = checked_allowlist(outbound_allowlist)
    if Tenant.objects.filter(schema_name=name).exists():
        raise TenantError(f"tenant {name!r} already exists")
    with transaction.atomic():
        tenant = Tenant(
            schema_name=name,
            name=name,
            capture_content=capture_content,
            outbound_allowlist=allowlist,
        )
        tenant.save()
        Domain.objects.create(domain=domain or f"{name}.localhost", tenant=tenant, is_primary=True)
        issued = issue_api_key(tenant=tenant, name="initial")
    return tenant, issued
