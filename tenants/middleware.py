"""Select the tenant's schema from the API key, else from the host (the tenant's admin site)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django_tenants.middleware.main import TenantMainMiddleware

from contextplatform.core.errors import envelope
from contextplatform.core.request_thread import queue_on_request_thread
from tenants.models import ApiKey, Tenant
from tenants.selectors import active_api_key, kept_active_key, tenant_for_host

LAST_USED_RESOLUTION = timedelta(minutes=5)
# The OpenAI- and Anthropic-compatible gateway: its errors come in the providers' shapes.
GATEWAY_PATH_PREFIX = "/v1/"
# Probes and the metrics answer on every host and read no tenant; a key sent is not looked at
# (/metrics takes its own token, METRICS_TOKEN).
TENANTLESS_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


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
    async def __acall__(self, request: HttpRequest) -> Any:
        """On the async stack: the tenant is selected on the request's thread, where its views and
        their queries run (connections are per thread), and never for the probes."""
        if request.path in TENANTLESS_PATHS:
            return await self.get_response(request)
        if not self.selected_on_the_loop(request):
            response = await sync_to_async(self.process_request, thread_sensitive=True)(request)
            if response is not None:
                return response
        return await self.get_response(request)

    def selected_on_the_loop(self, request: HttpRequest) -> bool:
        """A key this process keeps as active selects its tenant here, on the event loop, and the
        schema is queued on the request's thread, where its views and their queries run (ahead of
        them: the thread runs its work in order): no round trip to the thread for the tenant.
        ``False`` when the key is not kept (it is read, or refused, on the thread as before), when
        no key is sent (the admin's host), or outside a request served on a thread of its own."""
        api_key = kept_active_key(presented_key(request))
        if api_key is None:
            return False
        if not queue_on_request_thread(lambda: self.select_schema(api_key)):
            return False
        self.use_key(request, api_key)
        return True

    def get_tenant(self, domain_model: type, hostname: str) -> Tenant:
        tenant = tenant_for_host(hostname)  # kept per process
        if tenant is None:
            raise domain_model.DoesNotExist  # type: ignore[attr-defined]
        return tenant

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        if request.path in TENANTLESS_PATHS:  # the sync stack (the test client) as the async one
            return None
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
        self.select_schema(api_key)
        self.use_key(request, api_key)
        return None

    def use_key(self, request: HttpRequest, api_key: ApiKey) -> None:
        request.api_key = api_key
        request.tenant = api_key.tenant
        self.setup_url_routing(request)

    def select_schema(self, api_key: ApiKey) -> None:
        """On the request's thread: the key's last use noted (in the public schema, where keys
        live), then its tenant's schema selected for the request's queries."""
        connection.set_schema_to_public()
        try:
            self._touch(api_key)
        finally:  # the request's queries never run in another schema than its tenant's
            connection.set_tenant(api_key.tenant)

    @staticmethod
    def _touch(api_key: ApiKey) -> None:
        now = timezone.now()
        if api_key.last_used_at is None or now - api_key.last_used_at > LAST_USED_RESOLUTION:
            ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
            # The instance is this process's kept copy: the next requests know it was touched.
            api_key.last_used_at = now
