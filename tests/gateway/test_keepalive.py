"""Keep-alive comments while a stream is silent, and a client that leaves ends the stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from contextplatform.gateway.keepalive import PING, with_keepalive


def test_a_silent_stream_sends_pings_between_its_events() -> None:
    async def slow() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        await asyncio.sleep(0.35)
        yield b"data: 2\n\n"

    async def collect() -> list[bytes]:
        return [event async for event in with_keepalive(slow(), 0.1)]

    events = asyncio.run(collect())
    assert events[0] == b"data: 1\n\n" and events[-1] == b"data: 2\n\n"
    assert events[1:-1] and set(events[1:-1]) == {PING}


def test_a_client_that_leaves_closes_the_stream_it_was_waiting_on() -> None:
    closed = asyncio.Event()

    async def endless() -> AsyncIterator[bytes]:
        try:
            yield b"data: first\n\n"
            await asyncio.sleep(3600)
            yield b"never"
        finally:
            closed.set()  # where the gateway closes the upstream call

    async def leave_early() -> None:
        stream = with_keepalive(endless(), 0.05)
        assert await anext(stream) == b"data: first\n\n"
        assert await anext(stream) == PING
        await stream.aclose()  # what the server does when the client disconnects

    asyncio.run(leave_early())
    assert closed.is_set()


def test_no_interval_passes_events_as_they_are() -> None:
    async def two() -> AsyncIterator[bytes]:
        yield b"a"
        yield b"b"

    async def collect() -> list[bytes]:
        return [event async for event in with_keepalive(two(), 0)]

    assert asyncio.run(collect()) == [b"a", b"b"]
