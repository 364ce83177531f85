"""Live metrics: ``/ws/metrics/`` streams each source outcome of a resolve to its own tenant.

The resolver publishes one group message per resolve to ``metrics.<schema>``
(``contextplatform.resolve.live_events`` over the bus in ``contextplatform.core.live_events``);
the consumer sends one WebSocket frame per source outcome: ``{"source", "type", "status", "items",
"kept", "ms", "route", "at", "error"}``.

A socket is authenticated (``TenantAuthMiddlewareStack``) by an API key with scope
``replay.read`` — ``Authorization: Bearer``, ``X-Api-Key``, or ``?key=`` for browsers — or by
the Django admin session of a staff user on the tenant's host. A refused socket is accepted and
then closed with its code, which a browser's ``CloseEvent.code`` reads: 4401 no or bad
credentials, 4403 credentials without the right (scope, staff, foreign Origin).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from channels.auth import AuthMiddleware
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.sessions import CookieMiddleware, SessionMiddleware
from django.urls import path
from django_tenants.utils import get_public_schema_name, get_tenant_domain_model, schema_context

from contextplatform.core.live_events import LISTENER_LOOP, metrics_group
from contextplatform.core.metrics import LIVE_CONNECTIONS

if TYPE_CHECKING:
    from tenants.models import Tenant

logger = logging.getLogger("contextplatform.live")

STREAM_SCOPE = "replay.read"
UNAUTHENTICATED = 4401
FORBIDDEN = 4403


# --- authentication ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    tenant: Tenant | None = None
    user: Any = None
    refusal: int | None = UNAUTHENTICATED


def header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def presented_key(scope: dict[str, Any]) -> str | None:
    """Like the HTTP middleware: ``Authorization: Bearer``, then ``X-Api-Key``, then ``?key=``."""
    authorization = header(scope, b"authorization") or ""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer":
        return token.strip()
    key = header(scope, b"x-api-key")
    if key is not None:
        return key.strip()
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("key")
    return values[-1].strip() if values else None


def host_name(scope: dict[str, Any]) -> str | None:
    host = header(scope, b"host")
    return host.rsplit(":", 1)[0].lower() if host else None


def same_origin(scope: dict[str, Any]) -> bool:
    """A browser's session socket must come from a page of the same host (no cross-site use of
    the admin's cookie); clients without an Origin header are not browsers."""
    origin = header(scope, b"origin")
    return origin is None or urlsplit(origin).netloc.lower() == (header(scope, b"host") or "")


def identity_from_key(plain_key: str) -> Identity:
    from tenants.selectors import active_api_key

    with schema_context(get_public_schema_name()):
        api_key = active_api_key(plain_key)
    if api_key is None:
        return Identity()
    if STREAM_SCOPE not in api_key.scopes:
        return Identity(tenant=api_key.tenant, refusal=FORBIDDEN)
    return Identity(tenant=api_key.tenant, refusal=None)


def tenant_of_host(host: str | None) -> Tenant | None:
    if not host:
        return None
    with schema_context(get_public_schema_name()):
        domain = get_tenant_domain_model().objects.select_related("tenant").filter(domain=host)
        found = domain.first()
    if found is None or found.tenant.schema_name == get_public_schema_name():
        return None
    return found.tenant


def identity_from_session(scope: dict[str, Any]) -> Identity:
    from django.contrib.auth import get_user

    tenant = tenant_of_host(host_name(scope))
    if tenant is None or "session" not in scope:
        return Identity()
    with schema_context(tenant.schema_name):  # sessions and users live in the tenant's schema
        user = get_user(SimpleNamespace(session=scope["session"]))
        if not user.is_authenticated or not user.is_active:
            return Identity()
        allowed = user.is_staff and same_origin(scope)
    return Identity(tenant=tenant, user=user, refusal=None if allowed else FORBIDDEN)


@database_sync_to_async
def authenticate(scope: dict[str, Any]) -> Identity:
    plain_key = presented_key(scope)
    if plain_key is not None:
        return identity_from_key(plain_key) if plain_key else Identity()
    return identity_from_session(scope)


class TenantAuthMiddleware(AuthMiddleware):
    """Channels' AuthMiddleware, with the tenant resolved first and every query run under the
    right schema (``database_sync_to_async`` shares one thread, whose schema would leak)."""

    async def resolve_scope(self, scope: dict[str, Any]) -> None:
        from django.contrib.auth.models import AnonymousUser

        identity = await authenticate(scope)
        scope["tenant"] = identity.tenant if identity.refusal is None else None
        scope["auth_refusal"] = identity.refusal
        scope["user"]._wrapped = identity.user or AnonymousUser()


def TenantAuthMiddlewareStack(inner: Any) -> Any:
    return CookieMiddleware(SessionMiddleware(TenantAuthMiddleware(inner)))


# --- the consumer --------------------------------------------------------------------------------


class MetricsConsumer(AsyncJsonWebsocketConsumer):
    group: str | None = None

    async def connect(self) -> None:
        tenant = self.scope.get("tenant")
        if tenant is None:
            await self.refuse(self.scope.get("auth_refusal") or UNAUTHENTICATED)
            return
        if self.channel_layer is None:
            await self.refuse(1011)
            return
        self.group = metrics_group(tenant.schema_name)
        LISTENER_LOOP.remember()
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        LIVE_CONNECTIONS.inc()

    async def refuse(self, code: int) -> None:
        """Accept, then close with ``code``: a socket closed before it is accepted is refused at the
        handshake with HTTP 403, and a browser sees neither that status nor any code."""
        await self.accept()
        await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            self.group = None
            LIVE_CONNECTIONS.dec()

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """The stream is one-way; anything a client sends is ignored."""

    async def metrics_events(self, message: dict[str, Any]) -> None:
        for event in message["events"]:
            await self.send_json(event)


websocket_urlpatterns = [path("ws/metrics/", MetricsConsumer.as_asgi())]
