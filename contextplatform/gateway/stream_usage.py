"""Usage in streams whose provider reports it only when asked (OpenAI): the gateway asks for it,
and hides what the client did not ask for.

An OpenAI stream reports usage only when the request says ``stream_options.include_usage``, in a
final chunk with no choices. The gateway sets it on every streamed request it forwards, so that
the replay record gets the provider's counts; when the client had not asked, that extra chunk is
left out of what it receives (``UsageChunkFilter``), so it sees the stream it asked for. Anthropic
streams always carry usage, and pass untouched (the protocol's ``with_stream_usage``).
"""

from __future__ import annotations

from typing import Any

from contextplatform.gateway.protocol import Protocol
from contextplatform.protocols.openai_chat import client_asked_for_usage
from contextplatform.protocols.registry import protocol_for
from contextplatform.protocols.sse import SSEBlock, SSEReader
from contextplatform.protocols.usage import is_usage_chunk

MAX_PENDING_BYTES = 1024 * 1024  # a longer event is passed on as it is, not held further


def with_stream_usage(protocol: Protocol, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The body to forward for a stream, and whether the usage chunk must be hidden from the
    client (the gateway asked for it, the client did not)."""
    return protocol_for(protocol).with_stream_usage(body)


def _is_usage_event(block: SSEBlock) -> bool:
    if block.data is None or '"usage"' not in block.data:  # the common case: no parsing
        return False
    data = block.json()
    return isinstance(data, dict) and is_usage_chunk(data)


class UsageChunkFilter:
    """Passes an OpenAI stream on event by event, without the usage chunk. An event is held only
    until its end arrives (a client cannot read half an event anyway)."""

    def __init__(self) -> None:
        self._reader = SSEReader(max_block_bytes=MAX_PENDING_BYTES)

    def feed(self, chunk: bytes) -> bytes:
        return b"".join(
            block.raw for block in self._reader.feed(chunk) if not _is_usage_event(block)
        )

    def flush(self) -> bytes:
        """The unfinished event the stream ended with, unless it is the usage chunk."""
        rest = self._reader.flush()
        if rest is None:
            return b""
        ended = SSEReader().feed(rest.raw + b"\n\n")
        return b"" if any(_is_usage_event(block) for block in ended) else rest.raw


__all__ = ["UsageChunkFilter", "client_asked_for_usage", "with_stream_usage"]
