"""Reads for tenants and keys. Both are read by every request and kept per process
(``contextplatform.core.config_cache``); ``tenants.signals`` drops them when keys, tenants or
domains change."""

from __future__ import annotations

from decimal import Decimal
from typing import TypeVar

from django.db.models import Q, QuerySet

from contextplatform.core.config_cache import ProcessCache
from tenants.models import ApiKey, Domain, KeySpend, Tenant, period_start
from tenants.services import hash_key

K = TypeVar("K", bound=ApiKey)

API_KEYS = "api_keys"
DOMAINS = "domains"
_active_keys: ProcessCache[str, ApiKey | None] = ProcessCache(API_KEYS)
_host_tenants: ProcessCache[str, Tenant | None] = ProcessCache(DOMAINS)


def active_api_key(plain_key: str) -> ApiKey | None:
    """The key (with its tenant) that ``plain_key`` is, unless revoked. The instance is shared by
    the requests of this process: read it, never change it."""
    if not plain_key:
        return None
    key_hash = hash_key(plain_key)
    api_key = _active_keys.get(key_hash, lambda: _read_active_key(key_hash))
    # Kept until it changes, but an expiry needs no change: checked at every use.
    return None if api_key is None or api_key.expired() else api_key


def kept_active_key(plain_key: str | None) -> ApiKey | None:
    """``active_api_key`` as this process keeps it, without a database read: the key when it is
    kept and active, ``None`` when it is not kept (yet) or not active. Safe on the event loop."""
    if not plain_key:
        return None
    found, api_key = _active_keys.peek(hash_key(plain_key))
    return api_key if found and api_key is not None and not api_key.expired() else None


def _read_active_key(key_hash: str) -> ApiKey | None:
    # An expired key is kept too (``active_api_key`` refuses it): it may not be expired yet.
    return (
        ApiKey.objects.select_related("tenant")
        .filter(key_hash=key_hash, revoked_at__isnull=True)
        .first()
    )


def tenant_keys(tenant: Tenant, model: type[K] = ApiKey) -> QuerySet[K]:  # type: ignore[assignment]
    """Every key of ``tenant``, revoked and expired ones included: the one place the tenant's own
    key management (the API and the tenant admin, through its proxy ``model``) reads keys from,
    so none ever reaches another tenant's."""
    return model.objects.filter(tenant=tenant).order_by("created_at", "pk")


def tenant_key(tenant: Tenant, public_id: str) -> ApiKey | None:
    """The key ``key_<n>`` of ``tenant``; None when it is not one of the tenant's."""
    number = public_id.removeprefix("key_")
    if number == public_id or not number.isdigit() or len(number) > 18:
        return None
    return tenant_keys(tenant).filter(pk=int(number)).first()


def current_spend(api_keys: list[ApiKey]) -> dict[int, tuple[int, Decimal]]:
    """What each key has spent in its current budget period: key id → (tokens, USD)."""
    wanted = Q(pk__in=[])
    for api_key in api_keys:
        wanted |= Q(key_id=api_key.pk, period_start=period_start(api_key.budget_period))
    return {
        row["key_id"]: (row["spent_tokens"], row["spent_usd"])
        for row in KeySpend.objects.filter(wanted).values("key_id", "spent_tokens", "spent_usd")
    }


def tenant_for_host(hostname: str) -> Tenant | None:
    """The tenant whose admin site ``hostname`` is (shared like ``active_api_key``'s)."""
    return _host_tenants.get(hostname, lambda: _read_host_tenant(hostname))


def _read_host_tenant(hostname: str) -> Tenant | None:
    domain = Domain.objects.select_related("tenant").filter(domain=hostname).first()
    return domain.tenant if domain is not None else None


def admins_signing_in(username: str, password: str, *, other_than: str) -> list[str]:
    """The hosts whose admin this username and password sign in to, other than the schema
    ``other_than``'s: a tenant's primary domain, or "the platform host" for the public schema.

    A tenant's users live only in their tenant's schema, so a sign-in on another host is refused
    by the host's own backend; this tells the person where the account is. Only credentials that
    match (an active staff user's password) name a host: the refusal never lists who has which
    user name. One statement reads every schema's row of that user name."""
    from django.contrib.auth.hashers import check_password
    from django.db import connection

    schemas = list(
        Tenant.objects.exclude(schema_name=other_than)
        .order_by("schema_name")
        .values_list("schema_name", flat=True)
    )
    if not schemas:
        return []
    quote = connection.ops.quote_name
    statement = " UNION ALL ".join(
        f"SELECT %s, password FROM {quote(schema)}.auth_user "
        "WHERE username = %s AND is_active AND is_staff"
        for schema in schemas
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, [value for schema in schemas for value in (schema, username)])
        matched = [
            schema for schema, encoded in cursor.fetchall() if check_password(password, encoded)
        ]
    if not matched:
        return []
    domains = dict(
        Domain.objects.filter(tenant__schema_name__in=matched, is_primary=True).values_list(
            "tenant__schema_name", "domain"
        )
    )
    return [
        "the platform host" if schema == "public" else domains.get(schema, f"{schema}'s host")
        for schema in matched
    ]
