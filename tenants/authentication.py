"""DRF authentication from the key the tenant middleware already verified."""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from tenants.models import ApiKey, Tenant


@dataclass(frozen=True)
class ApiPrincipal:
    """The caller behind an API key: a tenant with a set of scopes."""

    tenant: Tenant
    scopes: frozenset[str]
    key_id: int

    is_authenticated = True

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[ApiPrincipal, ApiKey] | None:
        api_key: ApiKey | None = getattr(request._request, "api_key", None)
        if api_key is None:
            return None
        principal = ApiPrincipal(
            tenant=api_key.tenant, scopes=frozenset(api_key.scopes), key_id=api_key.pk
        )
        return principal, api_key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'
