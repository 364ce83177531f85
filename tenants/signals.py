"""Keys, tenants and domains kept per process (``tenants.selectors``) are dropped in every
process when one of them is saved or deleted."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save

from contextplatform.core.config_cache import changed
from tenants.models import ApiKey, Domain, Tenant
from tenants.selectors import API_KEYS, DOMAINS


def keys_changed(sender: type, using: str = "default", **kwargs: Any) -> None:
    changed(API_KEYS, using)


def domains_changed(sender: type, using: str = "default", **kwargs: Any) -> None:
    changed(DOMAINS, using)


def connect() -> None:
    for signal in (post_save, post_delete):
        for model in (ApiKey, Tenant):
            signal.connect(keys_changed, sender=model, dispatch_uid=f"keys-{model.__name__}")
        for model in (Domain, Tenant):
            signal.connect(domains_changed, sender=model, dispatch_uid=f"domains-{model.__name__}")
