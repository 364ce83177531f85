"""The bare ASGI app of the HTTP-path benchmark (``scripts/bench_wrk.py``): every HTTP request
answered ``{"status": "ok"}`` at once, the lifespan protocol answered, nothing else. Served by the
same server with the same flags as the platform, it is the limit the server and the load generator
leave on this machine: what the platform's figures stand beside.

Two ASGI messages per response (start, then body), as Django's ASGI handler sends them, so that a
server which writes them as two segments shows it here too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

BODY = b'{"status": "ok"}'
HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(BODY)).encode()),
]


async def serve_lifespan(
    receive: Any, send: Any, on_shutdown: Callable[[], Awaitable[None]] | None = None
) -> None:
    """The lifespan protocol answered (``on_shutdown`` run before shutdown completes); the bench's
    other bare apps (``scripts/bench_bare_proxy.py``) answer it the same way."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if on_shutdown is not None:
                await on_shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await serve_lifespan(receive, send)
        return
    if scope["type"] != "http":
        return
    # The request body, read to its end as a real app would (wrk's POSTs carry one).
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False) and message["type"] == "http.request"
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
