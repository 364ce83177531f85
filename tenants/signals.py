"""Keys, tenants and domains kept per process (``tenants.selectors``) are dropped in every
process when one of them is saved or deleted."""

from __future__ import annotations

from contextplatform.core.config_cache import drop_on_change
from tenants.models import ApiKey, Domain, Tenant
from tenants.selectors import API_KEYS, DOMAINS


def connect() -> None:
    drop_on_change(API_KEYS, ApiKey, Tenant)  # a key's cached copy carries its tenant
    drop_on_change(DOMAINS, Domain, Tenant)
