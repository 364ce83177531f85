"""Reads for tenants and keys. Both are read by every request and kept per process
(``contextplatform.core.config_cache``); ``tenants.signals`` drops them when keys, tenants or
domains change."""

from __future__ import annotations

from contextplatform.core.config_cache import ProcessCache
from tenants.models import ApiKey, Domain, Tenant
from tenants.services import hash_key

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
    return _active_keys.get(key_hash, lambda: _read_active_key(key_hash))


def kept_active_key(plain_key: str | None) -> ApiKey | None:
    """``active_api_key`` as this process keeps it, without a database read: the key when it is
    kept and active, ``None`` when it is not kept (yet) or not active. Safe on the event loop."""
    if not plain_key:
        return None
    found, api_key = _active_keys.peek(hash_key(plain_key))
    return api_key if found else None


def _read_active_key(key_hash: str) -> ApiKey | None:
    return (
        ApiKey.objects.select_related("tenant")
        .filter(key_hash=key_hash, revoked_at__isnull=True)
        .first()
    )


def tenant_for_host(hostname: str) -> Tenant | None:
    """The tenant whose admin site ``hostname`` is (shared like ``active_api_key``'s)."""
    return _host_tenants.get(hostname, lambda: _read_host_tenant(hostname))


def _read_host_tenant(hostname: str) -> Tenant | None:
    domain = Domain.objects.select_related("tenant").filter(domain=hostname).first()
    return domain.tenant if domain is not None else None
