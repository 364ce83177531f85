"""Keep-alive for streams: while the upstream is silent (a slow first token, a tool the gateway
serves between two rounds of a stream), an SSE comment line goes to the client every few seconds,
so that proxies and clients with idle timeouts keep the connection. Both providers' SDKs skip
comment lines."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from django.conf import settings

DEFAULT_KEEPALIVE_SECONDS = 15.0
PING = b": keep-alive\n\n"


def keepalive_seconds() -> float:
    return float(getattr(settings, "GATEWAY_KEEPALIVE_SECONDS", DEFAULT_KEEPALIVE_SECONDS))


async def with_keepalive(events: AsyncIterator[bytes], interval_s: float) -> AsyncIterator[bytes]:
    """``events`` as they come, with ``PING`` whenever ``interval_s`` passes without one. When
    the client goes away, the pending read is cancelled, which ends ``events`` (and whatever it
    holds open, such as the upstream call)."""
    if interval_s <= 0:
        async for event in events:
            yield event
        return
    iterator = aiter(events)
    pending: asyncio.Future[bytes] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait({pending}, timeout=interval_s)
            if not done:
                yield PING
                continue
            finished, pending = pending, None
            try:
                event = finished.result()
            except StopAsyncIteration:
                return
            yield event
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()
