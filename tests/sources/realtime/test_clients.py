"""The connectors' HTTP clients (``sources/kinds/realtime_clients.py``): one per event loop and
allow-list, its connections reused, no cookie ever carried from one call to the next, closed when
the loop shuts down."""

from __future__ import annotations

import asyncio

from sources.base import ContextRequest
from sources.kinds import realtime_clients
from sources.kinds.realtime_apis import Connector, run_connector
from tests.loopback import Reply, Seen, Service

ALLOWED = ("127.0.0.1",)


def request(user: str) -> ContextRequest:
    return ContextRequest(
        request_id="rsv_t", tenant="acme", route="r", user=user, session=None, query="q",
        allowlist=ALLOWED,
    )  # fmt: skip


def test_a_cookie_answered_to_one_user_never_reaches_the_next(service: Service) -> None:
    def respond(seen: Seen) -> Reply:
        return Reply(
            body=b'{"ok": true}',
            headers={
                "Content-Type": "application/json",
                "Set-Cookie": "session=ann-secret; Path=/",
            },
        )

    service.responder = respond
    connector = Connector.model_validate({"name": "c", "url": service.url("/u/{user}")})

    async def both() -> None:
        for user in ("ann", "bob"):
            outcome = await run_connector(connector, request(user), "live")
            assert outcome.status == "ok", outcome

    asyncio.run(both())
    assert service.paths == ["/u/ann", "/u/bob"]
    assert all("cookie" not in seen.headers for seen in service.requests)


def test_one_client_per_loop_and_allow_list_closed_with_its_loop() -> None:
    async def clients() -> tuple[object, object, object]:
        first = await realtime_clients.client_for(ALLOWED)
        again = await realtime_clients.client_for(ALLOWED)
        other = await realtime_clients.client_for(("10.0.0.0/8",))
        assert first is again and first is not other
        return first, other, await realtime_clients.client_for(ALLOWED)

    first, other, _ = asyncio.run(clients())
    assert first.is_closed and other.is_closed  # type: ignore[attr-defined]
    second, _, _ = asyncio.run(clients())
    assert second is not first  # another loop, another client
