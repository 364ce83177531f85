"""The live metrics stream: ``/ws/metrics/`` through ``contextplatform.asgi.application``.

Resolves run through django.test.Client in this process (inside the test's transaction), driven
from the same event loop as the sockets; the Redis tests send through a real Redis, and the last
one through a real uvicorn process."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from channels_redis.core import RedisChannelLayer
from django.conf import settings as django_settings

from contextplatform.asgi import application
from contextplatform.core import live_events
from tests.conftest import TENANT_KEYS, ApiClient, TenantFixture, logged_in
from tests.live import live_server
from tests.resolve import source_kinds_for_tests  # noqa: F401  (registers test_hang)

IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
RULES = {"type": "skill_guardrails", "name": "rules", "texts": ["Be kind."]}
STUCK = {"type": "test_hang", "name": "stuck", "timeout_ms": 30}
EVENT_FIELDS = {"source", "type", "status", "items", "kept", "ms", "route", "at", "error"}


@pytest.fixture(autouse=True)
def in_memory_layer(settings: Any) -> None:
    """Each test picks its layer (CI sets REDIS_URL, which would make Redis the default)."""
    settings.CHANNEL_LAYERS = IN_MEMORY


@pytest.fixture(autouse=True)
def keep_the_test_transaction(monkeypatch: pytest.MonkeyPatch) -> None:
    """channels' database_sync_to_async closes "old" connections around each call; inside the
    test's transaction that would mark it for rollback. Django's test Client skips the same hook
    for HTTP requests."""
    monkeypatch.setattr("channels.db.close_old_connections", lambda: None)


def redis_layer(url: str, prefix: str) -> dict[str, Any]:
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [url], "prefix": prefix},
        }
    }


def socket(
    *, key: str | None = None, query: str = "", headers: list[tuple[bytes, bytes]] | None = None
) -> WebsocketCommunicator:
    sent = list(headers or [])
    if key is not None:
        sent.append((b"authorization", f"Bearer {key}".encode()))
    return WebsocketCommunicator(application, f"/ws/metrics/{query}", headers=sent)


def make_route(api: ApiClient, name: str, sources: list[dict[str, Any]]) -> None:
    response = api.post("/api/v1/routes", {"name": name, "context": {"sources": sources}})
    assert response.status_code == 201, response.content


def resolve(api: ApiClient, route: str) -> dict[str, Any]:
    body = {
        "route": route,
        "user": "u1",
        "request": {"messages": [{"role": "user", "content": "hi"}]},
    }
    response = api.post("/api/v1/resolve", body)
    assert response.status_code == 200, response.content
    return response.json()


async def close_code(communicator: WebsocketCommunicator) -> int | None:
    """The code a refused socket is closed with, after its handshake was accepted (a browser reads
    no code from a handshake refused with HTTP 403)."""
    connected, _ = await communicator.connect(timeout=5)
    assert connected, "the handshake was refused instead of closed with a code"
    closed = await communicator.receive_output(timeout=5)
    assert closed["type"] == "websocket.close", closed
    return closed.get("code")


async def events_of(communicator: WebsocketCommunicator, count: int) -> list[dict[str, Any]]:
    return [await communicator.receive_json_from(timeout=5) for _ in range(count)]


def run(scenario: Callable[[], Any]) -> Any:
    """One event loop for the sockets; sync_to_async calls come back to this (the test's) thread
    and its database connection."""
    return async_to_sync(scenario)()


# --- in memory -----------------------------------------------------------------------------------


def test_each_tenant_receives_its_own_source_events_only(
    acme: TenantFixture, globex: TenantFixture, acme_api: ApiClient, globex_api: ApiClient
) -> None:
    make_route(acme_api, "live", [RULES, STUCK])
    make_route(globex_api, "live-globex", [RULES])

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        acme_socket, globex_socket = socket(key=acme.key), socket(key=globex.key)
        assert (await acme_socket.connect())[0] and (await globex_socket.connect())[0]
        await sync_to_async(resolve)(globex_api, "live-globex")
        report = await sync_to_async(resolve)(acme_api, "live")
        acme_events = await events_of(acme_socket, 2)
        globex_events = await events_of(globex_socket, 1)
        assert await acme_socket.receive_nothing(timeout=0.2)
        assert await globex_socket.receive_nothing(timeout=0.2)
        await acme_socket.disconnect()
        await globex_socket.disconnect()
        assert [s["ms"] for s in report["sources"]] == [e["ms"] for e in acme_events]
        return acme_events, globex_events

    acme_events, globex_events = run(scenario)
    assert all(set(event) == EVENT_FIELDS for event in acme_events + globex_events)
    rules, stuck = acme_events
    assert {k: rules[k] for k in ("source", "type", "status", "items", "kept", "route")} == {
        "source": "rules",
        "type": "skill_guardrails",
        "status": "ok",
        "items": 1,
        "kept": 1,
        "route": "live",
    }
    assert (stuck["source"], stuck["status"], stuck["items"], stuck["kept"]) == (
        "stuck",
        "timeout",
        0,
        0,
    )
    assert stuck["ms"] >= 30
    assert [(e["route"], e["source"]) for e in globex_events] == [("live-globex", "rules")]


def test_a_browser_may_pass_the_key_in_the_query_and_x_api_key_works(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    make_route(acme_api, "live", [RULES])

    async def scenario() -> None:
        by_query = socket(query=f"?key={acme.key}")
        by_header = socket(headers=[(b"x-api-key", acme.key.encode())])
        assert (await by_query.connect())[0] and (await by_header.connect())[0]
        await sync_to_async(resolve)(acme_api, "live")
        for communicator in (by_query, by_header):
            assert [e["source"] for e in await events_of(communicator, 1)] == ["rules"]
            await communicator.disconnect()

    run(scenario)


def test_bad_missing_or_underprivileged_keys_are_refused(acme: TenantFixture) -> None:
    from tenants.services import issue_api_key, revoke_api_key

    resolve_only = issue_api_key(tenant=acme.tenant, scopes="resolve", name="no-stream")
    revoked = issue_api_key(tenant=acme.tenant, name="revoked")
    revoke_api_key(api_key=revoked.api_key)

    async def scenario() -> list[tuple[bool, Any]]:
        attempts = [
            socket(key="cp_not-a-key"),
            socket(key=""),
            socket(),
            socket(query="?key=cp_not-a-key"),
            socket(key=revoked.plain_key),
            socket(key=resolve_only.plain_key),
            socket(headers=[(b"host", b"acme.localhost")]),  # the host alone is no credential
        ]
        return [await close_code(attempt) for attempt in attempts]

    assert run(scenario) == [4401] * 5 + [4403, 4401]


# --- the admin session on the tenant's host ----------------------------------------------------


def admin_cookie(schema: str, *, staff: bool = True) -> bytes:
    client = logged_in(schema, staff=staff)
    name = django_settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}".encode()


def test_the_admin_session_on_the_tenants_host_opens_the_stream(
    acme: TenantFixture, globex: TenantFixture, acme_api: ApiClient
) -> None:
    make_route(acme_api, "live", [RULES])
    staff, visitor = admin_cookie("acme"), admin_cookie("acme", staff=False)

    async def scenario() -> list[Any]:
        admin = socket(headers=[(b"host", b"acme.localhost:8000"), (b"cookie", staff)])
        assert (await admin.connect())[0]
        await sync_to_async(resolve)(acme_api, "live")
        received = [e["route"] for e in await events_of(admin, 1)]
        await admin.disconnect()
        refused = [
            # the same session cookie on another tenant's host means nothing there
            socket(headers=[(b"host", b"globex.localhost"), (b"cookie", staff)]),
            # a tenant user who is not staff
            socket(headers=[(b"host", b"acme.localhost"), (b"cookie", visitor)]),
            # a page of another site using the admin's cookie
            socket(
                headers=[
                    (b"host", b"acme.localhost"),
                    (b"cookie", staff),
                    (b"origin", b"https://evil.example"),
                ]
            ),
        ]
        return [received, *[await close_code(attempt) for attempt in refused]]

    assert run(scenario) == [["live"], 4401, 4403, 4403]


# --- publishing never hurts a resolve --------------------------------------------------------------


def test_a_failing_layer_never_fails_the_resolve(
    acme_api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_route(acme_api, "live", [RULES])

    def broken(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("layer down")

    monkeypatch.setattr("contextplatform.resolve.live_events.publish", broken)
    assert resolve(acme_api, "live")["sources"][0]["status"] == "ok"


# --- Redis ---------------------------------------------------------------------------------------


def test_events_travel_through_redis(
    acme: TenantFixture,
    globex: TenantFixture,
    acme_api: ApiClient,
    globex_api: ApiClient,
    redis_url: str,
    settings: Any,
) -> None:
    settings.CHANNEL_LAYERS = redis_layer(redis_url, f"test-{uuid.uuid4().hex[:8]}")
    make_route(acme_api, "live", [RULES])
    make_route(globex_api, "live-globex", [RULES])

    async def scenario() -> list[dict[str, Any]]:
        acme_socket = socket(key=acme.key)
        assert (await acme_socket.connect())[0]
        await sync_to_async(resolve)(globex_api, "live-globex")
        await sync_to_async(resolve)(acme_api, "live")
        events = await events_of(acme_socket, 1)
        assert await sync_to_async(live_events.SENDER.wait_idle)()
        assert await acme_socket.receive_nothing(timeout=0.3)
        await acme_socket.disconnect()
        return events

    assert [(e["route"], e["source"], e["status"]) for e in run(scenario)] == [
        ("live", "rules", "ok")
    ]


def test_with_redis_nothing_is_sent_while_nobody_listens_and_a_new_listener_is_heard(
    acme: TenantFixture,
    acme_api: ApiClient,
    redis_url: str,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A resolve queues no events for a tenant whose dashboards are all closed (once the sender
    has asked the layer), and a dashboard that opens is heard of within LISTENERS_KNOWN_S."""
    settings.CHANNEL_LAYERS = redis_layer(redis_url, f"test-{uuid.uuid4().hex[:8]}")
    make_route(acme_api, "quiet", [RULES])
    sent: list[str] = []
    group_send = RedisChannelLayer.group_send

    async def counted(self: RedisChannelLayer, group: str, message: Any) -> None:
        sent.append(group)
        await group_send(self, group, message)

    monkeypatch.setattr(RedisChannelLayer, "group_send", counted)
    queued: list[str] = []
    submit = live_events.SENDER.submit
    monkeypatch.setattr(
        live_events.SENDER,
        "submit",
        lambda layer, group, message: (queued.append(group), submit(layer, group, message)),
    )
    resolve(acme_api, "quiet")  # the first: queued, and the sender finds nobody listening
    assert live_events.SENDER.wait_idle()
    assert (queued, sent) == (["metrics.acme"], [])
    resolve(acme_api, "quiet")
    resolve(acme_api, "quiet")
    assert live_events.SENDER.wait_idle()
    assert (queued, sent) == (["metrics.acme"], [])  # known to be unheard: not even queued

    async def scenario() -> list[dict[str, Any]]:
        acme_socket = socket(key=acme.key)
        assert (await acme_socket.connect())[0]
        await asyncio.sleep(live_events.LISTENERS_KNOWN_S + 0.1)
        await sync_to_async(resolve)(acme_api, "quiet")
        events = await events_of(acme_socket, 1)
        await acme_socket.disconnect()
        return events

    assert [(e["route"], e["status"]) for e in run(scenario)] == [("quiet", "ok")]
    assert sent == ["metrics.acme"]


@pytest.fixture
def redis_server(redis_url: str, django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    with django_db_blocker.unblock(), live_server({"REDIS_URL": redis_url}) as base:
        yield base


def test_a_resolve_in_another_process_reaches_the_socket_through_redis(
    redis_server: str, redis_url: str, settings: Any, django_db_blocker: Any
) -> None:
    """The server publishes with its own settings (prefix "cp"); this process listens on them."""
    settings.CHANNEL_LAYERS = redis_layer(redis_url, "cp")
    route = f"live{uuid.uuid4().hex[:8]}"  # other runs may share the Redis and the tenant
    headers = {"Authorization": f"Bearer {TENANT_KEYS['acme']}"}
    body = {"name": route, "context": {"sources": [RULES]}}
    request = {"route": route, "request": {"messages": [{"role": "user", "content": "hi"}]}}

    async def scenario(client: httpx.AsyncClient) -> dict[str, Any]:
        acme_socket = socket(key=TENANT_KEYS["acme"])
        assert (await acme_socket.connect(timeout=5))[0]
        response = await client.post("/api/v1/resolve", json=request, headers=headers)
        assert response.status_code == 200, response.text
        while True:  # skip events of anyone else's resolves on the shared Redis
            event = await acme_socket.receive_json_from(timeout=5)
            if event["route"] == route:
                break
        await acme_socket.disconnect()
        return event

    async def with_client() -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=redis_server, timeout=30) as client:
            return await scenario(client)

    with httpx.Client(base_url=redis_server, timeout=30) as client:
        assert client.post("/api/v1/routes", json=body, headers=headers).status_code == 201
        try:
            with django_db_blocker.unblock():
                event = run(with_client)
        finally:
            client.delete(f"/api/v1/routes/{route}", headers=headers)
    assert (event["source"], event["status"], event["items"], event["kept"]) == (
        "rules",
        "ok",
        1,
        1,
    )


# --- what a client of the real server sees -------------------------------------------------------


def test_a_refused_socket_on_the_real_server_closes_with_its_code(
    django_db_setup: Any, django_db_blocker: Any
) -> None:
    """Through uvicorn and a real WebSocket client: the handshake succeeds and the close frame
    carries 4401 / 4403 (a handshake refused with HTTP 403 carries no code a browser can read)."""
    import websockets
    from websockets.exceptions import ConnectionClosed

    from tenants.models import Tenant
    from tenants.services import issue_api_key, revoke_api_key

    with django_db_blocker.unblock():
        tenant = Tenant.objects.get(schema_name="acme")
        resolve_only = issue_api_key(tenant=tenant, scopes="resolve", name="no-stream-live")

    async def close_of(url: str, headers: dict[str, str]) -> int | None:
        async with websockets.connect(url, additional_headers=headers, open_timeout=10) as ws:
            try:
                await asyncio.wait_for(ws.recv(), timeout=10)
            except ConnectionClosed as closed:
                return closed.rcvd.code if closed.rcvd else None
        return None

    try:
        with django_db_blocker.unblock(), live_server() as base:
            url = base.replace("http://", "ws://") + "/ws/metrics/"

            async def scenario() -> list[int | None]:
                return [
                    await close_of(url, {}),
                    await close_of(url, {"Authorization": "Bearer cp_not-a-key"}),
                    await close_of(url, {"Authorization": f"Bearer {resolve_only.plain_key}"}),
                ]

            codes = asyncio.run(scenario())
    finally:
        with django_db_blocker.unblock():
            revoke_api_key(api_key=resolve_only.api_key)
    assert codes == [4401, 4401, 4403]


CALL_FIELDS = {
    "kind",
    "route",
    "deployment",
    "status",
    "ms",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cost_usd",
    "at",
}


def test_a_gateway_call_reaches_its_tenants_dashboards_with_its_status_tokens_and_cost(
    acme: TenantFixture, globex: TenantFixture
) -> None:
    from contextplatform.deployments.pricing import Price
    from contextplatform.gateway.call_metrics import observe_call
    from contextplatform.gateway.fallback import Attempt, Attempts
    from contextplatform.protocols.usage import ProviderUsage

    attempts = Attempts()
    attempts.add(Attempt("slow", "timeout", 500))
    attempts.add(Attempt("gpt", "answered", 40))

    async def scenario() -> dict[str, Any]:
        acme_socket, globex_socket = socket(key=acme.key), socket(key=globex.key)
        assert (await acme_socket.connect())[0] and (await globex_socket.connect())[0]
        observe_call(
            schema=acme.schema,
            route="support",
            attempts=attempts,
            answered=True,
            usage=ProviderUsage(input=1000, output=100, cached_input=400),
            price=Price(1.0, 4.0, 0.5),
            call_ms=61.234,
            stream=False,
        )
        (event,) = await events_of(acme_socket, 1)
        assert await globex_socket.receive_nothing(timeout=0.2)
        await acme_socket.disconnect()
        await globex_socket.disconnect()
        return event

    event = run(scenario)
    assert set(event) == CALL_FIELDS
    assert {k: v for k, v in event.items() if k != "at"} == {
        "kind": "call",
        "route": "support",
        "deployment": "gpt",
        "status": "ok",
        "ms": 61.23,
        "input_tokens": 1000,
        "output_tokens": 100,
        "cached_input_tokens": 400,
        # 600 uncached at $1, 400 cached at $0.5, 100 out at $4 per million
        "cost_usd": pytest.approx(0.0012),
    }
