"""Live metrics: ``/ws/metrics/`` streams each source outcome of a resolve to its own tenant.

The resolver publishes one group message per resolve to ``metrics.<schema>``; the consumer sends
one WebSocket frame per source outcome: ``{"source", "type", "status", "items", "kept", "ms",
"route", "at"}``. Publishing never raises into a resolve and never waits on the network: with
Redis a background thread sends; the in-memory layer (one process) is sent to directly, and only
when this process has a listener of that tenant.

A socket is authenticated (``TenantAuthMiddlewareStack``) by an API key with scope
``replay.read`` — ``Authorization: Bearer``, ``X-Api-Key``, or ``?key=`` for browsers — or by
the Django admin session of a staff user on the tenant's host. Close codes: 4401 no or bad
credentials, 4403 credentials without the right (scope, staff, foreign Origin).
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from asgiref.sync import async_to_sync
from channels.auth import AuthMiddleware
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import BaseChannelLayer, InMemoryChannelLayer, get_channel_layer
from channels.sessions import CookieMiddleware, SessionMiddleware
from django.urls import path
from django_tenants.utils import get_public_schema_name, get_tenant_domain_model, schema_context

from contextplatform.metrics import LIVE_CONNECTIONS, LIVE_EVENTS

if TYPE_CHECKING:
    from contextplatform.routing.packing import PackDecision
    from sources.fetch import SourceOutcome
    from tenants.models import Tenant

logger = logging.getLogger("contextplatform.live")

EVENT_TYPE = "metrics.events"
STREAM_SCOPE = "replay.read"
UNAUTHENTICATED = 4401
FORBIDDEN = 4403


def metrics_group(schema: str) -> str:
    return f"metrics.{schema}"


# --- publishing ----------------------------------------------------------------------------------


def source_events(
    route: str, outcomes: Sequence[SourceOutcome], decisions: Iterable[PackDecision]
) -> list[dict[str, Any]]:
    kept = Counter(d.item.source for d in decisions if d.kept)
    now = round(time.time(), 3)
    return [
        {
            "source": o.name,
            "type": o.type,
            "status": o.status,
            "items": len(o.items),
            "kept": kept.get(o.name, 0),
            "ms": round(o.ms, 2),
            "route": route,
            "at": now,
        }
        for o in outcomes
    ]


class BackgroundSender:
    """One daemon thread per process with its own event loop sends queued group messages, so a
    resolve only enqueues. A full queue drops (counted) rather than slowing resolves down."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._queue: queue.Queue[tuple[BaseChannelLayer, str, dict[str, Any]]] = queue.Queue(
            capacity
        )
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def submit(self, layer: BaseChannelLayer, group: str, message: dict[str, Any]) -> None:
        self._ensure_thread()
        try:
            self._queue.put_nowait((layer, group, message))
        except queue.Full:
            LIVE_EVENTS.labels("dropped").inc()

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Every submitted message sent (or failed); for tests and benchmarks."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def _ensure_thread(self) -> None:
        if self._pid == os.getpid() and self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._pid != os.getpid():  # a forked child inherits no thread
                self._queue = queue.Queue(self._queue.maxsize)
            if self._pid != os.getpid() or self._thread is None or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._run, name="live-metrics-sender", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        while True:
            layer, group, message = self._queue.get()
            try:
                loop.run_until_complete(layer.group_send(group, message))
                LIVE_EVENTS.labels("sent").inc()
            except Exception:
                LIVE_EVENTS.labels("failed").inc()
                logger.warning("live_publish_failed", extra={"group": group}, exc_info=True)
            finally:
                self._queue.task_done()


SENDER = BackgroundSender()


class ListenerLoop:
    """The event loop this process's dashboards listen on (the in-memory layer's queues belong to
    it): a resolve schedules its message there and returns, as with Redis it only enqueues."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def remember(self) -> None:
        """Called on the listeners' loop when one joins a group."""
        self._loop = asyncio.get_running_loop()

    def send(self, layer: InMemoryChannelLayer, group: str, message: dict[str, Any]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed() or not loop.is_running():
            async_to_sync(layer.group_send)(group, message)  # no known loop: wait for the send
            LIVE_EVENTS.labels("sent").inc()
            return
        future = asyncio.run_coroutine_threadsafe(layer.group_send(group, message), loop)
        future.add_done_callback(count_sent)


def count_sent(future: Any) -> None:
    if future.cancelled() or future.exception() is not None:
        LIVE_EVENTS.labels("failed").inc()
    else:
        LIVE_EVENTS.labels("sent").inc()


LISTENER_LOOP = ListenerLoop()


def publish(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    if isinstance(layer, InMemoryChannelLayer):
        # One process: listeners live in this process's event loop; with none, nothing to do.
        if group in layer.groups:
            LISTENER_LOOP.send(layer, group, message)
        return
    SENDER.submit(layer, group, message)


def publish_source_events(
    schema: str,
    route: str,
    outcomes: Sequence[SourceOutcome],
    decisions: Iterable[PackDecision],
) -> None:
    """One event per source outcome to the tenant's dashboards; never raises."""
    if not outcomes:
        return
    try:
        events = source_events(route, outcomes, decisions)
        publish(metrics_group(schema), {"type": EVENT_TYPE, "events": events})
    except Exception:
        LIVE_EVENTS.labels("failed").inc()
        logger.warning("live_publish_failed", extra={"route": route}, exc_info=True)


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
            await self.close(code=self.scope.get("auth_refusal") or UNAUTHENTICATED)
            return
        if self.channel_layer is None:
            await self.close(code=1011)
            return
        self.group = metrics_group(tenant.schema_name)
        LISTENER_LOOP.remember()
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        LIVE_CONNECTIONS.inc()

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
