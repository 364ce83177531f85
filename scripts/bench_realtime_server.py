"""The live HTTP API of the connectors bench (section 9), in a process of its own: a bare ASGI app
on uvicorn (one worker) on loopback, answering at once, as a ``realtime_apis`` source reads a bank.

``python -m scripts.bench_realtime_server PORT``. ``GET /accounts/{user}/balance`` answers the
user's two accounts, ``GET /rates`` three exchange rates (JSON, a few hundred bytes each).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

import uvicorn

RATES = json.dumps({"base": "EUR", "rates": {"USD": 1.08, "GBP": 0.85, "CHF": 0.95}}).encode()

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def balances(user: str) -> bytes:
    return json.dumps(
        {
            "user": user,
            "accounts": [
                {"id": "chk-1", "kind": "checking", "balance": 1204.5, "currency": "EUR"},
                {"id": "sav-1", "kind": "savings", "balance": 8000, "currency": "EUR"},
            ],
        }
    ).encode()


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    parts = scope["path"].strip("/").split("/")
    if len(parts) == 3 and parts[0] == "accounts" and parts[2] == "balance":
        status, body = 200, balances(unquote(parts[1]))
    elif parts == ["rates"]:
        status, body = 200, RATES
    else:
        status, body = 404, b'{"error": "not found"}'
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    port = int(sys.argv[1])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
