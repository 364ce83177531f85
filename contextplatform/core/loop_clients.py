"""HTTP clients kept per event loop: a caller asks for the client of a key (an allow-list, a
server and its headers) and reuses its connections instead of opening new ones on every call; a
worker's requests share its one loop. The least recently used go past ``max_clients``, and a
loop's clients are closed when the loop shuts down (``asyncio.run`` and asgiref's loops close every
unfinished async generator then). One mechanism for every pooled outbound client (the gateway's
upstream calls, the live HTTP connectors, MCP servers), whatever HTTP library makes them.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar


class Closable(Protocol):
    @property
    def is_closed(self) -> bool: ...

    async def aclose(self) -> None: ...


C = TypeVar("C", bound=Closable)


@dataclass
class _Kept(Generic[C]):
    clients: OrderedDict[Hashable, C] = field(default_factory=OrderedDict)
    closer: AsyncIterator[None] | None = None


class LoopClients(Generic[C]):
    def __init__(self, max_clients: int) -> None:
        self.max_clients = max_clients
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Kept[C]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self._closing: set[asyncio.Task[None]] = set()  # a task being run needs a reference

    async def get(
        self,
        key: Hashable,
        make: Callable[[], C],
        replaces: Callable[[Hashable], bool] | None = None,
    ) -> C:
        """This loop's client for ``key``, made when missing; ``replaces`` names the kept keys a
        new client makes stale (a server whose headers changed), which are closed."""
        loop = asyncio.get_running_loop()
        with self._lock:
            kept = self._loops.get(loop)
            if kept is None:
                kept = self._loops[loop] = _Kept()
        if kept.closer is None:
            kept.closer = _close_at_shutdown(kept.clients)
            await kept.closer.__anext__()  # registers it with the loop's shutdown
        client = kept.clients.get(key)
        if client is not None and not client.is_closed:
            kept.clients.move_to_end(key)
            return client
        stale = [other for other in kept.clients if replaces(other)] if replaces else []
        kept.clients[key] = client = make()
        stale += list(kept.clients)[: max(0, len(kept.clients) - self.max_clients)]
        for other in stale:
            dropped = kept.clients.pop(other, None)
            if dropped is not None:
                closing = loop.create_task(dropped.aclose())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
        return client


async def _close_at_shutdown(clients: OrderedDict[Hashable, C]) -> AsyncIterator[None]:
    try:
        yield  # never resumed: only the loop's shutdown closes the generator
    finally:
        for client in list(clients.values()):
            await client.aclose()
        clients.clear()
