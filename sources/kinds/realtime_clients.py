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

from collections.abc import Sequence

import httpx
from django.conf import settings

from contextplatform.core.loop_clients import LoopClients
from contextplatform.core.outbound.httpx_client import guarded_async_client

MAX_CLIENTS = 32
BACKSTOP_TIMEOUT_S = 120.0
MAX_REDIRECTS = 3

_clients: LoopClients[httpx.AsyncClient] = LoopClients(MAX_CLIENTS)


async def client_for(allowlist: Sequence[str]) -> httpx.AsyncClient:
    """This loop's client for ``allowlist`` (made when missing)."""
    key = (bool(getattr(settings, "OUTBOUND_ALLOW_PRIVATE", False)), tuple(allowlist))
    return await _clients.get(
        key,
        lambda: guarded_async_client(
            allowlist=allowlist, timeout_s=BACKSTOP_TIMEOUT_S, max_redirects=MAX_REDIRECTS
        ),
    )
