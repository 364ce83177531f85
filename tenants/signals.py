"""Keys and domains kept per process (``tenants.selectors``) are dropped in every process when one
of them is saved or deleted; a tenant saved or deleted drops every cache of every process (what
the apps keep per tenant schema included, and a key's or domain's copy carries its tenant)."""

from __future__ import annotations

from contextplatform.core.config_cache import EVERY_CACHE, drop_on_change
from tenants.models import ApiKey, Domain, Tenant, TenantApiKey
from tenants.selectors import API_KEYS, DOMAINS


def connect() -> None:
    # The tenant admin's proxy saves send signals of their own sender: a key revoked there is
    # dropped as one revoked through the API.
    drop_on_change(API_KEYS, ApiKey, TenantApiKey)
    drop_on_change(DOMAINS, Domain)
    drop_on_change(EVERY_CACHE, Tenant)
