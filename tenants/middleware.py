"""Select the tenant's schema from the API key, else from the host (the tenant's admin site)."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django_tenants.middleware.main import TenantMainMiddleware

from contextplatform.core.errors import envelope
from tenants.models import ApiKey
from tenants.selectors import active_api_key

LAST_USED_RESOLUTION = timedelta(minutes=5)
# The OpenAI- and Anthropic-compatible gateway: its errors come in the providers' shapes.
GATEWAY_PATH_PREFIX = "/v1/"


def presented_key(request: HttpRequest) -> str | None:
    """The key from ``Authorization: Bearer`` or ``X-Api-Key``; ``None`` when neither is sent."""
    authorization = request.headers.get("Authorization", "")
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer":
            return token.strip()
    key = request.headers.get("X-Api-Key")
    return key.strip() if key is not None else None


class ApiKeyOrHostTenantMiddleware(TenantMainMiddleware):
    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        plain_key = presented_key(request)
        if plain_key is None:
            request.api_key = None
            return super().process_request(request)
        connection.set_schema_to_public()
        api_key = active_api_key(plain_key)
        if api_key is None:
            if request.path.startswith(GATEWAY_PATH_PREFIX):
                # The gateway answers in the caller's provider error shape, which only it knows.
                request.api_key = None
                request.api_key_rejected = True
                return super().process_request(request)
            response = JsonResponse(
                envelope("unauthorized", "invalid or revoked API key"), status=401
            )
            response["WWW-Authenticate"] = 'Bearer realm="api"'
            return response
        self._touch(api_key)
        request.api_key = api_key
        request.tenant = api_key.tenant
        connection.set_tenant(api_key.tenant)
        self.setup_url_routing(request)
        return None

    @staticmethod
    def _touch(api_key: ApiKey) -> None:
        now = timezone.now()
        if api_key.last_used_at is None or now - api_key.last_used_at > LAST_USED_RESOLUTION:
            ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
