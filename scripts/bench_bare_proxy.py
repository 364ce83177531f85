"""The gateway benchmark's floor: a bare forwarding proxy on the gateway's own stack.

uvicorn with httptools and uvloop (as ``make run`` serves the gateway) and one aiohttp client
session, nothing else: no authentication, no route, no resolve, no record. ``POST`` on any path is
forwarded to ``BARE_PROXY_UPSTREAM`` + the path with its body and content type, and the answer
comes back as it arrived (a stream piece by piece). What the gateway adds beyond this is what its
own work costs; what this adds over calling the upstream directly is what the stack costs.

Run: ``BARE_PROXY_UPSTREAM=http://127.0.0.1:PORT python -m uvicorn scripts.bench_bare_proxy:app
--loop uvloop --http httptools --no-access-log --port N``.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from scripts.bare_asgi import serve_lifespan

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

UPSTREAM = os.environ.get("BARE_PROXY_UPSTREAM", "http://127.0.0.1:9").rstrip("/")
FORWARDED = (b"content-type", b"authorization")

_session: aiohttp.ClientSession | None = None


def session() -> aiohttp.ClientSession:
    global _session
    if _session is None or _session.closed:
        _session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=256, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=60),
            auto_decompress=False,
        )
    return _session


async def close_session() -> None:
    if _session is not None:
        await _session.close()


async def read_body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        await serve_lifespan(receive, send, on_shutdown=close_session)
        return
    if scope["type"] != "http":
        return
    if scope["method"] != "POST":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    body = await read_body(receive)
    headers = {
        name.decode(): value.decode() for name, value in scope["headers"] if name in FORWARDED
    }
    async with session().post(UPSTREAM + scope["path"], data=body, headers=headers) as answer:
        content_type = answer.headers.get("content-type", "application/json")
        await send(
            {
                "type": "http.response.start",
                "status": answer.status,
                "headers": [(b"content-type", content_type.encode())],
            }
        )
        async for piece in answer.content.iter_any():
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
