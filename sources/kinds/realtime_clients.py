"""The HTTP clients of ``realtime_apis`` connectors: one guarded client per event loop and
allow-list, so a connector called at every resolve reuses its connections instead of opening one
each time (a worker's resolves share its one loop).

- Every request and every redirect hop is still checked against the allow-list the client was
  made for (``contextplatform.core.outbound``), and a new connection is checked where it connects;
  a kept connection was opened under that same policy, which the key holds.
- No cookies are kept: a client serves every user of every tenant with that allow-list, and a
  ``Set-Cookie`` answered to one must never ride along with another's request.
- Each call sets its own timeout; the client's is only a backstop.
- A loop's clients are closed when the loop shuts down (``asyncio.run`` and asgiref's loops close
  every unfinished async generator then), and the least recently used go past ``MAX_CLIENTS``.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import httpx
from django.conf import settings

from contextplatform.core.outbound import guarded_async_client

MAX_CLIENTS = 32
BACKSTOP_TIMEOUT_S = 120.0
MAX_REDIRECTS = 3

ClientKey = tuple[bool, tuple[str, ...]]


@dataclass
class LoopClients:
    clients: OrderedDict[ClientKey, httpx.AsyncClient] = field(default_factory=OrderedDict)
    closer: AsyncIterator[None] | None = None


_loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopClients] = (
    weakref.WeakKeyDictionary()
)
_loops_lock = threading.Lock()
_closing: set[asyncio.Task[None]] = set()  # clients being closed (a task needs a reference)


async def _close_at_shutdown(
    clients: OrderedDict[ClientKey, httpx.AsyncClient],
) -> AsyncIterator[None]:
    try:
        yield  # never resumed: only the loop's shutdown closes the generator
    finally:
        for client in list(clients.values()):
            await client.aclose()
        clients.clear()


async def client_for(allowlist: Sequence[str]) -> httpx.AsyncClient:
    """This loop's client for ``allowlist`` (made when missing)."""
    loop = asyncio.get_running_loop()
    with _loops_lock:
        kept = _loops.get(loop)
        if kept is None:
            kept = _loops[loop] = LoopClients()
    if kept.closer is None:
        kept.closer = _close_at_shutdown(kept.clients)
        await kept.closer.__anext__()  # registers it with the loop's shutdown
    key: ClientKey = (bool(getattr(settings, "OUTBOUND_ALLOW_PRIVATE", False)), tuple(allowlist))
    client = kept.clients.get(key)
    if client is not None and not client.is_closed:
        kept.clients.move_to_end(key)
        return client
    client = guarded_async_client(
        allowlist=allowlist, timeout_s=BACKSTOP_TIMEOUT_S, max_redirects=MAX_REDIRECTS
    )
    kept.clients[key] = client
    while len(kept.clients) > MAX_CLIENTS:
        _, dropped = kept.clients.popitem(last=False)
        closing = loop.create_task(dropped.aclose())
        _closing.add(closing)
        closing.add_done_callback(_closing.discard)
    return client
