"""Serving the platform's own tools inside a stream: the round that reads one client request's
upstream streams is its provider's protocol's (``protocols/stream_rounds.py`` and each
protocol's round); this module names it for the gateway."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from contextplatform.protocols.registry import protocol_for
from contextplatform.protocols.sse import SSEReader, sse
from contextplatform.protocols.stream_rounds import MAX_EVENT_BYTES, HeldCall
from contextplatform.protocols.stream_rounds import StreamRound as ProtocolRound


def StreamRound(  # built like the class it returns
    protocol: str, reserved: Collection[str], client_wants_usage: bool = True
) -> ProtocolRound:
    """The stream of one client request in ``protocol``, over the rounds of upstream streams it
    takes (``client_wants_usage``: OpenAI's client asked for ``stream_options.include_usage``)."""
    return protocol_for(protocol).stream_round(reserved, client_wants_usage=client_wants_usage)


def event_data(event: bytes) -> Any:
    """The JSON of an event's data, ``"[DONE]"``, or None."""
    reader = SSEReader()
    blocks = reader.feed(event if event.endswith((b"\n\n", b"\r\r")) else event + b"\n\n")
    for block in blocks:
        if block.dispatched:
            return block.json()
    return None


__all__ = ["MAX_EVENT_BYTES", "HeldCall", "StreamRound", "event_data", "sse"]
